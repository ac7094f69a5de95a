"""One process's connection to a store's database, and how a call survives losing it.

A :class:`Session` keeps one connection per process (a forked child opens
its own), in autocommit: a step of the contract is one statement, which is a
transaction of its own and one round trip. Several statements that must be
one transaction (a locked read, then a write) run in pipeline mode, where
everything up to a Sync is one transaction and travels together.

Losing the connection: a call finds out before it sends anything when it
can (a connection the server closed while idle -- a restart -- is readable
before the call writes to it), and opens another; a call whose statement
was under way when the connection went may have committed or not, and a
write is then refused saying so, never run again blindly. A read is run
again. A server that stays away is waited for ``reconnect_wait`` seconds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from ...errors import LockBusy, Refused
from ..url import masked

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - exercised by hand without the extra
    raise Refused("the PostgreSQL store needs psycopg: pip install 'jobctl[postgres]'") from exc

__all__ = ["Session", "connect", "refusing", "retried", "read", "PIPELINE", "Lost", "Unsure", "psycopg"]

#: Pipeline mode needs libpq 14 or later (psycopg's binary package bundles one);
#: with an older libpq a pipelined transaction is an ordinary one, two round trips longer.
PIPELINE = psycopg.Pipeline.is_supported()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect(url: str) -> psycopg.Connection[Any]:
    """A connection in autocommit, or ``Refused`` naming the masked URL and what to check."""
    try:
        return psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        err = Refused(f"cannot connect to {masked(url)}: {_first_line(exc)}")
        err.hint = "check the URL, the server, and libpq's settings (PGHOST, PGPASSWORD, ~/.pgpass)"
        raise err from None


@contextmanager
def refusing(url: str) -> Iterator[None]:
    """A driver error (a failed statement, a lost server) becomes ``Refused`` naming the masked URL."""
    try:
        yield
    except psycopg.Error as exc:
        raise Refused(f"{masked(url)}: {_first_line(exc)}") from exc


class Unsure(Refused):
    """The connection went away while a write was under way: it may have committed, or not."""


class Lost(Refused):
    """The connection went away before anything was written: the call may run again as a whole.

    The server rolls back a transaction whose connection ends, and a read
    changes nothing, so :func:`retried` runs the call again on a new
    connection. A write lost while under way is not this: its outcome is
    unknown, and it is a plain ``Refused``.
    """


class Session:
    """A store's connection in this process, serialised by a lock, opened again when lost.

    ``reconnects`` counts the connections opened again after one was lost.
    ``prepare`` is the setup every new connection runs (times in UTC).
    """

    def __init__(self, url: str, reconnect_wait: float, prepare: Sequence[str] = ()) -> None:
        self.url = url
        self.root = masked(url)
        self.reconnect_wait = float(reconnect_wait)
        self.reconnects = 0
        self._prepare = tuple(prepare)
        self.local = threading.local()  # .reads: this thread's call only reads; .again: a retry
        self.lock = threading.RLock()
        self._conn: psycopg.Connection[Any] | None = None
        self._cursor: psycopg.Cursor[Any] | None = None
        self._pid = 0

    def close(self) -> None:
        with self.lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = self._cursor = None

    # -- the connection ----------------------------------------------------------

    def connection(self) -> psycopg.Connection[Any]:
        """This process's connection, opened (again) when there is none or it was lost. Hold ``lock``."""
        conn = self._conn
        # A forked child must not speak on its parent's socket.
        if conn is None or self._pid != os.getpid():
            conn = self._open(again=False)
        elif conn.closed or conn.broken or not _idle_and_alive(conn):
            with contextlib.suppress(psycopg.Error):
                conn.close()  # gone already: this only releases it
            conn = self._open(again=True)
        return conn

    def _open(self, again: bool) -> psycopg.Connection[Any]:
        try:
            conn = connect(self.url)
        except Refused as exc:
            if not again:
                raise
            raise Lost(exc.message) from exc  # the server is still away: the caller waits and tries again
        try:
            for setup in self._prepare:
                conn.execute(setup)
        except psycopg.Error as exc:
            conn.close()
            raise Refused(f"{self.root}: {_first_line(exc)}") from exc
        self._conn, self._cursor, self._pid = conn, conn.cursor(binary=True), os.getpid()
        if again:
            self.reconnects += 1
        return conn

    def failed(self, conn: psycopg.Connection[Any], exc: psycopg.Error, committing: bool) -> Refused:
        """The refusal a driver error becomes: ``Lost`` when nothing can have been written."""
        first = _first_line(exc)
        if not (conn.broken or conn.closed):
            return Refused(f"{self.root}: {first}")
        if committing and not getattr(self.local, "reads", False):
            return Unsure(f"{self.root}: the connection was lost while a write was under way: {first}")
        return Lost(f"{self.root}: {first}")

    # -- statements and transactions ---------------------------------------------

    def one(self, query: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """One statement, a transaction of its own: its first row, or None. One round trip.

        The hot path of every step: the same cursor every time (a new one costs
        more than the statement's own Python), binary rows.
        """
        with self.lock:
            conn = self.connection()
            cur = self._cursor
            assert cur is not None
            try:
                cur.execute(query, params)
                return cur.fetchone()
            except psycopg.Error as exc:
                raise self.failed(conn, exc, committing=True) from exc

    def all(self, query: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """One statement's rows (a transaction of its own)."""
        with self.lock:
            conn = self.connection()
            cur = self._cursor
            assert cur is not None
            try:
                cur.execute(query, params)
                return cur.fetchall()
            except psycopg.Error as exc:
                raise self.failed(conn, exc, committing=True) from exc

    @contextmanager
    def tx(self, *, pipelined: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on this process's connection; a driver error becomes ``Refused``.

        ``pipelined`` runs it in pipeline mode: the extended query protocol
        runs everything between two Sync messages as one transaction when no
        ``BEGIN`` opens a block (PostgreSQL's "Pipelining": the Sync commits
        it, an error rolls it back). Fetching a result in between sends Flush,
        not Sync, so a row locked by the first statement stays locked while
        Python decides, and the write and the commit travel together: a
        read-decide-write transaction costs two round trips, and reads that
        need no decision between them travel in one. No ``BEGIN``/``COMMIT``
        statements of their own (psycopg's ``transaction()`` waits for each).
        Callers queue their one write last, after every check has passed: a
        refusal raised before it leaves a transaction that only read and
        locked, which the Sync ends with nothing written.

        A connection lost before the commit (nothing was written) raises
        ``Lost``, and a :func:`retried` call runs again; lost while the commit
        (the pipeline's Sync, or ``COMMIT``) was under way, a write's outcome
        is unknown: a plain ``Refused``.
        """
        with self.lock:
            conn = self.connection()
            committing = False
            try:
                if pipelined and PIPELINE:
                    with conn.pipeline():
                        yield conn
                        committing = True
                else:
                    with conn.transaction():
                        yield conn
                        committing = True
            except psycopg.errors.LockNotAvailable as exc:
                # A write that would not wait (a claim from a pick) met a row another transaction holds.
                raise LockBusy("the row is locked by another transaction (a write under way)") from exc
            except psycopg.Error as exc:
                raise self.failed(conn, exc, committing) from exc


def _idle_and_alive(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection is still there: the server has sent it nothing unasked.

    A server that ends a session (a restart, an administrator's
    pg_terminate_backend) says so and closes the socket, which turns
    readable while the connection is idle: finding that before sending lets
    a write go out on a new connection instead of into a dead one. Nothing
    else reaches an idle store connection (it listens for nothing), so
    anything there is taken for the end; at worst a connection is opened
    again that did not need to be.
    """
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


_P = ParamSpec("_P")
_T = TypeVar("_T")
_S = TypeVar("_S", bound="HasSession")


class HasSession(Protocol):
    """What :func:`retried` needs of the object whose methods it wraps."""

    session: Session


def retried(method: Callable[Concatenate[_S, _P], _T]) -> Callable[Concatenate[_S, _P], _T]:
    """Run ``method`` again while its connection was lost before anything was written, for ``reconnect_wait`` s.

    Each call is whole transactions that either committed or did not, so a
    server restart (or a dropped connection) costs a worker a pause, not a
    crash or a job. Waits between tries double from 50 ms to 1 s.
    """
    return _retrying(method, reads=False)


def read(method: Callable[Concatenate[_S, _P], _T]) -> Callable[Concatenate[_S, _P], _T]:
    """:func:`retried` for a method that only reads: a connection lost even while committing is retried."""
    return _retrying(method, reads=True)


def _retrying(method: Callable[Concatenate[_S, _P], _T], reads: bool) -> Callable[Concatenate[_S, _P], _T]:
    def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        session = self.session
        local = session.local
        deadline = None
        pause = 0.05
        while True:
            outer = getattr(local, "reads", False)
            local.reads = reads or outer
            local.again = deadline is not None  # a try after a lost connection (see the store's _create)
            try:
                return method(self, *args, **kwargs)
            except Lost as exc:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + session.reconnect_wait
                if now >= deadline:
                    err = Refused(f"{exc.message} (no connection for {session.reconnect_wait:g} s)", exc.job_id)
                    err.hint = "check that the server is up and reachable from this host"
                    raise err from exc
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 1.0)
            finally:
                local.reads = outer

    functools.update_wrapper(call, method)  # its return value is typed as a wrapper object, not as ``call``
    return call
