"""Change notices from a PostgreSQL store: LISTEN on the channel its writes are announced on."""

from __future__ import annotations

import json
import select
import time
from collections.abc import Callable
from typing import Any

from ...errors import JobError
from ...notices import RECHECK_SECONDS
from .schema import Q
from .session import connect, psycopg, refusing

__all__ = ["Listener", "CHANNEL", "SYNC_EVERY"]


#: The channel every write is announced on: by jobctl's updates (``queries.sql``), and for inserts, deletes and
#: other writers' updates by the triggers of ``migrate-5.sql``.
CHANNEL = "jobctl_jobs"

#: Seconds between the round trips that prove the listening connection alive.
SYNC_EVERY = 1.0


class Listener:
    """A connection of its own that LISTENs for the store's row changes [JOB-N1].

    One notice is sent per row written or removed, as its
    transaction commits, naming the schema, the id and the row's revision;
    this listener keeps the ones of its own schema (one database may hold
    several stores), and leaves out those of the revisions ``mine`` says its
    store wrote itself, when it is given.
    NOTIFY loses nothing while the listening connection lives (a notice is
    queued at the writer's commit, and a full queue fails the writer rather
    than drop it), so the one way to miss a notice is a dropped connection.
    A :meth:`read` makes one round trip: notices the server has come first,
    and a dropped connection shows at once. A read without ``sync`` takes
    what the socket holds (a closed connection makes it readable too, and
    shows there), and makes the round trip only every ``SYNC_EVERY`` seconds,
    which finds a connection that died without a word. Then it is made again
    and the read says notices were lost (the reader looks at everything).
    The full look every ``recheck`` is insurance on top, as for inotify.
    """

    recheck: float = RECHECK_SECONDS

    def __init__(self, url: str, *, mine: Callable[[str, int], bool] | None = None) -> None:
        self.url = url
        self._mine = mine
        self._conn: psycopg.Connection[Any] | None = None
        self._schema = ""
        self._heard: list[tuple[str, str]] = []
        self._down = False
        self._synced = 0.0
        self._listen()

    def _listen(self) -> None:
        conn = connect(self.url)
        try:
            with refusing(self.url):
                row = conn.execute(Q["current_schema"]).fetchone()
                self._schema = "" if row is None or row[0] is None else str(row[0])
                conn.add_notify_handler(self._hear)
                conn.execute(Q["listen"])
        except JobError:
            conn.close()
            raise
        self._conn = conn
        self._synced = time.monotonic()

    def _hear(self, notice: psycopg.Notify) -> None:
        if notice.channel != CHANNEL:
            return
        # [schema, what, id, revision]. The trigger of a store made by an early build of schema 3 sends
        # no revision (and raises none): each of its notices is news, never taken for this store's own.
        try:
            schema, what, job_id, *rest = json.loads(notice.payload)
        except (ValueError, TypeError):
            return  # not our trigger's: nothing to learn from it
        revision = rest[0] if rest else None
        if schema != self._schema or not isinstance(what, str) or not isinstance(job_id, str):
            return
        if what == "written" and self._mine is not None and isinstance(revision, int) and self._mine(job_id, revision):
            return  # this store's own write: its writer knows it already
        self._heard.append((what, job_id))

    def fileno(self) -> int | None:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return None
        try:
            return conn.fileno()
        except psycopg.Error:
            return None

    def read(self, *, sync: bool = True) -> tuple[set[str], set[str]] | None:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            try:
                now = time.monotonic()
                if sync or now - self._synced >= SYNC_EVERY:
                    conn.execute(Q["notices_sync"])
                    self._synced = now
                elif select.select([conn.fileno()], [], [], 0)[0]:
                    conn.pgconn.consume_input()  # raises when the server closed the connection
                # Notices that arrived with an answer wait in libpq's buffer, not on the
                # socket, where a select would never wake for them: take them now.
                while (pending := conn.pgconn.notifies()) is not None:
                    self._hear(psycopg.Notify(pending.relname.decode(), pending.extra.decode(), pending.be_pid))
            except (psycopg.Error, OSError, ValueError):
                pass  # dropped: made again below
            else:
                return self._take()
        return self._again()

    def _take(self) -> tuple[set[str], set[str]]:
        written: set[str] = set()
        removed: set[str] = set()
        heard, self._heard = self._heard, []
        for what, job_id in heard:  # in commit order: the last word on an id stands
            if what == "removed":
                removed.add(job_id)
                written.discard(job_id)
            else:
                written.add(job_id)
                removed.discard(job_id)
        return written, removed

    def _again(self) -> tuple[set[str], set[str]] | None:
        """Listen on a new connection. None (look at everything) the first time notices may have been lost."""
        self.close()
        self._heard = []
        lost = not self._down
        try:
            self._listen()
        except JobError:
            # The server is away. Said once; until it is back there is nothing to
            # wait on (fileno is None), and the reader polls.
            self._down = True
            return None if lost else (set(), set())
        self._down = False
        return None

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
