"""The PostgreSQL store: the same contract over one table, for workers on many hosts.

A row's columns are the record (:mod:`.row`, schema version 3). Each step of
the contract -- claim, claim the next, renew, progress, finish, release,
intent, recall, submit -- is one statement whose WHERE clause states the
step's preconditions (``queries.sql``): one round trip, and the server's
clock judges every lease [JOB-O4], so hosts with skewed clocks agree. A
statement that changes no row was refused; the store then reads the row
under its lock and runs the contract's own rules on it
(:mod:`jobctl.store.contract`, the file store's code), which name the
refusal -- or, when the row moved between the two, allow the step and write
it there. The rules are the only place verdicts come from; SQL decides the
happy path. ``update`` (a holder's arbitrary change) is that locked
read-decide-write from the start.

psycopg (the ``postgres`` extra) is imported only when a store URL asks for
this package. It talks through libpq, so ``PGHOST``, ``PGPASSWORD``,
``~/.pgpass`` and service files work as libpq users expect.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ... import ids, limits
from ...errors import Exists, Invalid, JobError, LockBusy, NotFound, Refused
from ...record import STATES, Record, decode, is_orphan, known_models, prepare
from ...schedule import blocked_by
from ...summary import Summary
from ..base import UNSET, Listing, Notices, OpenListing, Records, Refusals, RowLease, Skipped, Unreadable, Verdicts
from ..contract import (
    NO_CONTENT,
    Apply,
    Content,
    ContractStore,
    _claim_terms,
    _epoch,
    _left,
    _recall_terms,
    _want,
    claiming,
    content,
    finishing,
    holding,
    intending,
    progressing,
    recalling,
    releasing,
    renewing,
    verdict,
)
from ..url import masked
from . import row
from .held import HOLDERS, Held
from .listener import Listener
from .schema import SCHEMA_VERSION, UNDECODABLE, Q, refuse_version, schema_status, uninitialised, values_kept
from .session import RECONNECT_WAIT, RECONNECT_WAIT_ENV, Session, Unsure, read, reconnect_wait_of, retried
from .workers import WorkerRows

__all__ = ["PostgresStore", "SCAN_PAGE", "RECONNECT_WAIT", "RECONNECT_WAIT_ENV", "reconnect_wait_of"]

#: Rows per page of :meth:`PostgresStore.scan`.
SCAN_PAGE = 500


#: Seconds one reading of the server's clock serves :meth:`PostgresStore.now` (with this host's monotonic clock).
CLOCK_FRESH = 1.0

Clock = Callable[[], datetime]
Row = row.Row
#: Rows as the driver hands them (a name of its own: the class's ``list`` method shadows the builtin there).
Rows = list[tuple[Any, ...]]
Answers = list[Sequence[Any] | None]


class PostgresStore(ContractStore, WorkerRows):
    """A store in a PostgreSQL database (schema made by ``jobctl db init``).

    ``clock`` replaces the server's clock; only tests that move time by hand
    pass one. Operations are serialised on one connection per process (a
    forked child opens its own, :class:`.session.Session`). The first
    connection must succeed; one lost later (the server restarted) is opened
    again, and the call that found it lost runs again, for up to
    ``reconnect_wait`` seconds (by default :data:`RECONNECT_WAIT_ENV` from
    the environment, else :data:`RECONNECT_WAIT`); ``reconnects`` counts the
    connections opened again.
    """

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
                found = schema_status(conn)
            if found == 0:
                raise uninitialised(url)
            if found != SCHEMA_VERSION:
                refuse_version(url, found, SCHEMA_VERSION, migrate_hint=True)
        except JobError:
            self.close()
            raise
        self.schema_version = found

    def __repr__(self) -> str:
        return f"PostgresStore({self.root!r})"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    # -- reads -------------------------------------------------------------------

    @read
    def _row(self, job_id: str) -> Row:
        ids.check(job_id)
        got = self.session.one(Q["load"], {"id": job_id})
        if got is None:
            raise NotFound(f"no job {job_id}", job_id)
        return got

    def load(self, job_id: str) -> Record:
        return self._holding(self._row(job_id))

    def load_bytes(self, job_id: str) -> bytes:
        return row.render(self._row(job_id))

    @read
    def ids(self) -> list[str]:
        return [got[0] for got in self.session.all(Q["ids"])]

    @read
    def list(self) -> Listing:
        return row.listing(self.session.all(Q["list"]))

    @read
    def list_open(self, *, finished: Callable[[Any, Any], None] | None = None, briefly: bool = False) -> OpenListing:
        """The rows not yet ended, and every row's state, in one round trip.

        Finished rows are known by their ``state`` column alone [JOB-T1]: no
        cache is needed where the server can leave the rest where it is (and
        none is read, so ``finished`` is never called). The open rows are read
        first: a row that finishes between the two statements is seen
        finished, which it stays. A row this reader cannot read is named
        unreadable and left out of ``states``, as the file store leaves out a
        record it cannot read.
        """
        with self.session.tx(pipelined=True) as conn:
            opened = conn.execute(Q["list_open"], binary=True)
            ended = conn.execute(Q["finished_states"], {"understood": self._models()})
        # after the Sync: one round trip
        return row.open_listing(opened.fetchall(), ended.fetchall(), self._unreadable)

    def _unreadable(self, job_id: str) -> JobError:
        """Why a finished row whose critical models this reader does not know cannot be read: its own words."""
        try:
            self.load(job_id)
        except JobError as exc:
            return exc
        return Refused(f"job {job_id} could not be read", job_id)  # it became readable meanwhile: said so

    def scan(
        self,
        unreadable: Unreadable,
        *,
        summaries: bool = True,
        taken: Mapping[str, tuple[Summary, Any]] | None = None,
        opened: OpenListing | None = None,
    ) -> Iterator[Record | Summary]:
        """Every row in id order, a page at a time (``summaries`` and ``opened`` are moot: nothing is cached here).

        The ids in ``taken`` are left out (the caller has them already). Each
        page is its own statement, so nothing is held while the caller writes
        what it has; a row written meanwhile is seen as it is when its page is
        read, as a file store's scan sees a record.
        """
        after = ""
        while True:
            rows = self._page(after)
            for got in rows:
                if taken and got[0] in taken:
                    continue
                try:
                    yield row.record_of(got)
                except JobError as exc:
                    unreadable.append((got[0], exc))
            if len(rows) < SCAN_PAGE:
                return
            after = rows[-1][0]

    @read
    def _page(self, after: str) -> Rows:
        return self.session.all(Q["scan_after"], {"after": after, "limit": SCAN_PAGE})

    @read
    def orphans(self) -> Listing:
        """As the file store's: the statement narrows the rows, :func:`is_orphan` decides each."""
        rows = sorted(self.session.all(Q["orphan_candidates"], {"now": self._now()}), key=_first)
        found = row.listing(rows)
        out = Listing(unreadable=found.unreadable)
        if rows:
            now = rows[0][-1]
            out.extend(rec for rec in found if is_orphan(rec, now))
        return out

    # -- steps: one statement each, the rules when it is refused -------------------

    @retried
    def _step(self, job_id: str, query: str, params: dict[str, Any], rules: Apply, *, wait: bool = True) -> Record:
        """Run one step's statement; when it changes nothing, the rules judge the row (:meth:`_write`).

        A claim's statement hands back the row; another step's, its revision
        and what it set (:data:`.row.STEPS`), laid over the row this store
        holds at the revision before -- or, holding none, the row is read in
        the same round trip (in the same transaction, under the row lock the
        step took: as the step left it). With ``wait`` false a row another
        transaction holds is waited for :data:`jobctl.limits.LOCK_PATIENCE` at
        most (``LockBusy``, :meth:`.session.Session.run`).
        """
        self._stepping(job_id, params)
        held = self._held.get(job_id) if query in row.STEPS else None
        while True:
            try:
                if held is not None or query not in row.STEPS:
                    got = self.session.one(Q[query], params, wait=wait)
                    whole = None
                else:
                    with self.session.tx(pipelined=True) as conn:
                        cur = conn.execute(Q[query], params, binary=True)
                        load = conn.execute(Q["load"], {"id": job_id}, binary=True)
                    got = cur.fetchone()  # after the Sync: one round trip
                    whole = load.fetchone()
                break
            except JobError as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                if not (wait and isinstance(exc, LockBusy)):
                    raise
        return self._concluded(job_id, query, got, rules, held, whole, wait=wait)

    def _stepping(self, job_id: str, params: dict[str, Any]) -> None:
        """What every step's statement is given besides its own terms: the id, the clock, the models known."""
        ids.check(job_id)
        params["id"], params["ids"] = job_id, [job_id]
        params["now"], params["understood"] = self._now(), self._models()

    def _concluded(
        self, job_id: str, query: str, got: Row | None, rules: Apply, held: Row | None, whole: Row | None, *, wait: bool
    ) -> Record:
        """The record a step's answer says the row holds now; the rules' verdict when it changed nothing."""
        if got is None:
            rec = self._write(job_id, rules, wait=wait)  # raises the verdict, unless the row moved meanwhile
            self.moved += 1
            return rec
        if query in HOLDERS:
            self._held.wrote(job_id, got[0] if query in row.STEPS else got[row.REVISION])
        if query not in row.STEPS:
            whole = got
        elif whole is None:
            assert held is not None
            # Somebody else wrote the row since this store last held it: read it as it is now.
            whole = row.laid_over(held, query, got) if got[0] == held[row.REVISION] + 1 else self._row(job_id)
        return self._holding(whole)

    def _holding(self, got: Row) -> Record:
        """The record a row holds, and the row kept for the next step's answer (:meth:`.held.Held.hold`)."""
        rec = row.record_of(got)
        self._held.hold(got)
        return rec

    def claim(
        self,
        job_id: str,
        owner: str,
        ttl_seconds: float,
        *,
        vet: Apply | None = None,
        wait: bool = True,
    ) -> Record:
        ttl = _claim_terms(job_id, owner, ttl_seconds, self.max_ttl)
        if vet is not None:  # the caller's judgement runs under the lock: the rules' path from the start
            return self._write(job_id, claiming(job_id, owner, ttl, None, vet), wait=wait)
        params = {"owner": row.text_fit(owner, "owner", job_id), "ttl": row.interval(ttl)}
        return self._step(job_id, "claim", params, claiming(job_id, owner, ttl), wait=wait)

    def renew(self, job_id: str, epoch: int, ttl_seconds: float) -> Record:
        _epoch(epoch)
        ttl = self._ttl(ttl_seconds, job_id)
        return self._step(job_id, "renew", {"epoch": epoch, "ttl": row.interval(ttl)}, renewing(job_id, epoch, ttl))

    def release(self, job_id: str, epoch: int) -> Record:
        _epoch(epoch)
        return self._step(job_id, "release", {"epoch": epoch}, holding(job_id, epoch, releasing))

    def progress(self, job_id: str, epoch: int, done: int, checkpoint: Any = UNSET) -> Record:
        _epoch(epoch)
        given = content(job_id, checkpoint, done)
        rules = holding(job_id, epoch, progressing(job_id, given))
        if given.refusal:  # no statement can take it: the rules refuse it in the contract's order, the record's first
            return self._write(job_id, rules)
        params = {"epoch": epoch, "done": done, **row.checkpoint_params(given.checkpoint, given.ranged)}
        return self._step(job_id, "progress", params, rules)

    def finish(
        self,
        job_id: str,
        epoch: int,
        state: str,
        *,
        error: str | None = None,
        checkpoint: Any = UNSET,
        done: int | None = None,
    ) -> Record:
        _epoch(epoch)
        given = content(job_id, checkpoint, _left(done))
        rules = holding(job_id, epoch, finishing(job_id, state, error, given))
        params = _finish_terms(epoch, state, error, given)
        if params is None:
            return self._write(job_id, rules)  # the rules refuse it in their order (terminal first)
        return self._step(job_id, "finish", params, rules)

    @retried
    def claim_each(self, job_ids: Sequence[str], owner: str, ttl_seconds: float) -> Verdicts:
        """Claim each job as ``claim(..., wait=False)`` would, in one statement: a record or its refusal each.

        The statement claims every job its preconditions allow; each one it
        passed over is judged by the rules as ``claim`` judges it (a row that
        moved meanwhile may be claimed there). A row another transaction
        holds past the lock patience makes them claims of their own.
        """
        apart = super().claim_each
        if len(job_ids) < 2 or len(set(job_ids)) < len(job_ids):
            return apart(job_ids, owner, ttl_seconds)  # one job, or one twice: as claims of their own
        try:
            ttl = _claim_terms("", owner, ttl_seconds, self.max_ttl)
            params = {
                "owner": row.text_fit(owner, "owner"),
                "ttl": row.interval(ttl),
                "ids": [ids.check(j) for j in job_ids],
            }
        except JobError:  # each claim on its own says what is wrong, as a claim of one job would
            return apart(job_ids, owner, ttl_seconds)
        params["now"], params["understood"] = self._now(), self._models()
        try:
            rows = self.session.all(Q["claim"], params, wait=False)
        except LockBusy:
            return apart(job_ids, owner, ttl_seconds)
        got = {found[0]: found for found in rows}
        out: Verdicts = []
        for job_id in job_ids:
            found, rules = got.get(job_id), claiming(job_id, owner, ttl)
            out.append(verdict(job_id, self._concluded, job_id, "claim", found, rules, None, None, wait=False))
        return out

    def finish_and_claim(
        self,
        job_id: str,
        epoch: int,
        state: str,
        *,
        error: str | None = None,
        next_id: str,
        owner: str,
        ttl_seconds: float,
    ) -> tuple[Record | JobError, Record | JobError]:
        """``finish``, and ``claim(next_id, wait=False)``: one transaction, one round trip; each its own verdict.

        The two statements run in the order of their ids, so two workers each
        finishing the job the other would claim next cannot wait on each
        other. When one of them waits past the lock patience, or the server
        ends it as one of two transactions waiting on each other, they run
        apart (the finish waiting, the claim not).
        """
        held = self._held.get(job_id)
        got: Answers | None = None
        finish: dict[str, Any] | None = None
        if held is not None and next_id != job_id:
            try:
                _epoch(epoch)
                ttl = _claim_terms(next_id, owner, ttl_seconds, self.max_ttl)
                claim = {"owner": row.text_fit(owner, "owner", next_id), "ttl": row.interval(ttl)}
                self._stepping(next_id, claim)
                finish = _finish_terms(epoch, state, error, NO_CONTENT)
                if finish is not None:
                    self._stepping(job_id, finish)
            except JobError:  # terms the steps refuse, each in its own words
                finish = None
        if finish is not None:
            with contextlib.suppress(LockBusy):  # a row held past the lock patience: the steps apart
                got = self._together([(job_id, Q["finish"], finish), (next_id, Q["claim"], claim)])
        if got is None:
            return super().finish_and_claim(
                job_id, epoch, state, error=error, next_id=next_id, owner=owner, ttl_seconds=ttl_seconds
            )
        rules = holding(job_id, epoch, finishing(job_id, state, error))
        done = verdict(job_id, self._concluded, job_id, "finish", got[0], rules, held, None, wait=True)
        rules = claiming(next_id, owner, ttl)
        return done, verdict(next_id, self._concluded, next_id, "claim", got[1], rules, None, None, wait=False)

    @retried
    def _together(self, steps: Sequence[tuple[str, str, dict[str, Any]]]) -> Answers:
        """The steps' statements as one transaction (:meth:`.session.Session.together`), rows locked in id order."""
        order = sorted(range(len(steps)), key=lambda i: steps[i][0])
        answers = self.session.together([(steps[i][1], steps[i][2]) for i in order])
        out: Answers = [None] * len(steps)
        for i, answer in zip(order, answers, strict=True):
            out[i] = answer
        return out

    def set_intent(self, job_id: str, want: str, by: str = "") -> Record:
        _want(want, job_id)
        rules = intending(job_id, want, by)
        if not row.fits(by or ""):  # text a column cannot keep: refused as the rules write it, after terminal
            return self._write(job_id, rules)
        return self._step(job_id, "set_intent", {"want": want, "by": by or ""}, rules)

    def recall(self, job_id: str, epoch: int, reason: str, by: str = "", grace: float = 30.0) -> Record:
        window = _recall_terms(job_id, epoch, reason, grace)
        rules = recalling(job_id, epoch, reason, by, window)
        if window > limits.YEAR * 100 or not (row.fits(reason) and row.fits(by or "")):
            # Past what an interval (or a datetime) may hold, or text a column cannot keep: the rules
            # refuse it as they write it, after the record's verdicts.
            return self._write(job_id, rules)
        params = {"epoch": epoch, "reason": reason, "by": by or "", "grace": row.interval(window)}
        return self._step(job_id, "recall", params, rules)

    @retried
    def claim_some(
        self,
        owner: str,
        ttl: float,
        limit: int,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> Records:
        """Claim up to ``limit`` of the oldest runnable jobs in one statement (pgqueuer's batch dequeue).

        Runnable as :func:`jobctl.schedule.runnable` says; ``FOR UPDATE SKIP
        LOCKED`` passes over rows other pickers hold, so pickers never wait on
        each other. Oldest first. Jobs never picked for their row (unreadable
        scheduling data, a critical model this reader does not know) are named
        in ``skipped`` and ``unreadable`` when lists are given, by a query that
        travels with the pick.
        """
        ttl_delta = _claim_terms("", owner, ttl, self.max_ttl)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Invalid(f"a claim takes at least one job, not {limit!r}")
        wanted = None if kinds is None else sorted(set(kinds))
        params = {
            "owner": row.text_fit(owner, "owner"),
            "ttl": row.interval(ttl_delta),
            "now": self._now(),
            "understood": self._models(),
            "kinds": wanted,
            "limit": limit,
        }
        if skipped is None and unreadable is None:
            rows = self.session.all(Q["claim_next"], params)
            unpicked: Rows = []
        else:
            with self.session.tx(pipelined=True) as conn:
                picked = conn.execute(Q["claim_next"], params, binary=True)
                left = conn.execute(Q["unpickable"], {"understood": params["understood"], "now": params["now"]})
            rows, unpicked = picked.fetchall(), left.fetchall()  # after the Sync: one round trip
        if unpicked:
            self._name_unpicked(sorted(unpicked, key=_first), wanted, skipped, unreadable)
        for got in rows:
            self._held.wrote(got[0], got[row.REVISION])
        claimed = [self._holding(got) for got in rows]
        claimed.sort(key=lambda rec: (rec.created_at, rec.id))
        return claimed

    def _name_unpicked(
        self, rows: Iterable[Row], kinds: Iterable[str] | None, skipped: Skipped | None, unreadable: Skipped | None
    ) -> None:
        """What the pick left out for what is at the row, named as the directory's pick names it.

        A row this reader cannot read, in ``unreadable``; an orphan of the
        wanted kinds that :func:`jobctl.schedule.blocked_by` cannot judge
        (its scheduling data cannot be read), in ``skipped`` with that
        refusal -- judged as the directory's pick judges it, dependencies
        first, so one that waits or is paused is not named.
        """
        wanted = None if kinds is None else set(kinds)
        for got in rows:
            job_id = got[0]
            try:
                rec = row.record_of(got)
            except JobError as exc:
                if unreadable is not None:
                    unreadable.append((job_id, exc))
                continue
            if skipped is None or (wanted is not None and rec.kind not in wanted) or not is_orphan(rec, got[-1]):
                continue
            try:
                blocked_by(rec, _States(self), got[-1])
            except JobError as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                skipped.append((job_id, exc))

    @read
    def _state(self, job_id: str) -> str | None:
        """A job's state, None when there is none this reader can read (what a listing's states say)."""
        got = self.session.one(Q["state_of"], {"id": job_id})
        if got is None or not known_models().issuperset(got[1]):
            return None
        return str(got[0])

    # -- the rules' path: a locked read, the contract's Python, a whole write -------

    @retried
    def _write(self, job_id: str, apply: Apply, fresh: bool = False, *, wait: bool = True) -> Record:
        """Lock the row, run ``apply`` on its record with the server's clock read under the lock, write it back.

        In pipeline mode: two round trips, the locked read and then the write
        with the commit. A refusal ``apply`` raises leaves a transaction that
        only read and locked, which ends with nothing written.
        """
        ids.check(job_id)
        while True:
            try:
                return self._written(job_id, apply, fresh)
            except LockBusy as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                if not wait:  # the session waited LOCK_PATIENCE for the row: a writer stopped mid-write
                    raise
            except JobError as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                raise

    def _written(self, job_id: str, apply: Apply, fresh: bool) -> Record:
        """:meth:`_write`'s one try."""
        with self.session.tx(pipelined=True) as conn:
            got = conn.execute(Q["lock_record"], {"id": job_id}, binary=True).fetchone()
            if got is None:
                raise NotFound(f"no job {job_id}", job_id)
            now = self._clock() if self._clock is not None else got[-1]
            rec = row.record_of(got)
            rec._exposed = False  # only update() hands it to outside code
            apply(rec, now)
            values = row.values(rec, prepare(rec, settle=True))
            conn.execute(Q["write"], values)
        written = (*(values[name] for name in row.COLUMNS), got[row.REVISION] + 1)
        if fresh:  # decoded afresh: nothing the caller's mutate holds is in it [JOB-M2]
            return self._holding(written)
        self._held.hold(written)
        return rec

    def submit(self, record: Record) -> str:
        """Write a new job in one statement; its times are the store's clock as it is written [JOB-S1]."""
        if not isinstance(record, Record):
            raise Invalid("submit takes a Record")
        job_id = ids.check(record.id) if record.id else ids.mint()
        spec = record.spec
        from ...wire import Raw

        if not isinstance(spec, dict) and not (isinstance(spec, Raw) and spec.text.startswith("{")):
            raise Invalid("spec must be a JSON object", record.id)  # named only when the caller chose the id
        rec = self._fresh(record, job_id)
        self._insert(row.values(rec, prepare(rec)), fresh=True)
        return job_id

    @staticmethod
    def _fresh(record: Record, job_id: str) -> Record:
        """The record a submit writes: no lease, pending unless it says otherwise; times left to the statement."""
        from ...record import Lease

        fresh: Record = record.replace(
            id=job_id,
            state=record.state or "pending",
            progress=record.progress.replace(updated_at=None),
            lease=Lease(),
            intent=None if record.intent is None else record.intent.replace(),
            created_at=None,
            updated_at=None,
            extensions=dict(record.extensions),
            requires=list(record.requires),
            content=list(record.content),
            critical=list(record.critical),
            _raw=dict(record._raw),
            _text=record._text,
        )
        return fresh

    def import_bytes(self, data: bytes, expect: str | None = None, what: str = "the import") -> str:
        """Add a record from its exact bytes: its columns, and the bytes themselves unless they render back."""
        if not isinstance(data, bytes):
            raise Invalid("import takes the record's bytes")
        rec = decode(data)
        if expect is not None and rec.id != expect:
            raise Invalid(f"{what} names id {expect!r} but its record is {rec.id}")
        job_id = ids.check(rec.id)
        self._insert(values_kept(rec, data), fresh=False, data=data)
        return job_id

    @retried
    def _insert(self, values: dict[str, Any], *, fresh: bool, data: bytes | None = None) -> None:
        """INSERT one row, refusing a taken id (``Exists``); a lost INSERT is looked for before it is sent again."""
        params = {**values, "fresh": fresh, "now": self._now()}
        job_id = values["id"]
        unsure = False
        try:
            if self.session.one(Q["insert"], params) is not None:
                return
        except Unsure:
            unsure = True
        if unsure or getattr(self.session.local, "again", False):
            # The INSERT that was under way may have committed: a row with our values is that INSERT.
            mine = self._same_job(job_id, values, data)
            if mine:
                return
            if mine is None and self.session.one(Q["insert"], params) is not None:
                return
        raise Exists(f"job {job_id} is already in the store", job_id)

    def _same_job(self, job_id: str, values: dict[str, Any], data: bytes | None) -> bool | None:
        """Whether the row at ``job_id`` is the one ``values`` describe (None: there is none)."""
        got = self.session.one(Q["load"], {"id": job_id})
        if got is None:
            return None
        if data is not None:
            return row.render(got) == data
        names = ("kind", "spec", "extension_keys", "extension_values", "state", "want")
        return all(got[row.COLUMNS.index(name)] == values[name] for name in names)

    @retried
    def replace_bytes(self, job_id: str, data: bytes) -> None:
        """Put bytes at a row as another writer would: the conformance driver's ``plant``.

        Bytes this reader can decode become the row's columns, kept verbatim
        when they do not render back; bytes it cannot decode are kept with the
        critical model nobody understands (:data:`.schema.UNDECODABLE`), so
        every step refuses the row and every reader is handed the bytes.
        """
        ids.check(job_id)
        try:
            values = values_kept(decode(data, job_id, named=True), data)
        except JobError:
            values = {"id": job_id, "verbatim": data, "content": [], "critical": [UNDECODABLE]}
            query = Q["forged"]
        else:
            query = Q["write"]
        self._held.forget(job_id)
        with self.session.tx() as conn:
            if conn.execute(query, values).rowcount != 1:
                raise NotFound(f"no job {job_id}", job_id)

    def lease_source(self, job_id: str) -> RowLease | None:
        """The row, read by its id with the server's clock (``guardian_lease``); None under a test's clock."""
        ids.check(job_id)
        return RowLease(self.url, job_id, Q["guardian_lease"]) if self._clock is None else None

    @retried
    def remove(self, job_id: str) -> bool:
        """Delete an ended job's row in one statement; False when it is missing, not ended, or unreadable here."""
        ids.check(job_id)
        self._held.forget(job_id)
        return self.session.one(Q["remove"], {"id": job_id, "understood": self._models()}) is not None

    def sweep(self, job_id: str | None = None, refused: Refusals | None = None) -> int:
        """Nothing to sweep: a statement leaves no staging temporaries behind."""
        if job_id is not None:
            ids.check(job_id)
        return 0

    def notices(self, *, news_only: bool = False) -> Notices:
        """LISTEN on the store's channel (:class:`.listener.Listener`): the trigger sends the ids.

        With ``news_only`` the notices of this store's own writes are left out
        (each names the row's revision, and this store keeps the revisions it
        wrote): a worker's keepers hear what others wrote to their jobs, not
        the echo of their own renewals and their own claim.
        """
        return Listener(self.url, mine=self._held.mine if news_only else None)


def _first(got: Row) -> Any:
    return got[0]


def _finish_terms(epoch: int, state: str, error: Any, given: Content) -> dict[str, Any] | None:
    """The ``finish`` statement's terms; None for a state, an error or content it cannot take.

    The rules then word the refusal, in the contract's order: the record's
    verdicts (terminal, stale epoch, lapsed lease) before the mutation's own.
    """
    if state not in STATES or given.refusal or (error is not None and not (isinstance(error, str) and row.fits(error))):
        return None
    params = {"epoch": epoch, "state": state, "done": given.done, "error": error}
    return {**params, **row.checkpoint_params(given.checkpoint, given.ranged)}


class _States(Mapping[str, str]):
    """The states of jobs a judgement of dependencies asks for, each read when asked (few: an odd row's)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def __getitem__(self, job_id: str) -> str:
        state = self._store._state(job_id)
        if state is None:
            raise KeyError(job_id)
        return state

    def __iter__(self) -> Iterator[str]:
        return iter(())  # never walked: only looked up

    def __len__(self) -> int:
        return 0
