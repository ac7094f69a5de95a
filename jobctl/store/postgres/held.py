"""What a PostgreSQL store remembers of the rows it touched: the last of each, and its own revisions.

Every write raises a row's ``revision`` by one (jobctl's updates in their
statements, the trigger another writer's updates: schema version 5). So a
store that holds a row as it read or wrote it at revision ``r``, and whose
next step answers ``r + 1``, knows the whole row without reading it: the
step's statement hands back only what it set, and the store lays that over
the row it holds (:func:`.row.laid_over`). And a notice
that names a revision this store's holder wrote itself tells that holder
nothing new (:meth:`Held.mine`, for ``notices(news_only=True)``).
"""

from __future__ import annotations

import threading

from .row import Row

__all__ = ["Held", "KEEP", "HOLDERS"]

#: Rows a store keeps, the last it read or wrote, so that a step's statement need hand back only what it set.
KEEP = 2048

#: The steps only a job's holder (or its claimer) takes: the notices of their writes are not news to it.
HOLDERS = frozenset({"claim", "renew", "release", "progress", "finish"})


class Held:
    """The newest :data:`KEEP` rows a store read or wrote, and the runs of revisions its holder steps wrote.

    A worker's slots share one store: its changes are made under a lock (a
    lookup is one dictionary read, and needs none).
    """

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._rows: dict[str, Row] = {}
        self._mine: dict[str, tuple[int, int]] = {}

    def get(self, job_id: str) -> Row | None:
        return self._rows.get(job_id)

    def hold(self, got: Row) -> None:
        """Keep the row, the last this store read or wrote of its job (the oldest kept is forgotten)."""
        rows = self._rows
        with self._lock:
            rows.pop(got[0], None)
            rows[got[0]] = got
            if len(rows) > self.keep:
                del rows[next(iter(rows))]

    def forget(self, job_id: str) -> None:
        """The row was replaced or removed by other means: read it again next time."""
        with self._lock:
            self._rows.pop(job_id, None)

    def wrote(self, job_id: str, revision: int) -> None:
        """Keep the revision a holder's own step gave the row: its notice tells the holder nothing new.

        Kept per row as a run of revisions this store wrote one after the
        other: a notice may arrive after several such steps, and nobody else
        wrote in between (each write raises the revision by one). Only the
        steps in :data:`HOLDERS` count: an intent or a recall this same store
        writes (a board in the worker's process) is news to the job's holder,
        and a write through ``update`` is left to be heard.
        """
        mine = self._mine
        with self._lock:
            low, high = mine.pop(job_id, (revision, revision - 1))
            mine[job_id] = (low, revision) if high == revision - 1 else (revision, revision)
            if len(mine) > self.keep:
                del mine[next(iter(mine))]

    def mine(self, job_id: str, revision: int) -> bool:
        """Whether the row's ``revision`` is one this store's holder steps wrote (read from the listener's thread)."""
        low, high = self._mine.get(job_id, (0, -1))
        return low <= revision <= high
