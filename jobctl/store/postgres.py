"""The PostgreSQL store: the same contract over one table, for workers on many hosts.

Each row holds a record's canonical bytes -- the file binding's, made by the
same codec -- plus columns derived from those bytes in the same transaction
(state, kind, epoch, owner, expiry, intent, not-before, dependencies,
pipeline, created_at), which serve queries and nothing else.

Every write is one transaction: ``SELECT ... FOR UPDATE`` the row, decode it,
run the contract's preconditions and effect (:mod:`jobctl.store.contract`, the
code the file store runs), encode, ``UPDATE``. The server's clock, read inside
that transaction, decides leases and stamps times [JOB-O4], so hosts with
skewed clocks agree. SQL lives in ``postgres/*.sql`` as named queries; nothing
is formatted into a statement.

psycopg (the ``postgres`` extra) is imported only when a store URL asks for
this module. It talks through libpq, so ``PGHOST``, ``PGPASSWORD``,
``~/.pgpass`` and service files work as libpq users expect.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Concatenate, ParamSpec, TypeVar

from .. import ids, limits
from ..errors import Exists, JobError, LockBusy, NotFound, Refused
from ..notices import RECHECK_SECONDS
from ..record import Record, decode, encode
from ..schedule import after_of, not_before, pipeline_of
from ..summary import Summary
from .base import Listing, Notices, OpenListing, RowLease, Skipped, Unreadable
from .contract import Apply, ContractStore, _claim_terms, _claiming
from .file import is_orphan
from .location import masked

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - exercised by hand without the extra
    raise Refused("the PostgreSQL store needs psycopg: pip install 'jobctl[postgres]'") from exc

__all__ = ["PostgresStore", "Listener", "SCHEMA_VERSION", "SQL_DIR", "queries", "schema_status", "init", "migrate"]

#: Rows per page of :meth:`PostgresStore.scan`.
SCAN_PAGE = 500

#: Seconds a store goes on trying to reach its server again after a connection it had was lost.
RECONNECT_WAIT = 30.0

#: The schema version this jobctl writes and reads (2: the change-notice trigger).
SCHEMA_VERSION = 2
SQL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "postgres")

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def queries(path: str | None = None) -> dict[str, str]:
    """The named queries of ``queries.sql``: each ``-- name: x`` line starts query ``x``."""
    with open(path or os.path.join(SQL_DIR, "queries.sql"), encoding="utf-8") as fh:
        text = fh.read()
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


Q = queries()
Clock = Callable[[], datetime]

#: Pipeline mode needs libpq 14 or later (psycopg's binary package bundles one);
#: with an older libpq a pipelined transaction is an ordinary one, two round trips longer.
_PIPELINE = psycopg.Pipeline.is_supported()


def _connect(url: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        err = Refused(f"cannot connect to {masked(url)}: {reason}")
        err.hint = "check the URL, the server, and libpq's settings (PGHOST, PGPASSWORD, ~/.pgpass)"
        raise err from None


class _Lost(Refused):
    """The connection went away before the transaction could commit: nothing was written.

    The server rolls back a transaction whose connection ends, so the call
    that raised this may run again as a whole, on a new connection
    (:func:`_retried`). A connection lost while committing is not this: its
    outcome is unknown, and it is a plain ``Refused``.
    """


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _retried(method: Callable[Concatenate[PostgresStore, _P], _T]) -> Callable[Concatenate[PostgresStore, _P], _T]:
    """Run ``method`` again while its connection was lost before commit, for up to ``reconnect_wait`` seconds.

    Each call is whole transactions that either committed or did not, so a
    server restart (or a dropped connection) costs a worker a pause, not a
    crash or a job. Waits between tries double from 50 ms to 1 s.
    """
    return _retrying(method, reads=False)


def _read(method: Callable[Concatenate[PostgresStore, _P], _T]) -> Callable[Concatenate[PostgresStore, _P], _T]:
    """:func:`_retried` for a method that only reads: a connection lost even while committing is retried."""
    return _retrying(method, reads=True)


def _retrying(
    method: Callable[Concatenate[PostgresStore, _P], _T], reads: bool
) -> Callable[Concatenate[PostgresStore, _P], _T]:
    def call(self: PostgresStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        deadline = None
        pause = 0.05
        while True:
            outer = getattr(self._local, "reads", False)
            self._local.reads = reads or outer
            self._local.again = deadline is not None  # a try after a lost connection (see _create)
            try:
                return method(self, *args, **kwargs)
            except _Lost as exc:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.reconnect_wait
                if now >= deadline:
                    err = Refused(f"{exc.message} (no connection for {self.reconnect_wait:g} s)", exc.job_id)
                    err.hint = "check that the server is up and reachable from this host"
                    raise err from exc
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 1.0)
            finally:
                self._local.reads = outer

    functools.update_wrapper(call, method)  # its return value is typed as a wrapper object, not as ``call``
    return call


@contextmanager
def _refusing(url: str) -> Iterator[None]:
    """A driver error (a failed statement, a lost server) becomes ``Refused`` naming the masked URL."""
    try:
        yield
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Refused(f"{masked(url)}: {first}") from exc


def schema_status(conn: psycopg.Connection[Any]) -> int:
    """The schema version the database holds; 0 when jobctl was never initialised there."""
    row = conn.execute(Q["schema_exists"]).fetchone()
    if row is None or not row[0]:
        return 0
    row = conn.execute(Q["schema_version"]).fetchone()
    return 0 if row is None else int(row[0])


def _steps(sql_dir: str, target: int) -> dict[int, str]:
    """``schema-1.sql`` creates version 1; ``migrate-<n>.sql`` moves version n-1 to n."""
    steps = {}
    for n in range(1, target + 1):
        name = "schema-1.sql" if n == 1 else f"migrate-{n}.sql"
        with open(os.path.join(sql_dir, name), encoding="utf-8") as fh:
            steps[n] = fh.read()
    return steps


def init(url: str, *, sql_dir: str = SQL_DIR, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Create the schema in an empty database: ``(version before, version after)``.

    A database already at ``target`` is left alone; an older one is refused
    (``jobctl db migrate`` moves it), a newer one too.
    """
    with _connect(url) as conn, _refusing(url), conn.transaction():
        found = schema_status(conn)
        if found == 0:
            for _n, script in sorted(_steps(sql_dir, target).items()):
                conn.execute(script.encode())  # a script of our own: DDL only, no parameters
            conn.execute(Q["first_version"], {"version": target})
            return 0, target
        _refuse_version(url, found, target, migrate_hint=True)
        return found, found


