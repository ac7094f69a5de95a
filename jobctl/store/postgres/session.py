"""One process's connection to a store's database, and how a call survives losing it.

A :class:`Session` keeps one connection per process (a forked child opens
its own), in autocommit: a step of the contract is one statement, which is a
transaction of its own and one round trip. Several statements that must be
one transaction (a locked read, then a write) run in pipeline mode, where
everything up to a Sync is one transaction and travels together.

The store's sessions never sort (``enable_sort = off``, set with the time
zone as each connection opens). The pick -- the oldest runnable jobs --
must walk the index of open jobs in order and stop at the first few, never
read and sort every open row; but on a table without statistics (a
new store), or in the generic plan of a statement prepared before its
parameters are known, the planner's default estimates say almost nothing
matches the pick's conditions, and a sort then looks cheaper than the walk.
It never is, for a pick. The other statements ask for no order, read one
row by its key, or read in the primary key's order, so the setting costs
them nothing; the store sorts the few rows it reads in no order itself
(tests/unit/test_claim_next.py reads every statement's plan on a large store).

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
import math
import os
import re
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from ...errors import Invalid, LockBusy, Refused
from ..url import masked

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - exercised by hand without the extra
    raise Refused("the PostgreSQL store needs psycopg: pip install 'jobctl[postgres]'") from exc

__all__ = [
    "RECONNECT_WAIT",
    "RECONNECT_WAIT_ENV",
    "reconnect_wait_of",
    "Session",
    "connect",
    "first_line",
    "refusing",
    "retried",
    "read",
    "PIPELINE",
    "Lost",
    "Unsure",
    "psycopg",
]

#: Pipeline mode needs libpq 14 or later (psycopg's binary package bundles one);
#: with an older libpq a pipelined transaction is an ordinary one, two round trips longer.
PIPELINE = psycopg.Pipeline.is_supported()


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect(url: str) -> psycopg.Connection[Any]:
    """A connection in autocommit, or ``Refused`` naming the masked URL and what to check."""
    try:
        return psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        err = Refused(f"cannot connect to {masked(url)}: {first_line(exc)}")
        err.hint = "check the URL, the server, and libpq's settings (PGHOST, PGPASSWORD, ~/.pgpass)"
        raise err from None


@contextmanager
def refusing(url: str) -> Iterator[None]:
    """A driver error (a failed statement, a lost server) becomes ``Refused`` naming the masked URL."""
    try:
        yield
    except psycopg.Error as exc:
        raise Refused(f"{masked(url)}: {first_line(exc)}") from exc


#: A row lock not had: held past the lock patience, or two transactions waiting on each other (one is ended).
BUSY = (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected)


#: Seconds a store goes on trying to reach its server again after a connection it had was lost.
RECONNECT_WAIT = 30.0
#: The environment variable that sets another patience for every store this process opens (seconds).
RECONNECT_WAIT_ENV = "JOBCTL_PG_RECONNECT_WAIT"


def reconnect_wait_of(environ: Mapping[str, str]) -> float:
    """The patience :data:`RECONNECT_WAIT_ENV` names (0 to 86400 s, as ``90`` or ``2.5``), else the default."""
    text = environ.get(RECONNECT_WAIT_ENV, "").strip()
    if not text:
        return RECONNECT_WAIT
    try:
        seconds = float(text) if text.isascii() else math.nan
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= 86400:  # NaN and infinities fail too
        raise Invalid(f"{RECONNECT_WAIT_ENV}={text!r}: wants seconds from 0 to 86400")
    return seconds


#: SQLSTATEs of a server ending the connection: admin_shutdown, crash_shutdown, cannot_connect_now.
_GOING_AWAY = frozenset(("57P01", "57P02", "57P03"))


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
    ``prepare`` is the setup every new connection runs (statements and their
    parameters: times in UTC, no sorting, the lock patience).
    """

    def __init__(
        self, url: str, reconnect_wait: float, prepare: Sequence[tuple[str, dict[str, Any] | None]] = ()
    ) -> None:
        self.url = url
        self.root = masked(url)
        self.reconnect_wait = float(reconnect_wait)
        self.reconnects = 0
        self._prepare = tuple(prepare)
        self.local = threading.local()  # .reads: this thread's call only reads; .again: a retry
        self.lock = threading.RLock()
        self._conn: psycopg.Connection[Any] | None = None
        self._statements: Statements | None = None
        self._used = 0.0  # time.monotonic() when the connection last answered
        _SESSIONS.add(self)

    def close(self) -> None:
        with self.lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = self._statements = None

    # -- the connection ----------------------------------------------------------

    def connection(self) -> psycopg.Connection[Any]:
        """This process's connection, opened (again) when there is none or it was lost. Hold ``lock``.

        A connection idle for more than :data:`IDLE_LOOK` seconds is looked at
        first (:func:`_idle_and_alive`): a server that went away meanwhile is
        found before a write goes into the dead socket.
        """
        conn = self._conn
        now = time.monotonic()
        if conn is None:  # none yet, or a forked child's (its parent's socket is not its own)
            conn = self._open(again=False)
        elif (
            conn.closed
            or conn.broken
            or conn.pgconn.status != _OK
            or (now - self._used > IDLE_LOOK and not _idle_and_alive(conn))
        ):
            with contextlib.suppress(psycopg.Error):
                conn.close()  # gone already: this only releases it
            conn = self._open(again=True)
        self._used = now
        return conn

    def forked(self) -> None:
        """In a forked child: forget the parent's connection without touching it (it is the parent's)."""
        self._conn = self._statements = None
        self.lock = threading.RLock()

    def _open(self, again: bool) -> psycopg.Connection[Any]:
        try:
            conn = connect(self.url)
        except Refused as exc:
            if not again:
                raise
            raise Lost(exc.message) from exc  # the server is still away: the caller waits and tries again
        try:
            for setup, params in self._prepare:
                conn.execute(setup, params)
        except psycopg.Error as exc:
            conn.close()
            raise Refused(f"{self.root}: {first_line(exc)}") from exc
        self._conn, self._statements = conn, Statements(conn)
        if again:
            self.reconnects += 1
        return conn

    def failed(self, conn: psycopg.Connection[Any], exc: psycopg.Error, committing: bool) -> Refused:
        """The refusal a driver error becomes: ``Lost`` when nothing can have been written."""
        first = first_line(exc)
        if getattr(exc, "sqlstate", None) in _GOING_AWAY or conn.pgconn.pipeline_status != _PIPELINE_OFF:
            # The server ends this connection (a shutdown or a restart: whatever libpq still says, it
            # is gone), or the failure left it in pipeline mode, where it would refuse every statement
            # after ("cannot exit pipeline mode while busy"): let it go; the next call opens another.
            with contextlib.suppress(psycopg.Error):
                conn.close()
        if not (conn.broken or conn.closed or conn.pgconn.status != _OK):
            return Refused(f"{self.root}: {first}")
        if committing and not getattr(self.local, "reads", False):
            return Unsure(f"{self.root}: the connection was lost while a write was under way: {first}")
        return Lost(f"{self.root}: {first}")

    # -- statements and transactions ---------------------------------------------

    def one(self, query: str, params: dict[str, Any], *, wait: bool = True) -> tuple[Any, ...] | None:
        """One statement, a transaction of its own: its first row, or None. One round trip (:class:`Statements`).

        A row another transaction holds is waited for :data:`jobctl.limits.LOCK_PATIENCE`
        at a time (the session's ``lock_timeout``): without end while ``wait``, else
        ``LockBusy`` (see :meth:`run`).
        """
        got: tuple[Any, ...] | None = self.run(query, params, first=True, wait=wait)
        return got

    def all(self, query: str, params: dict[str, Any] | None = None, *, wait: bool = True) -> list[tuple[Any, ...]]:
        """One statement's rows (a transaction of its own); ``wait`` as :meth:`one`."""
        rows: list[tuple[Any, ...]] = self.run(query, params or {}, first=False, wait=wait)
        return rows

    def run(self, query: str, params: dict[str, Any], *, first: bool, wait: bool) -> Any:
        """:meth:`Statements.run` on this process's connection.

        Each session waits for a row lock :data:`jobctl.limits.LOCK_PATIENCE`
        seconds at most (``lock_timeout``): a write holds one for as long as
        its statement runs, a writer stopped in the middle of a read-decide-
        write transaction (the rules' path) for as long as it stays stopped.
        A caller that waits (the contract's lock waits without end [JOB-L2])
        runs the statement again; one that will not (a claim from a pick) is
        told ``LockBusy``.
        """
        while True:
            with self.lock:
                conn = self.connection()
                assert self._statements is not None
                try:
                    return self._statements.run(query, params, first=first)
                except BUSY as exc:
                    if not wait:
                        raise LockBusy("the row is locked by another transaction (a write under way)") from exc
                except psycopg.Error as exc:
                    raise self.failed(conn, exc, committing=True) from exc

    def together(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[Any, ...] | None]:
        """Several statements as one transaction in one round trip: each one's first row, or None.

        All or nothing: a statement that fails rolls the others back, and its
        error is raised (``LockBusy`` for a row another transaction held past
        the lock patience: the caller runs them apart, each with its own wait).
        Without pipeline mode (libpq before 14), an ordinary transaction: a
        round trip each, and BEGIN and COMMIT.
        """
        got: list[tuple[Any, ...] | None] = self._together(calls, first=True)
        return got

    def all_together(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[list[tuple[Any, ...]]]:
        """:meth:`together`, each statement's rows (a pick and the looks that travel with it)."""
        got: list[list[tuple[Any, ...]]] = self._together(calls, first=False)
        return got

    def _together(self, calls: Sequence[tuple[str, dict[str, Any]]], *, first: bool) -> Any:
        with self.lock:
            conn = self.connection()
            statements = self._statements
            assert statements is not None
            try:
                if not PIPELINE:
                    with conn.transaction():
                        return [statements.run(query, params, first=first) for query, params in calls]
                return statements.together(calls, first=first)
            except BUSY as exc:
                raise LockBusy("the row is locked by another transaction (a write under way)") from exc
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
            except BUSY as exc:
                # A write that would not wait (a claim from a pick) met a row another transaction holds.
                raise LockBusy("the row is locked by another transaction (a write under way)") from exc
            except psycopg.Error as exc:
                raise self.failed(conn, exc, committing) from exc


#: The run of a statement (per connection) from which it is prepared: one round trip of its own, once.
PREPARE_AT = 2

#: Seconds a connection may have been idle before a call looks whether the server is still there
#: (a system call). A server that ends the session within this of its last answer (no restart is
#: that quick) meets the write itself, which then fails as a write whose outcome is unknown.
IDLE_LOOK = 0.05

#: Every session of this process: a forked child forgets their connections (os.register_at_fork).
_SESSIONS: weakref.WeakSet[Session] = weakref.WeakSet()


def _forget_in_child() -> None:
    for session in list(_SESSIONS):
        session.forked()


os.register_at_fork(after_in_child=_forget_in_child)

_OK = psycopg.pq.ConnStatus.OK
_PIPELINE_OFF = psycopg.pq.PipelineStatus.OFF
_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_COMMAND_OK = psycopg.pq.ExecStatus.COMMAND_OK
_SYNC = psycopg.pq.ExecStatus.PIPELINE_SYNC
_BINARY = psycopg.pq.Format.BINARY
_NAMED = re.compile(r"%\((\w+)\)s")


class Statements:
    """Our named queries on one connection, each prepared once and run through libpq directly.

    The hot path of every step. psycopg's cursor machinery (a cursor, its
    generators, its prepared-statement bookkeeping) costs a statement more
    Python than the rest of the step together -- measured in instructions,
    a claim-next + finish cycle 537 thousand through a cursor, 291 thousand
    this way, and bare SQL through a cursor 213 thousand, when this was
    written -- so this takes what it needs of psycopg and no more: its
    adapters dump the parameters
    and load the rows (``Transformer``); libpq runs the statement
    (``PQexecParams`` the first time; from the second, prepared once per
    connection and parameter types, ``PQexecPrepared``), letting go of the
    GIL while it waits; binary rows. Errors are psycopg's exceptions, made
    from the server's answer.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.pgconn = conn.pgconn
        self._encoding = conn.info.encoding
        # A statement runs parsed and planned at its first run, prepared from its second: our statements
        # are written for generic plans (the `session` query's enable_sort = off), so the planning of
        # custom plans psycopg's default threshold (5) pays for buys nothing here.
        self._tx = psycopg.adapt.Transformer(conn)
        self._texts: dict[str, tuple[bytes, tuple[str, ...], list[psycopg.adapt.PyFormat]]] = {}
        self._names: dict[tuple[str, tuple[int, ...]], bytes] = {}
        self._runs: dict[tuple[str, tuple[int, ...]], int] = {}
        self._made = 0

    def run(self, query: str, params: dict[str, Any], *, first: bool) -> tuple[Any, ...] | list[Any] | None:
        """The statement's first row (or None) when ``first``, else all its rows."""
        text, name, prepare, values, types, formats = self._bind(query, params)
        pg = self.pgconn
        if prepare:
            assert name is not None
            # From here on it is parsed and planned once: a round trip of its own, this once.
            self._check(pg.prepare(name, text, types))
            self._names[(query, types)] = name
        # A None among the values is SQL NULL: libpq takes it, whatever the stub's element type says.
        if name is None:  # parse, bind and run in one round trip
            res = self._check(pg.exec_params(text, values, types, formats, _BINARY))
        else:
            res = self._check(pg.exec_prepared(name, values, formats, _BINARY))
        return self._rows(res, first)

    def first(self, query: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """:meth:`run`'s first row, or None."""
        got = self.run(query, params, first=True)
        assert not isinstance(got, list)
        return got

    def together(self, calls: Sequence[tuple[str, dict[str, Any]]], *, first: bool = True) -> list[Any]:
        """The statements in pipeline mode up to one Sync: one transaction, one round trip; each first row.

        With ``first`` false, each statement's rows (a list each).

        libpq's own waits in pipeline mode hold the GIL, so the answers are
        waited for here, on the socket (:meth:`_result`). A failed statement
        aborts the ones after it and rolls the transaction back; its error is raised.
        """
        pg = self.pgconn
        bound = [self._bind(query, params) for query, params in calls]
        pg.enter_pipeline_mode()
        try:
            for text, name, prepare, values, types, formats in bound:
                if name is None:
                    pg.send_query_params(text, values, types, formats, _BINARY)
                    continue
                if prepare:
                    pg.send_prepare(name, text, types)
                pg.send_query_prepared(name, values, formats, _BINARY)
            pg.pipeline_sync()
            pg.flush()
            answers: list[psycopg.pq.abc.PGresult] = []
            for _text, _name, prepare, _values, _types, _formats in bound:
                if prepare:
                    answers.append(self._result())
                answers.append(self._result())
            if self._result(sync=True).status != _SYNC:
                raise psycopg.OperationalError("the pipeline's Sync was not answered")
        finally:
            try:
                pg.exit_pipeline_mode()
            except psycopg.Error:
                # Still busy: the answers stopped coming (the server ended the connection midway).
                # Left in pipeline mode, the connection would refuse every statement after: it is
                # closed, so the failure is the connection's and the next call opens a new one.
                pg.finish()
        for answer in answers:
            self._check(answer)  # the first failure; those after it say only that they were aborted
        out: list[Any] = []
        for (query, _params), (_text, name, prepare, _values, types, _formats) in zip(calls, bound, strict=True):
            if prepare:
                assert name is not None
                answers.pop(0)
                self._names[(query, types)] = name
            out.append(self._rows(answers.pop(0), first))
        return out

    def _bind(
        self, query: str, params: dict[str, Any]
    ) -> tuple[bytes, bytes | None, bool, Sequence[Any], tuple[int, ...], list[Any]]:
        """``(text, prepared name, prepare it now, values, types, formats)`` for one run of ``query``."""
        got = self._texts.get(query)
        if got is None:
            got = self._texts[query] = _numbered(query)
        text, names, formats = got
        tx = self._tx
        values = tx.dump_sequence([params[name] for name in names], formats)
        # A statement is prepared for its parameters' types, as psycopg's own cache does (None is "unknown").
        types = tuple(tx.types or ())
        key = (query, types)
        name = self._names.get(key)
        prepare = False
        if name is None:
            runs = self._runs[key] = self._runs.get(key, 0) + 1
            if runs >= PREPARE_AT:
                self._made += 1  # a new name each time: one made by a pipeline that failed may exist
                name = f"jobctl_{self._made}".encode()
                prepare = True
        return text, name, prepare, values, types, list(tx.formats or ())

    def _result(self, sync: bool = False) -> psycopg.pq.abc.PGresult:
        """The next answer of a pipeline, waited for on the socket; the None after it is taken too."""
        pg = self.pgconn
        while pg.is_busy():
            select.select([pg.socket], [], [])
            pg.consume_input()
        res = pg.get_result()
        if res is None:
            raise psycopg.OperationalError("the pipeline ended early")
        if not sync:
            while pg.is_busy():
                select.select([pg.socket], [], [])
                pg.consume_input()
            pg.get_result()  # the None that ends this statement's answers
        return res

    def _rows(self, res: psycopg.pq.abc.PGresult, first: bool) -> tuple[Any, ...] | list[Any] | None:
        tx = self._tx
        count = res.ntuples
        if count == 0:
            return None if first else []
        tx.set_pgresult(res)
        if first:
            return tx.load_row(0, tuple)
        return tx.load_rows(0, count, tuple)

    def _check(self, res: psycopg.pq.abc.PGresult) -> psycopg.pq.abc.PGresult:
        if res.status in (_TUPLES_OK, _COMMAND_OK):
            return res
        raise psycopg.errors.error_from_result(res, encoding=self._encoding)


def _numbered(query: str) -> tuple[bytes, tuple[str, ...], list[psycopg.adapt.PyFormat]]:
    """Our ``%(name)s`` query as libpq's ``$n``, with the names in their order (each bound once)."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    text = _NAMED.sub(number, query)
    return text.encode(), tuple(names), [psycopg.adapt.PyFormat.AUTO] * len(names)


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
        outer = getattr(local, "reads", False), getattr(local, "again", False)
        local.reads, local.again = reads or outer[0], False
        try:
            try:
                return method(self, *args, **kwargs)
            except Lost as exc:
                lost = exc
            deadline = time.monotonic() + session.reconnect_wait
            pause = 0.05
            while True:
                now = time.monotonic()
                if now >= deadline:
                    err = Refused(f"{lost.message} (no connection for {session.reconnect_wait:g} s)", lost.job_id)
                    err.hint = "check that the server is up and reachable from this host"
                    raise err from lost
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 1.0)
                local.again = True  # a try after a lost connection (see the store's _insert)
                try:
                    return method(self, *args, **kwargs)
                except Lost as exc:
                    lost = exc
        finally:
            local.reads, local.again = outer

    functools.update_wrapper(call, method)  # its return value is typed as a wrapper object, not as ``call``
    return call
