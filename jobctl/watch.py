"""Change notices over one kind's records [JOB-N1].

A subscription's first notice is the present, whether or not anything moved.
After that a notice comes only when the *visible fingerprint* changes -- per
record of the kind, ``id|state|done/total|owner|error`` -- so a renewal, which
moves nothing but ``expires_at``, is not a change. Changes between two calls
to :meth:`Watch.next` coalesce into one notice carrying the latest records.
With a budget, ``quiet`` is reported once nothing visible changed for that
long, again every budget while silent. The file binding polls: on entry to
``next`` and then every 0.75 s (or every budget, when shorter).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .errors import JobError
from .record import Record
from .store.base import Store

__all__ = ["Notice", "Watch", "watch", "fingerprint", "POLL_SECONDS"]

POLL_SECONDS = 0.75


def fingerprint(records: list[Record]) -> tuple[str, ...]:
    """What a watcher can see of ``records``: a renewal changes none of it."""
    return tuple(f"{r.id}|{r.state}|{r.progress.done}/{r.progress.total}|{r.lease.owner}|{r.error}" for r in records)


class Notice:
    """``changed``, ``quiet`` or ``closed``, with the kind's records at that moment."""

    __slots__ = ("what", "records")

    def __init__(self, what: str, records: list[Record] | None = None) -> None:
        self.what = what
        self.records: list[Record] = [] if records is None else records

    def __repr__(self) -> str:
        return f"Notice({self.what!r}, {len(self.records)} records)"


class Watch:
    """One listener's subscription; independent listeners share nothing."""

    def __init__(
        self,
        store: Store,
        kind: str | None,
        budget: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.kind = kind
        self.budget = max(0.0, float(budget))
        self._clock = clock
        self._sleep = sleep
        self._seen: tuple[str, ...] | None = None
        self._records: list[Record] = []
        #: The records the last poll could not read, with why: ``(id, error)``.
        self.unreadable: list[tuple[str, JobError]] = []
        self._mark = 0.0
        self.closed = False

    def _poll(self) -> None:
        try:
            listing = self.store.list()
        except OSError:
            return  # a failed read keeps the last snapshot
        self._records = [r for r in listing if self.kind is None or r.kind == self.kind]
        self.unreadable = list(listing.unreadable)

    def _visible(self) -> tuple[str, ...]:
        # A record becoming unreadable (or readable again) is news too: its kind is unknown.
        return fingerprint(self._records) + tuple(f"{job_id}|unreadable" for job_id, _ in self.unreadable)

    def next(self, timeout: float | None = None) -> Notice | None:
        """Wait for the next notice. With ``timeout``, None when it passes first."""
        if self.closed:
            return Notice("closed")
        self._poll()
        now = self._clock()
        seen = self._visible()
        if self._seen is None or seen != self._seen:
            self._seen = seen
            self._mark = now
            return Notice("changed", list(self._records))
        interval = min(POLL_SECONDS, self.budget) if self.budget else POLL_SECONDS
        give_up = None if timeout is None else now + timeout
        while True:
            now = self._clock()
            if self.budget and now - self._mark >= self.budget:
                self._mark = now
                return Notice("quiet", list(self._records))
            wait = interval
            if self.budget:
                wait = min(wait, self._mark + self.budget - now)
            if give_up is not None:
                if now >= give_up:
                    return None
                wait = min(wait, give_up - now)
            self._sleep(max(wait, 0.0))
            if self.closed:
                return Notice("closed")
            self._poll()
            seen = self._visible()
            if seen != self._seen:
                self._seen = seen
                self._mark = self._clock()
                return Notice("changed", list(self._records))

    def close(self) -> None:
        self.closed = True


def watch(store: Store, kind: str | None, budget: float = 0.0) -> Watch:
    """Subscribe to ``kind``'s records (every kind when None); ``budget`` in seconds."""
    return Watch(store, kind, budget)