def migrate(url: str, *, sql_dir: str = SQL_DIR, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Move an older schema forward to ``target`` in one transaction: ``(before, after)``."""
    with _connect(url) as conn, _refusing(url), conn.transaction():
        found = schema_status(conn)
        if found == 0:
            raise _uninitialised(url)
        if found > target:
            _refuse_version(url, found, target, migrate_hint=False)
        steps = _steps(sql_dir, target)
        for n in range(found + 1, target + 1):
            conn.execute(steps[n].encode())
        if found != target:
            conn.execute(Q["set_version"], {"version": target})
        return found, target


def _uninitialised(url: str) -> Refused:
    err = Refused(f"{masked(url)} holds no jobctl store")
    err.hint = f"create one with: jobctl db init --store '{masked(url)}'"
    return err


def _refuse_version(url: str, found: int, target: int, migrate_hint: bool) -> None:
    if found > target:
        err = Refused(f"{masked(url)} has schema version {found}, newer than this jobctl knows ({target})")
        err.hint = "upgrade jobctl; an older one must not write a newer schema"
        raise err
    if found < target and migrate_hint:
        err = Refused(f"{masked(url)} has schema version {found}; this jobctl needs {target}")
        err.hint = f"move it forward with: jobctl db migrate --store '{masked(url)}'"
        raise err


def _columns(job_id: str, data: bytes, rec: Record) -> dict[str, Any]:
    """The indexed columns, derived from the record the bytes hold."""
    try:
        after: list[str] = after_of(rec)
        when = not_before(rec)
        scheduled = True
    except JobError:  # malformed scheduling data: never picked, named by claim_next
        after, when, scheduled = [], None, False
    pipe = pipeline_of(rec)
    lease = rec.lease
    return {
        "id": job_id,
        "data": data,
        "state": rec.state,
        "kind": rec.kind,
        "epoch": lease.epoch,
        "owner": lease.owner,
        "expires_at": lease.expires_at,
        "want": rec.want,
        "not_before": when,
        "after": after,
        "pipeline": None if pipe is None else pipe[0],
        "scheduled": scheduled,
        "created_at": rec.created_at,
    }


class PostgresStore(ContractStore):
    """A store in a PostgreSQL database (schema made by ``jobctl db init``).

    ``clock`` replaces the server's clock; only tests that move time by hand
    pass one. Operations are serialised on one connection per process (a
    forked child opens its own). The first connection must succeed; one
    lost later (the server restarted) is opened again, and the call that
    found it lost runs again, for up to ``reconnect_wait`` seconds
    (:func:`_retried`); ``reconnects`` counts the connections opened again.
    """

    def __init__(self, url: str, clock: Clock | None = None, reconnect_wait: float = RECONNECT_WAIT) -> None:
        self.url = url
        self.root = masked(url)
        self._clock = clock
        self.reconnect_wait = float(reconnect_wait)
        self.reconnects = 0
        self._local = threading.local()  # .reads: this thread's call only reads (see _read); .again: a retry
        self.work_dir = os.path.join(os.path.expanduser("~"), ".abstraction", "work")
        self._lock = threading.RLock()
        self._conn: psycopg.Connection[Any] | None = None
        self._pid = 0
        try:
            with self._tx() as conn:
                found = schema_status(conn)
            if found == 0:
                raise _uninitialised(url)
            if found != SCHEMA_VERSION:
                _refuse_version(url, found, SCHEMA_VERSION, migrate_hint=True)
        except JobError:
            self.close()
            raise
        self.schema_version = found

    def __repr__(self) -> str:
        return f"PostgresStore({self.root!r})"

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the connection ----------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        # A forked child must not speak on its parent's socket; a broken
        # connection (the server restarted) is replaced at the next call.
        if conn is None or self._pid != os.getpid():
            conn = self._conn = _connect(self.url)
            self._pid = os.getpid()
        elif conn.closed or conn.broken:
            with contextlib.suppress(psycopg.Error):
                conn.close()  # broken already: this only releases it
            try:
                conn = _connect(self.url)
            except Refused as exc:  # the server is still away: the caller waits and tries again
                raise _Lost(exc.message) from exc
            self._conn = conn
            self.reconnects += 1
        return conn

    def _failed(self, conn: psycopg.Connection[Any], exc: psycopg.Error, committing: bool) -> Refused:
        """The refusal a driver error becomes: ``_Lost`` when the connection went away before the commit."""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not (conn.broken or conn.closed):
            return Refused(f"{self.root}: {first}")
        if committing and not getattr(self._local, "reads", False):
            return Refused(f"{self.root}: the connection was lost while committing: {first}")
        return _Lost(f"{self.root}: {first}")

    @contextmanager
    def _tx(self, *, pipelined: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on this process's connection; a driver error becomes ``Refused``.

        ``pipelined`` runs it in pipeline mode (:meth:`_pipelined`): a
        read-decide-write transaction costs two round trips, the locked read
        and then the write with its commit, not four.

        A connection found lost before the commit (the first statement finds
        an idle connection the server dropped) raises ``_Lost``: nothing was
        written, and a :func:`_retried` call runs again. Lost while the commit
        (the pipeline's Sync, or ``COMMIT``) was under way, a write's outcome
        is unknown: a plain ``Refused``.
        """
        with self._lock:
            conn = self._connection()
            committing = False
            try:
                if pipelined and _PIPELINE:
                    with self._pipelined(conn):
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
                raise self._failed(conn, exc, committing) from exc

    @staticmethod
    @contextmanager
    def _pipelined(conn: psycopg.Connection[Any]) -> Iterator[None]:
        """One transaction in pipeline mode: the statements up to the closing Sync.

        The extended query protocol runs everything between two Sync messages
        as one transaction when no ``BEGIN`` opens a block (PostgreSQL's
        "Pipelining": the Sync commits it, an error rolls it back). Fetching
        a result in between sends Flush, not Sync, so a row locked by the
        first statement stays locked while Python decides, and the write and
        the commit travel together. No ``BEGIN``/``COMMIT`` statements, no
        round trips of their own (psycopg's ``transaction()`` waits for each).

        The callers queue their one write last, after every check has passed:
        a refusal raised before it leaves a transaction that only read and
        locked, which the Sync ends with nothing written. A driver error
        aborts the pipeline, and the Sync rolls the transaction back.
        """
        with conn.pipeline():
            yield

    @contextmanager
    def _alone(self) -> Iterator[psycopg.Connection[Any]]:
        """One statement in a transaction of its own (the connection's autocommit): one round trip.

        For a read, or a write, that a single statement makes whole: wrapping it
        in ``BEGIN`` and ``COMMIT`` would add two round trips and nothing else.
        A lost connection raises ``_Lost`` for a retry: the reads are safe to
        run again, and the one write here (:meth:`_create`'s ``INSERT``)
        recognises its own row when it runs again.
        """
        with self._lock:
            conn = self._connection()
            try:
                yield conn
            except psycopg.Error as exc:
                raise self._failed(conn, exc, committing=False) from exc

    def _now(self, conn: psycopg.Connection[Any]) -> datetime:
        if self._clock is not None:
            return self._clock()
        row = conn.execute(Q["clock"]).fetchone()
        assert row is not None
        when: datetime = row[0]
        return when.astimezone(timezone.utc)  # the session's time zone is the server's choice

    @_read
    def now(self) -> datetime:
        """The server's clock [JOB-O4]: every lease is judged by it, whoever asks."""
        if self._clock is not None:
            return self._clock()
        with self._alone() as conn:
            return self._now(conn)

    def work_path(self, job_id: str) -> str:
        """The job's scratch name on this host (``work_dir``, default ``~/.abstraction/work``); never created."""
        return os.path.join(self.work_dir, ids.check(job_id))

    # -- reads -------------------------------------------------------------------

    @_read
    def load_bytes(self, job_id: str) -> bytes:
        ids.check(job_id)
        with self._alone() as conn:
            row = conn.execute(Q["load"], {"id": job_id}, binary=True).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}", job_id)
        return bytes(row[0])

    def load(self, job_id: str) -> Record:
        return decode(self.load_bytes(job_id), job_id, named=True)

    @_read
    def _read_epoch(self, job_id: str) -> tuple[int, bytes, bool]:
        ids.check(job_id)
        with self._alone() as conn:
            row = conn.execute(Q["read_epoch"], {"id": job_id}).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}", job_id)
        return int(row[0]), bytes(row[1]), True  # the column is derived from the bytes: exact

    @_read
    def ids(self) -> list[str]:
        with self._tx() as conn:
            return [row[0] for row in conn.execute(Q["ids"])]

    def _listing(self, rows: Iterable[tuple[str, bytes]]) -> Listing:
        listing = Listing()
        for job_id, data in rows:
            try:
                listing.append(decode(bytes(data), job_id, named=True))
            except JobError as exc:
                listing.unreadable.append((job_id, exc))
        return listing

    @_read
    def list(self) -> Listing:
        with self._tx() as conn:
            rows = conn.execute(Q["list"]).fetchall()
        return self._listing(rows)

    @_read
    def list_open(self, *, finished: Callable[[Any, Any], None] | None = None, briefly: bool = False) -> OpenListing:
        """The rows not yet ended, decoded, and every row's state, in one statement.

        Finished rows are known by their ``state`` column alone [JOB-T1]: no
        cache is needed where the server can leave their bytes where they are
        (and none is decoded, so ``finished`` is never called).
        A row this reader cannot decode is named unreadable and left out of
        ``states``, as the file store leaves out a record it cannot read.
        """
        with self._tx() as conn:
            rows = conn.execute(Q["list_open"]).fetchall()
        out = OpenListing()
        for job_id, state, data in rows:
            if data is None:
                out.states[job_id] = state
                continue
            try:
                rec = decode(bytes(data), job_id, named=True)
            except JobError as exc:
                out.unreadable.append((job_id, exc))
                continue
            out.states[job_id] = rec.state
            out.append(rec)
        return out

    def scan(
        self,
        unreadable: Unreadable,
        *,
        summaries: bool = True,
        taken: Mapping[str, tuple[Summary, Any]] | None = None,
        opened: OpenListing | None = None,
    ) -> Iterator[Record | Summary]:
        """Every row in id order, decoded a page at a time (``summaries`` is moot: nothing is cached here).

        The ids in ``taken`` are left out (the caller has them already); ``opened`` is moot (this
        store's ``list_open`` reads no finished row).

        Each page is its own short transaction, so nothing is held while the
        caller writes what it has; a row written meanwhile is seen as it is
        when its page is read, as a file store's scan sees a record.
        """
        after = ""
        while True:
            with self._tx() as conn:
                rows = conn.execute(Q["scan_after"], {"after": after, "limit": SCAN_PAGE}).fetchall()
            for job_id, data in rows:
                if taken and job_id in taken:
                    continue
                try:
                    rec = decode(bytes(data), job_id, named=True)
                except JobError as exc:
                    unreadable.append((job_id, exc))
                    continue
                yield rec
            if len(rows) < SCAN_PAGE:
                return
            after = rows[-1][0]

    @_read
    def orphans(self) -> Listing:
        """As the file store's: the index narrows the rows, :func:`is_orphan` decides each."""
        with self._tx() as conn:
            now = self._now(conn)
            rows = conn.execute(Q["orphan_candidates"], {"now": now}).fetchall()
        found = self._listing(rows)
        out = Listing(unreadable=found.unreadable)
        out.extend(rec for rec in found if is_orphan(rec, now))
        return out

    # -- writes ------------------------------------------------------------------

    @_retried
    def _write(self, job_id: str, apply: Apply, fresh: bool = False, *, wait: bool = True) -> Record:
        ids.check(job_id)
        try:
            with self._tx(pipelined=True) as conn:
                if not wait:  # a row another transaction holds is waited for a moment only
                    conn.execute(Q["lock_patience"], {"ms": int(limits.LOCK_PATIENCE * 1000)})
                row = conn.execute(Q["load_for_update"], {"id": job_id}, binary=True).fetchone()
                if row is None:
                    raise NotFound(f"no job {job_id}", job_id)
                # the server's clock, read with the row lock held, as the file store reads it under flock
                now = self._clock() if self._clock is not None else row[1].astimezone(timezone.utc)
                rec = decode(bytes(row[0]), job_id, named=True)
                rec._exposed = False  # only update() hands it to outside code
                apply(rec, now)
                data = encode(rec, settle=True)
                conn.execute(Q["update"], _columns(job_id, data, rec))
        except JobError as exc:
            if not exc.job_id:
                exc.job_id = job_id
            raise
        return decode(data, job_id, named=True) if fresh else rec

    @_retried
    def _create(self, job_id: str, data: bytes) -> None:
        rec = decode(data, job_id, named=True)
        with self._alone() as conn:  # one INSERT is a transaction of its own
            cur = conn.execute(Q["insert"], _columns(job_id, data, rec))
            if cur.rowcount != 1:
                if getattr(self._local, "again", False):
                    # Run again after a lost connection: the INSERT that was under way may have
                    # committed. The same bytes under the id are that INSERT, not somebody else's job.
                    row = conn.execute(Q["load"], {"id": job_id}, binary=True).fetchone()
                    if row is not None and bytes(row[0]) == data:
                        return
                raise Exists(f"job {job_id} is already in the store", job_id)

    @_retried
    def replace_bytes(self, job_id: str, data: bytes) -> None:
        """Overwrite a record's bytes as another writer would: the conformance driver's ``plant``.

        The derived columns follow when this reader can decode the bytes, and
        stay as they were when it cannot (a newer writer's record).
        """
        ids.check(job_id)
        try:
            columns = _columns(job_id, data, decode(data, job_id, named=True))
        except JobError:
            columns = None
        with self._tx() as conn:
            if columns is None:
                cur = conn.execute(Q["replace_data"], {"id": job_id, "data": data})
            else:
                cur = conn.execute(Q["update"], columns)
            if cur.rowcount != 1:
                raise NotFound(f"no job {job_id}", job_id)

    def lease_source(self, job_id: str) -> RowLease | None:
        """The row, read by its id with the server's clock (``guardian_lease``); None under a test's clock."""
        ids.check(job_id)
        return RowLease(self.url, job_id, Q["guardian_lease"]) if self._clock is None else None

    @_retried
    def remove(self, job_id: str) -> bool:
        """Delete an ended job's row; False when it is missing, unreadable or not ended (``jobctl gc``).

        The row is locked and read in the transaction that deletes it, so a
        record that changed since the caller looked is judged as it is now;
        a terminal record never changes again [JOB-T1].
        """
        ids.check(job_id)
        with self._tx() as conn:
            row = conn.execute(Q["lock_for_remove"], {"id": job_id}).fetchone()
            if row is None:
                return False
            try:
                if not decode(bytes(row[0]), job_id, named=True).terminal:
                    return False
            except JobError:
                return False
            conn.execute(Q["remove"], {"id": job_id})
            return True

    @_retried
    def claim_next(
        self,
        owner: str,
        ttl: float,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> Record | None:
        """Claim the oldest runnable job with one indexed ``FOR UPDATE SKIP LOCKED`` pick.

        Runnable as :func:`jobctl.schedule.runnable` says; pickers never wait
        on each other. The claim runs the contract's claim code on the row
        under its lock, in the same transaction.
        """
        ttl_delta = _claim_terms("", owner, ttl, self.max_ttl)
        wanted = None if kinds is None else sorted(set(kinds))
        passed: list[str] = []  # rows this reader cannot decode: passed over, and named in unreadable
        claimed: Record | None = None
        malformed: list[tuple[str, bytes]] | None = None
        while True:
            # Pipelined: the pick (which reads the server's clock itself) and, on
            # the first pass, the malformed-schedule query travel in one round
            # trip; the claim's UPDATE and the Sync that commits it in a second.
            with self._tx(pipelined=True) as conn:
                given = self._clock() if self._clock is not None else None
                params = {"now": given, "kinds": wanted, "passed": passed}
                cur = conn.execute(Q["next_runnable"], params, binary=True)
                unscheduled = conn.execute(Q["unscheduled"]) if skipped is not None and malformed is None else None
                row = cur.fetchone()
                if unscheduled is not None:
                    malformed = unscheduled.fetchall()
                if row is None:
                    break
                job_id, data = row[0], bytes(row[1])
                # the session's time zone is the server's choice
                now = given if given is not None else row[2].astimezone(timezone.utc)
                try:
                    rec = decode(data, job_id, named=True)
                except JobError as exc:
                    passed.append(job_id)
                    if unreadable is not None:
                        unreadable.append((job_id, exc))
                    continue
                rec._exposed = False
                _claiming(job_id, owner, ttl_delta, rec.lease.epoch, data, True)(rec, now)
                written = encode(rec, settle=True)
                conn.execute(Q["update"], _columns(job_id, written, rec))
                claimed = rec
                break
        if skipped is not None and malformed is not None:
            self._name_unscheduled(malformed, skipped)
        return claimed

    def _name_unscheduled(self, rows: Iterable[tuple[str, bytes]], skipped: Skipped) -> None:
        """Jobs left out for malformed scheduling data, with the refusal reading it gives.

        ``rows`` are query ``unscheduled``'s, read in the pick's first round trip.
        """
        for job_id, data in rows:
            try:
                rec = decode(bytes(data), job_id, named=True)
                after_of(rec)
                not_before(rec)
            except JobError as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                skipped.append((job_id, exc))

    # -- maintenance ---------------------------------------------------------------

    def sweep(self, job_id: str | None = None) -> int:
        """Nothing to sweep: a transaction leaves no staging temporaries behind."""
        if job_id is not None:
            ids.check(job_id)
        return 0

    # -- change notices ------------------------------------------------------------

    def notices(self) -> Notices:
        """LISTEN on the store's channel (:class:`Listener`): the trigger of schema version 2 sends the ids."""
        return Listener(self.url)


#: The channel the trigger ``jobctl_jobs_notify`` (``migrate-2.sql``) sends on.
CHANNEL = "jobctl_jobs"


class Listener:
    """A connection of its own that LISTENs for the store's row changes [JOB-N1].

    The trigger sends one notice per row written or removed, as its
    transaction commits, naming the schema and the id; this listener keeps
    the ones of its own schema (one database may hold several stores).
    NOTIFY loses nothing while the listening connection lives (a notice is
    queued at the writer's commit, and a full queue fails the writer rather
    than drop it), so the one way to miss a notice is a dropped connection.
    Every :meth:`read` therefore makes one round trip: notices the server
    has come first, and a dropped connection shows at once; it is made again
    and the read says notices were lost (the reader looks at everything). A
    reader reads at least every poll interval, which bounds a miss to one.
    The full look every ``recheck`` is insurance on top, as for inotify.
    """

    recheck: float = RECHECK_SECONDS

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.Connection[Any] | None = None
        self._schema = ""
        self._heard: list[tuple[str, str]] = []
        self._down = False
        self._listen()

    def _listen(self) -> None:
        conn = _connect(self.url)
        try:
            with _refusing(self.url):
                row = conn.execute(Q["current_schema"]).fetchone()
                self._schema = "" if row is None or row[0] is None else str(row[0])
                conn.add_notify_handler(self._hear)
                conn.execute(Q["listen"])
        except JobError:
            conn.close()
            raise
        self._conn = conn

    def _hear(self, notice: psycopg.Notify) -> None:
        if notice.channel != CHANNEL:
            return
        try:
            schema, what, job_id = json.loads(notice.payload)
        except (ValueError, TypeError):
            return  # not our trigger's: nothing to learn from it
        if schema == self._schema and isinstance(what, str) and isinstance(job_id, str):
            self._heard.append((what, job_id))

    def fileno(self) -> int | None:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return None
        try:
            return conn.fileno()
        except psycopg.Error:
            return None

    def read(self) -> tuple[set[str], set[str]] | None:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            try:
                conn.execute(Q["notices_sync"])
                # Notices that arrived with the answer wait in libpq's buffer, not on the
                # socket, where a select would never wake for them: take them now.
                while (pending := conn.pgconn.notifies()) is not None:
                    self._hear(psycopg.Notify(pending.relname.decode(), pending.extra.decode(), pending.be_pid))
            except psycopg.Error:
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
