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

from collections.abc import Callable
from typing import Any

from ... import ids, limits
from ...errors import Exists, Invalid, JobError, NotFound
from ...record import Record, decode, prepare
from ..base import UNSET, Notices, Refusals, RowLease
from ..contract import (
    Apply,
    _claim_terms,
    _epoch,
    _left,
    _recall_terms,
    _want,
    askable,
    claiming,
    content,
    finishing,
    holding,
    imported,
    intending,
    progressing,
    recalling,
    releasing,
    renewing,
)
from . import row
from .batch import BatchClaims, finish_terms
from .keys import KEYS
from .listener import Listener
from .reads import SCAN_PAGE, RowReads
from .schedules import ScheduleRows
from .schema import UNDECODABLE, Q, values_kept
from .session import RECONNECT_WAIT, RECONNECT_WAIT_ENV, Unsure, reconnect_wait_of, retried
from .workers import WorkerRows

__all__ = ["PostgresStore", "SCAN_PAGE", "RECONNECT_WAIT", "RECONNECT_WAIT_ENV", "reconnect_wait_of"]


class PostgresStore(RowReads, BatchClaims, WorkerRows, ScheduleRows):
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

    def __repr__(self) -> str:
        return f"PostgresStore({self.root!r})"

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            return self._write(job_id, claiming(job_id, owner, ttl, None, vet, KEYS), wait=wait)
        params = {"owner": row.text_fit(owner, "owner", job_id), "ttl": row.interval(ttl)}
        return self._step(job_id, "claim", params, claiming(job_id, owner, ttl, keys=KEYS), wait=wait)

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
        params = finish_terms(epoch, state, error, given)
        if params is None:
            return self._write(job_id, rules)  # the rules refuse it in their order (terminal first)
        return self._step(job_id, "finish", params, rules)

    def set_intent(self, job_id: str, want: str, by: str = "") -> Record:
        _want(want, job_id)
        rules = intending(job_id, want, by)
        if not askable(by) or not row.fits(by or ""):
            # A name no record takes, or text a column cannot keep: refused as the rules write it, after terminal.
            return self._write(job_id, rules)
        return self._step(job_id, "set_intent", {"want": want, "by": by or ""}, rules)

    def recall(self, job_id: str, epoch: int, reason: str, by: str = "", grace: float = 30.0) -> Record:
        window = _recall_terms(job_id, epoch, reason, grace)
        rules = recalling(job_id, epoch, reason, by, window)
        texts = askable(by) and reason.isprintable() and row.fits(reason) and row.fits(by or "")
        if window > limits.YEAR * 100 or not texts:
            # Past what an interval (or a datetime) may hold, or text a column cannot keep: the rules
            # refuse it as they write it, after the record's verdicts.
            return self._write(job_id, rules)
        params = {"epoch": epoch, "reason": reason, "by": by or "", "grace": row.interval(window)}
        return self._step(job_id, "recall", params, rules)

    def submit(self, record: Record, *, wait: bool = True) -> str:
        """Write a new job in one statement; its times are the store's clock as it is written [JOB-S1].

        ``wait`` changes nothing here: the statement holds the row's lock only while it runs on the
        server, which a client stopped in the middle does not prolong.
        """
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
        rec = imported(data, expect, what)
        self._insert(values_kept(rec, data), fresh=False, data=data)
        return rec.id

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
    def remove(self, job_id: str, before: Callable[[Record], bool] | None = None) -> bool:
        """Delete an ended job's row in one statement; False when it is missing, not ended, or unreadable here.

        With ``before``: the row is read, ``before`` asked on its record
        (ended), and the row deleted only at the revision read.
        """
        ids.check(job_id)
        revision = None
        if before is not None:
            try:
                got = self._row(job_id)
                rec = row.record_of(got)
            except JobError:
                return False
            if not rec.terminal or not before(rec):
                return False
            revision = got[row.REVISION]
        self._held.forget(job_id)
        terms = {"id": job_id, "understood": self._models(), "revision": revision}
        return self.session.one(Q["remove"], terms) is not None

    def sweep(self, job_id: str | None = None, refused: Refusals | None = None) -> int:
        """Nothing to sweep: a statement leaves no staging temporaries behind."""
        if job_id is not None:
            ids.check(job_id)
        return 0

    def notices(self, *, news_only: bool = False) -> Notices:
        """LISTEN on the store's channel (:class:`.listener.Listener`): every write sends its id.

        With ``news_only`` the notices of this store's own writes are left out
        (each names the row's revision, and this store keeps the revisions it
        wrote): a worker's keepers hear what others wrote to their jobs, not
        the echo of their own renewals and their own claim.
        """
        return Listener(self.url, mine=self._held.mine if news_only else None)
