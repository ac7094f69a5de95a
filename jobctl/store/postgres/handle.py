"""What every part of the PostgreSQL store stands on: its connection, its clock, the rows it holds.

:class:`RowHandle` opens the session and checks the schema, reads the
server's clock (:meth:`RowHandle.now`), tells every statement the critical
models this reader understands, reads one row, and keeps the last row each
step answered with (:class:`.held.Held`). The parts of
:class:`jobctl.store.postgres.store.PostgresStore` -- its reads, its steps
and the rules' path, its batch claims -- are classes over it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ... import ids, limits
from ...errors import JobError, NotFound
from ...record import Record, known_models
from ..contract import ContractStore
from ..url import masked
from . import row
from .held import Held
from .schema import SCHEMA_VERSION, Q, refuse_version, schema_status, uninitialised
from .session import Session, read, reconnect_wait_of

__all__ = ["RowHandle", "CLOCK_FRESH", "Clock", "Row", "Rows"]

#: Seconds one reading of the server's clock serves :meth:`RowHandle.now` (with this host's monotonic clock).
CLOCK_FRESH = 1.0

Clock = Callable[[], datetime]
Row = row.Row
#: Rows as the driver hands them (a name of its own: the class's ``list`` method shadows the builtin there).
Rows = list[tuple[Any, ...]]


class RowHandle(ContractStore):
    """One process's handle on a PostgreSQL store: the session, the clock, the rows held (see ``PostgresStore``)."""

    def __init__(self, url: str, clock: Clock | None = None, reconnect_wait: float | None = None) -> None:
        if reconnect_wait is None:
            reconnect_wait = reconnect_wait_of(os.environ)
        self.url = url
        self.root = masked(url)
        self._clock = clock
        setup = (Q["session"], {"ms": int(limits.LOCK_PATIENCE * 1000)})
        self.session = Session(url, reconnect_wait, prepare=[setup])
        self._clock_read: tuple[float, datetime] | None = None  # (monotonic before asking, the server's answer)
        self.work_dir = os.path.join(os.path.expanduser("~"), ".abstraction", "work")
        self._understood: tuple[frozenset[str], str] = (frozenset(), "{}")
        #: Steps whose statement was refused and which the rules then allowed, written by them:
        #: the row moved between the two (a lease lapsed, another writer finished). Without
        #: anybody else at the rows, always 0 -- a statement stricter than the rules would count here.
        self.moved = 0
        self._held = Held()
        try:
            with self.session.tx() as conn:
                found = schema_status(conn, url)
            if found == 0:
                raise uninitialised(url)
            if found != SCHEMA_VERSION:
                refuse_version(url, found, SCHEMA_VERSION, migrate_hint=True)
        except JobError:
            self.close()
            raise
        self.schema_version = found

    def close(self) -> None:
        self.session.close()

    @property
    def reconnects(self) -> int:
        return self.session.reconnects

    @property
    def reconnect_wait(self) -> float:
        return self.session.reconnect_wait

    def _connection(self) -> Any:
        """This process's connection (tests read its protocol trace)."""
        with self.session.lock:
            return self.session.connection()

    # -- what every statement is told --------------------------------------------

    def _now(self) -> datetime | None:
        """The test's clock when one was given; None: the statement reads the server's."""
        return None if self._clock is None else self._clock()

    def _models(self) -> str:
        """The critical models this reader understands, as an array literal (built once per set)."""
        known = known_models()
        cached, literal = self._understood
        if known is not cached:
            quoted = ('"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"' for name in sorted(known))
            literal = "{" + ",".join(quoted) + "}"
            self._understood = (known, literal)
        return literal

    def now(self) -> datetime:
        """The server's clock [JOB-O4], never earlier than it is: every lease is judged by it, whoever asks.

        Asked of the server at most every :data:`CLOCK_FRESH` seconds; in
        between, its last answer plus what this host's monotonic clock has
        counted since the question went out -- which includes the round trip,
        so the answer can only be late, by that round trip at most: a lease's
        end measured against it can only come early. The leases themselves are
        judged in the statements, by the server's clock as they run.
        """
        if self._clock is not None:
            return self._clock()
        mono = time.monotonic()
        read = self._clock_read
        if read is None or mono - read[0] >= CLOCK_FRESH:
            read = self._clock_read = (mono, self._server_clock())
        return read[1] + timedelta(seconds=time.monotonic() - read[0])

    @read
    def _server_clock(self) -> datetime:
        got = self.session.one(Q["clock"], {})
        assert got is not None
        when: datetime = got[0]
        return when

    def work_path(self, job_id: str) -> str:
        """The job's scratch name on this host (``work_dir``, default ``~/.abstraction/work``); never created."""
        return os.path.join(self.work_dir, ids.check(job_id))

    @read
    def _row(self, job_id: str) -> Row:
        ids.check(job_id)
        got = self.session.one(Q["load"], {"id": job_id})
        if got is None:
            raise NotFound(f"no job {job_id}", job_id)
        return got

    def _holding(self, got: Row) -> Record:
        """The record a row holds, and the row kept for the next step's answer (:meth:`.held.Held.hold`)."""
        rec = row.record_of(got)
        self._held.hold(got)
        return rec


def first(got: Row) -> Any:
    """A row's first column (its id): the sort key of rows."""
    return got[0]
