"""The contract's preconditions and effects, written once for every backend.

Each operation of DIGEST §5 is a function ``apply(rec, now)`` run on the
record *as found* under the backend's lock (a file's ``flock``, a row's
``SELECT ... FOR UPDATE``), with ``now`` read from the store's own clock
inside that lock. A refusal raises before anything is written; the checks run
in the contract's order. A backend supplies the six primitives of
:class:`ContractStore` and inherits every operation, so the file store and the
PostgreSQL store cannot drift apart in what they refuse or how.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import fsio, ids, limits
from ..errors import Invalid, JobError, LeaseExpired, LeaseHeld, Refused, StaleEpoch, Terminal
from ..record import STATES, WANTS, Intent, Lease, Recall, Record, encode, given_checkpoint, held
from ..wire import JsonText, Raw
from .base import UNSET, Skipped, Value, Verdicts

if TYPE_CHECKING:
    from ..exclusive import Keys

__all__ = [
    "ContractStore",
    "imported",
    "cancelled_words",
    "cancel_reason_of",
    "CANCEL_REASON",
    "verdict",
    "refusal",
    "Apply",
    "Content",
    "NO_CONTENT",
    "content",
    "claiming",
    "renewing",
    "holding",
    "releasing",
    "updating",
    "progressing",
    "finishing",
    "intending",
    "recalling",
]

#: One operation's precondition and effect: raise a verdict, or change ``rec`` as of ``now``.
Apply = Callable[[Record, datetime], None]


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise Invalid(f"{what} must be a non-negative number of seconds, not {value!r}")
    return float(value)


def imported(data: bytes, expect: str | None = None, what: str = "the import") -> Record:
    """The record an import of ``data`` adds, read as every reader reads it; ``Invalid`` when none may be added.

    Refused before anything is written: a record over :func:`jobctl.fsio.max_record_bytes` (a directory
    could not read it back; checked before a byte is decoded), one this reader cannot read (``Invalid``,
    ``UnknownSchema``), one naming another id than ``expect`` (``what`` names who expected it), and
    one whose id no job may have. Every backend's ``import_bytes`` reads its record here.
    """
    if not isinstance(data, bytes):
        raise Invalid("import takes the record's bytes")
    limit = fsio.max_record_bytes()
    if len(data) > limit:
        raise Invalid(
            f"{what}: the record is {len(data)} bytes, over the {limit}-byte limit on a record ({fsio.MAX_RECORD_ENV})"
        )
    from ..record import decode  # here: a piped submit reads no record, and the decoder is 0.25 ms to load

    rec = decode(data)
    if expect is not None and rec.id != expect:
        raise Invalid(f"{what} names id {expect!r} but its record is {rec.id}")
    ids.check(rec.id)
    return rec


def _epoch(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Invalid(f"epoch must be a non-negative integer, not {value!r}")
    return value


class ContractStore:
    """Every operation of the job contract over seven backend primitives.

    ``now()`` is the store's clock; ``load(id)`` reads one record without a
    lock, ``load_bytes(id)`` its stored bytes; ``_read_epoch(id)`` gives
    ``(epoch, bytes, exact)`` as read now, without the lock (``exact`` False
    when the epoch came from a pattern that may misread, and ``bytes`` must
    then be decoded to be sure); ``_write(id, apply, fresh)`` decodes the
    record under the lock, runs ``apply`` with the clock read under that lock,
    encodes and replaces it in one atomic step, and returns the record written
    (decoded afresh from the bytes when ``fresh``); ``_create(id, data)``
    writes a new record's bytes, refusing an existing id with ``Invalid`` (with
    ``wait`` false, ``LockBusy`` for a lock held past :data:`jobctl.limits.LOCK_PATIENCE`);
    ``claim_some`` claims the oldest runnable jobs.

    A backend may override any operation with a cheaper one that gives the
    same answers: the PostgreSQL store runs each step as one statement and
    leaves ``_read_epoch`` and ``_create`` to its own ``claim``, ``submit``
    and ``import_bytes``.
    """

    #: The longest lease ``claim`` and ``renew`` grant, in seconds (the ``max_ttl`` setting, default a
    #: day): a longer TTL is refused ``Invalid``, so no lease jobctl writes keeps a job ``running`` for
    #: years with nobody working on it (:func:`jobctl.limits.lease_too_long`).
    max_ttl: float = limits.DEFAULT_MAX_TTL
    #: The uid that must own a record's file for this handle to claim or change it (``--owned-only``,
    #: docs/security.md). Only a file store has files to check; on a database its roles decide.
    owned_by: int | None = None

    def now(self) -> datetime:
        raise NotImplementedError

    def _ttl(self, value: Any, job_id: str) -> float:
        """A TTL ``claim``/``renew`` may grant: a non-negative number of seconds, at most ``max_ttl``."""
        return _ttl_within(value, self.max_ttl, job_id)

    def load(self, job_id: str) -> Record:
        raise NotImplementedError

    def _read_epoch(self, job_id: str) -> tuple[int, bytes, bool]:
        raise NotImplementedError

    def _write(self, job_id: str, apply: Apply, fresh: bool = False, *, wait: bool = True) -> Record:
        raise NotImplementedError

    def _create(self, job_id: str, data: bytes, *, wait: bool = True) -> None:
        raise NotImplementedError

    def load_bytes(self, job_id: str) -> bytes:
        """The record's stored bytes, exactly; ``NotFound``. What ``jobctl export`` writes."""
        raise NotImplementedError

    def claim_some(
        self,
        owner: str,
        ttl: float,
        limit: int,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> list[Record]:
        raise NotImplementedError

    def claim_next(
        self,
        owner: str,
        ttl: float,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> Record | None:
        """The oldest runnable job, claimed: :meth:`claim_some` of one; None when nothing may start now."""
        got = self.claim_some(owner, ttl, 1, kinds, skipped=skipped, unreadable=unreadable)
        return got[0] if got else None

    def import_bytes(self, data: bytes, expect: str | None = None, what: str = "the import") -> str:
        """Add a record from its exact bytes (another store's ``load_bytes``); return its id.

        The bytes are read first (:func:`imported`), so a record this reader
        cannot read, or over the size limit on a record, is refused
        (``Invalid``, ``UnknownSchema``) and nothing is written; an
        existing id is ``Invalid``, and so is a record naming another id than
        ``expect`` when it is given (``what`` names who expected it: an
        export line). What ``jobctl import`` calls.
        """
        job_id = imported(data, expect, what).id
        self._create(job_id, data)
        return job_id

    def _as_holder(self, job_id: str, epoch: int, apply: Apply, fresh: bool = False) -> Record:
        """A write by the lease holder: terminal, stale epoch and lapse refused first (:func:`holding`)."""
        _epoch(epoch)
        return self._write(job_id, holding(job_id, epoch, apply), fresh)

    def submit(self, record: Record, *, wait: bool = True) -> str:
        if not isinstance(record, Record):
            raise Invalid("submit takes a Record")
        job_id = ids.check(record.id) if record.id else ids.mint()
        spec = record.spec
        if not isinstance(spec, dict) and not (isinstance(spec, Raw) and spec.text.startswith("{")):
            # Named only when the caller chose the id: a minted one was never created.
            raise Invalid("spec must be a JSON object", record.id)
        now = self.now()
        rec = record.replace(
            id=job_id,
            state=record.state or "pending",
            progress=record.progress.replace(updated_at=now),
            lease=Lease(),
            intent=None if record.intent is None else record.intent.replace(at=record.intent.at or now),
            created_at=now,
            updated_at=now,
            extensions=dict(record.extensions),
            requires=list(record.requires),
            content=list(record.content),
            critical=list(record.critical),
            _raw=dict(record._raw),
            _text=record._text,
        )
        self._create(job_id, encode(rec), wait=wait)
        return job_id

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
        seen, data, exact = self._read_epoch(job_id)
        with self._keys(wait) as keys:
            return self._write(job_id, claiming(job_id, owner, ttl, (seen, data, exact), vet, keys), wait=wait)

    def _keys(self, wait: bool) -> AbstractContextManager[Keys | None]:
        """What a claim takes an exclusive key from (:func:`claiming`), held until its write is done; None: none.

        A backend that keeps keys hands one out per claim; what it holds (a
        key's lock) it lets go when the block ends, after the claim's write.
        """
        return nullcontext(None)

    def renew(self, job_id: str, epoch: int, ttl_seconds: float) -> Record:
        _epoch(epoch)
        return self._write(job_id, renewing(job_id, epoch, self._ttl(ttl_seconds, job_id)))

    def release(self, job_id: str, epoch: int) -> Record:
        return self._as_holder(job_id, epoch, releasing)

    def update(self, job_id: str, epoch: int, mutate: Callable[[Record], object]) -> Record:
        # The caller's mutate may keep references into the record it was handed:
        # what it gets back is decoded afresh from the bytes written [JOB-M2].
        return self._as_holder(job_id, epoch, updating(job_id, mutate), fresh=True)

    def progress(self, job_id: str, epoch: int, done: int, checkpoint: Any = UNSET) -> Record:
        """Record how far the holder got, and optionally what a successor needs (judged as :func:`content`)."""
        return self._as_holder(job_id, epoch, progressing(job_id, content(job_id, checkpoint, done)))

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
        """Set the state; error, checkpoint and done travel in the same write [JOB-T4] (judged as :func:`content`)."""
        return self._as_holder(job_id, epoch, finishing(job_id, state, error, content(job_id, checkpoint, _left(done))))

    def claim_each(self, job_ids: Sequence[str], owner: str, ttl_seconds: float) -> Verdicts:
        """Claim each job as ``claim(..., wait=False)`` would: a record or its refusal each, in order.

        One claim after another here; one statement on PostgreSQL (the
        batch a worker's free slots take at once).
        """
        return [verdict(job_id, self.claim, job_id, owner, ttl_seconds, wait=False) for job_id in job_ids]

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
        """``finish(job_id, ...)``, then ``claim(next_id, ..., wait=False)``: each its own verdict.

        One write after the other here; one round trip on PostgreSQL (a
        worker's slot finishing its job and taking the next).
        """
        done = verdict(job_id, self.finish, job_id, epoch, state, error=error)
        return done, verdict(next_id, self.claim, next_id, owner, ttl_seconds, wait=False)

    def set_intent(self, job_id: str, want: str, by: str = "") -> Record:
        _want(want, job_id)
        return self._write(job_id, intending(job_id, want, by))

    def recall(self, job_id: str, epoch: int, reason: str, by: str = "", grace: float = 30.0) -> Record:
        window = _recall_terms(job_id, epoch, reason, grace)
        return self._write(job_id, recalling(job_id, epoch, reason, by, window))

    def cancel(self, job_id: str, by: str, ttl_seconds: float = 15.0, reason: str = "") -> Record:
        """Ask for a stop and, when nobody holds the job, stop it now [JOB-S3] [JOB-S4].

        An already cancelled job is a success (a double click); another
        terminal state is ``Terminal``. When somebody holds the lease the
        intent is recorded and its holder is expected to honour it, naming
        ``by`` in the error it ends the job with. A job this call ends says
        :func:`cancelled_words` (``by`` and ``reason``) in its error.

        A held job (intent ``pause``: waiting for approval) is claimed first
        and only then given its cancel intent: no worker adopts a paused
        job, so none can start it between the two writes (the intent first,
        as for a job that may run, would make it runnable for that moment).
        Should this process die between the claim and the intent, the lease
        lapses on a job still paused, and its adopter gives it back unrun.
        """
        reason = _cancel_reason(reason, job_id)
        rec = self.load(job_id)
        if rec.state == "cancelled":
            return rec
        if not rec.terminal:  # before any write; an ended job's verdict comes first (the intent's rules say it)
            by = asker(by, job_id)
        if rec.want == "pause" and not held(rec.lease, self.now()):
            try:
                mine = self.claim(job_id, by, ttl_seconds)
            except (LeaseHeld, Terminal):
                return self._cancel_asked(job_id, by, reason)
            self._ask_cancel(job_id, by, reason)
        else:
            self._ask_cancel(job_id, by, reason)
            try:
                mine = self.claim(job_id, by, ttl_seconds)
            except (LeaseHeld, Terminal):
                return self.load(job_id)
        return self.finish(job_id, mine.lease.epoch, "cancelled", error=cancelled_words(by, reason))

    def _ask_cancel(self, job_id: str, by: str, reason: str) -> Record:
        """The intent ``cancel``, and with a reason, the reason beside it in the same write (:data:`CANCEL_REASON`)."""
        if not reason:
            return self.set_intent(job_id, "cancel", by)
        return self._write(job_id, asking_cancel(job_id, by, reason))

    def _cancel_asked(self, job_id: str, by: str, reason: str) -> Record:
        """The cancel intent on a job another claimed first (its holder honours it); an ended job as it ended."""
        try:
            self._ask_cancel(job_id, by, reason)
        except Terminal:
            rec = self.load(job_id)
            if rec.state != "cancelled":
                raise
            return rec
        return self.load(job_id)


#: Why a job was asked to cancel, beside its intent: ``{"by": WHO, "reason": TEXT}``. Its holder, honouring
#: the intent, ends the job with the reason; it is the reason of the intent whose ``by`` it names.
CANCEL_REASON = "jobctl.run/cancel-reason@1"

#: The longest reason a cancel takes, in characters: it ends up in the record's error.
MAX_CANCEL_REASON = 1000


def _cancel_reason(reason: Any, job_id: str) -> str:
    """A cancel's reason, refused before anything is read: one line of printable text, not too long."""
    if not isinstance(reason, str):
        raise Invalid(f"job {job_id}: the cancel's reason must be text, not {type(reason).__name__}", job_id)
    if len(reason) > MAX_CANCEL_REASON:
        raise Invalid(
            f"job {job_id}: the cancel's reason is {len(reason)} characters; at most {MAX_CANCEL_REASON}", job_id
        )
    if not reason.isprintable():
        raise Invalid(f"job {job_id}: the cancel's reason holds a character that is not printable (a newline?)", job_id)
    return reason.strip()


def cancel_reason_of(rec: Record) -> str:
    """The reason given with ``rec``'s cancel intent (:data:`CANCEL_REASON`), or ``""``."""
    value = rec.extensions.get(CANCEL_REASON)
    if rec.want != "cancel" or not isinstance(value, dict) or rec.intent is None:
        return ""
    reason = value.get("reason")
    return reason if value.get("by") == rec.intent.by and isinstance(reason, str) else ""


def cancelled_words(by: str, reason: str = "") -> str:
    """The error a job cancelled on request ends with: who asked (``by``) and, when given, why."""
    words = f"cancelled at the request of {by}" if by.strip() else "cancelled on request"
    return f"{words}: {reason}" if reason.strip() else words


class Content(Value):
    """What ``progress``/``finish`` write beside the state: ``done`` and the checkpoint, judged.

    ``checkpoint`` is ``UNSET`` (leave it), ``None`` (no checkpoint), or a
    :class:`Raw` of its text, written as given, never matched against the
    spelling it replaces; ``ranged`` says whether it carries verified ranges
    (the model a write carries on). ``refusal`` is why the content cannot be
    written: it is the mutation's own error, which the contract checks after
    terminal, stale epoch and lapsed lease (DIGEST §5), so it is raised by
    the rules (:meth:`judged`) on the record as found, never before it is
    read. A backend that cannot hand such content to its statement takes the
    rules' path (a locked read) instead; its happy path is unchanged.
    """

    __slots__ = ("done", "checkpoint", "ranged", "refusal")
    done: int | None
    checkpoint: Any
    ranged: bool
    refusal: str

    def __init__(
        self, done: int | None = None, checkpoint: Any = UNSET, ranged: bool = False, refusal: str = ""
    ) -> None:
        self._init(done, checkpoint, ranged, refusal)

    def judged(self, job_id: str) -> None:
        """``Invalid`` for content that cannot be written; nothing for content that can."""
        if self.refusal:
            raise Invalid(self.refusal, job_id)


def content(job_id: str, checkpoint: Any = UNSET, done: Any = UNSET) -> Content:
    """The :class:`Content` of a holder's write: ``done`` and the checkpoint (``UNSET``: leave it), judged.

    The checkpoint as :func:`jobctl.record.given_checkpoint` says, in any
    store; a :class:`jobctl.wire.JsonText` is parsed here. Nothing is raised:
    a refusal is kept for the rules to raise in the contract's order.
    """
    try:
        if done is not UNSET:
            _done(done, job_id)
        given, ranged = _given_ranged(checkpoint, job_id)
    except Invalid as exc:
        return Content(refusal=exc.message)
    return Content(None if done is UNSET else done, given, ranged)


def _given_ranged(checkpoint: Any, job_id: str) -> tuple[Any, bool]:
    """The checkpoint as it will be written, and whether it carries verified ranges; ``Invalid`` naming the job."""
    if checkpoint is UNSET:
        return UNSET, False
    if isinstance(checkpoint, JsonText):
        checkpoint = checkpoint.raw(job_id)
    try:
        text, ranged = given_checkpoint(checkpoint)
    except Invalid as exc:
        raise Invalid(f"job {job_id}: checkpoint: {exc.message}", job_id) from None
    return (None, False) if text is None else (Raw(text), ranged)


def _ttl_within(value: Any, max_ttl: float, job_id: str) -> float:
    ttl = _seconds(value, "ttl")
    if ttl > max_ttl:
        raise Invalid(
            f"job {job_id}: ttl {value!r} is more than max_ttl ({max_ttl:g} s), the longest lease jobctl grants",
            job_id,
        )
    return ttl


def _claim_terms(job_id: str, owner: str, ttl_seconds: Any, max_ttl: float) -> float:
    """A claim's arguments, refused before anything is read: blank owner [JOB-O3], bad ttl (over ``max_ttl``)."""
    if not isinstance(owner, str) or not owner.strip():
        raise Refused("claim needs an owner", job_id)
    return _ttl_within(ttl_seconds, max_ttl, job_id)


# -- the rules: one factory an operation, its preconditions and effect as an Apply ------------------------
#
# Each runs on the record as found under the backend's lock, with the store's time read under it.
# The file store's writes are these; the PostgreSQL store's statements state the same preconditions
# in SQL, and when one is refused these judge the row and name the verdict.


def _epoch_moved(job_id: str, seen: int, data: bytes, exact: bool, rec: Record) -> None:
    """[JOB-L4]: the record moved since the claimer read epoch ``seen`` -> ``LeaseHeld``."""
    if rec.lease.epoch != seen and not exact:
        from ..record import decode  # seldom: see import_bytes

        seen = decode(data, job_id).lease.epoch  # the pattern may have misread
    if rec.lease.epoch != seen:
        raise LeaseHeld(f"job {job_id} moved since it was read (epoch {seen} -> {rec.lease.epoch})")


def claiming(
    job_id: str,
    owner: str,
    ttl: float,
    seen: tuple[int, bytes, bool] | None = None,
    vet: Apply | None = None,
    keys: Keys | None = None,
) -> Apply:
    """The claim's preconditions and effect [JOB-L4].

    ``seen`` is the ``(epoch, data, exact)`` the claimer read before taking
    the lock (:meth:`ContractStore._read_epoch`), when it read one: a record
    that moved since is ``LeaseHeld``. ``vet`` sees the record as found
    under the lock, after the contract's own checks, and refuses by raising
    (nothing is written). A record with an exclusive key takes it from
    ``keys`` once its lease is taken (``KeyHeld`` when another live job holds
    it, nothing written); a store that gives no ``keys`` claims none
    (``Refused``), so no claim runs such a job past its key.
    """
    from ..exclusive import exclusive_of  # a claim's: not on a piped submit's path

    def apply(rec: Record, now: datetime) -> None:
        lease = rec.lease
        if seen is not None:
            _epoch_moved(job_id, *seen, rec)
        if rec.terminal:
            raise Terminal(f"job {job_id} is {rec.state}; nothing reopens it")
        if held(lease, now):
            if lease.owner != owner:
                raise LeaseHeld(f"job {job_id} is held by {lease.owner} until {lease.expires_at:%Y-%m-%dT%H:%M:%SZ}")
            if lease.recall is not None:
                raise LeaseHeld(f"job {job_id} is recalled ({lease.recall.reason}); its holder cannot re-claim it")
        if vet is not None:
            vet(rec, now)
        rec.lease = Lease(owner, lease.epoch + 1, limits.later(now, ttl, "ttl", job_id))
        if rec.state in ("pending", "running"):
            rec.state = "running"
        key = exclusive_of(rec)
        if key is not None:
            if keys is None:
                raise Refused(f"job {job_id} has an exclusive key ({key!r}) this claim cannot take", job_id)
            keys.take(key, rec, now)

    return apply


def renewing(job_id: str, epoch: int, ttl: float) -> Apply:
    """Renew: ``StaleEpoch``, then ``LeaseExpired``; capped at a recall's ``until`` [JOB-R4]; terminal too [JOB-T6]."""

    def apply(rec: Record, now: datetime) -> None:
        lease = rec.lease
        if lease.epoch != epoch:
            raise StaleEpoch(f"job {job_id} is at epoch {lease.epoch}, not {epoch}")
        if not held(lease, now):
            raise LeaseExpired(f"job {job_id}: the lease of epoch {epoch} has lapsed or was released")
        expires = limits.later(now, ttl, "ttl", job_id)
        if lease.recall is not None and lease.recall.until is not None and expires > lease.recall.until:
            expires = lease.recall.until
        lease.expires_at = expires

    return apply


def holding(job_id: str, epoch: int, apply: Apply) -> Apply:
    """A write by the lease holder: ``Terminal`` [JOB-T3], ``StaleEpoch`` [JOB-L1], ``LeaseExpired`` [JOB-L5] first."""

    def checked(rec: Record, now: datetime) -> None:
        if rec.terminal:
            raise Terminal(f"job {job_id} is {rec.state}; nothing reopens it")
        if rec.lease.epoch != epoch:
            raise StaleEpoch(
                f"job {job_id} is at epoch {rec.lease.epoch}, not {epoch}: "
                f"{rec.lease.owner or 'somebody'} claimed it since"
            )
        if not held(rec.lease, now):
            raise LeaseExpired(f"job {job_id}: the lease of epoch {epoch} has lapsed or was released")
        apply(rec, now)
        rec.updated_at = now

    return checked


def releasing(rec: Record, now: datetime) -> None:
    """Release's effect: the lease ends now and has no owner; running becomes pending unless delegated [JOB-L6]."""
    rec.lease.expires_at = now
    rec.lease.owner = ""
    if rec.state == "running" and rec.delegation is None:
        rec.state = "pending"


def updating(job_id: str, mutate: Callable[[Record], object]) -> Apply:
    """The holder's own change: whatever ``mutate`` does, except to what never moves [JOB-M1]."""

    def envelope(rec: Record) -> tuple[str, tuple[str, ...]] | None:
        return None if rec.envelope is None else (rec.envelope.schema, tuple(rec.envelope.actions))

    def apply(rec: Record, now: datetime) -> None:
        before = (rec.id, rec.kind, rec.opaque_text("spec"), rec.created_at, envelope(rec))
        lease = rec.lease.replace(recall=None if rec.lease.recall is None else rec.lease.recall.replace())
        intent = None if rec.intent is None else rec.intent.replace()
        rec._exposed = True
        mutate(rec)
        after = (rec.id, rec.kind, rec.opaque_text("spec"), rec.created_at, envelope(rec))
        for name, old, new in zip(("id", "kind", "spec", "created_at", "envelope"), before, after, strict=True):
            if old != new:
                raise Invalid(f"job {job_id}: {name} cannot change under a lease [JOB-M1]")
        if rec.lease != lease:
            raise Invalid(f"job {job_id}: the lease changes only by claim, renew and release")
        if rec.intent != intent:
            raise Invalid(f"job {job_id}: intent changes only by set_intent")

    return apply


def progressing(job_id: str, given: Content) -> Apply:
    """Progress's effect: ``done`` as of now, and the checkpoint when one is given; malformed content ``Invalid``."""

    def apply(rec: Record, now: datetime) -> None:
        given.judged(job_id)
        if given.done is not None:  # always, for progress: content() judged the one it was given
            rec.progress.done = given.done
        rec.progress.updated_at = now
        if given.checkpoint is not UNSET:
            rec.checkpoint = given.checkpoint

    return apply


#: A finish that writes nothing beside the state and the error.
NO_CONTENT = Content()


def finishing(job_id: str, state: str, error: str | None, given: Content = NO_CONTENT) -> Apply:
    """Finish's effect: the state, with error, checkpoint and done when given [JOB-T4].

    A bad state word, then malformed content, ``Invalid``: the mutation's own
    errors, after the record's verdicts.
    """

    def apply(rec: Record, now: datetime) -> None:
        if state not in STATES:
            raise Invalid(f"{state!r} is not a state ({', '.join(STATES)})")
        given.judged(job_id)
        rec.state = state
        if error is not None:
            rec.error = error
        if given.checkpoint is not UNSET:
            rec.checkpoint = given.checkpoint
        if given.done is not None:
            rec.progress.done = given.done
            rec.progress.updated_at = now

    return apply


def intending(job_id: str, want: str, by: str) -> Apply:
    """set_intent: ``Terminal`` [JOB-I5]; the want recorded with who and when [JOB-I7], no epoch [JOB-I3]."""

    def apply(rec: Record, now: datetime) -> None:
        if rec.terminal:
            raise Terminal(f"job {job_id} is {rec.state}; nothing reopens it")
        rec.intent = Intent(want, asker(by, job_id), now)  # the text after the record's verdict
        rec.updated_at = now

    return apply


def asking_cancel(job_id: str, by: str, reason: str) -> Apply:
    """set_intent ``cancel`` as :func:`intending`, with the reason beside it (:data:`CANCEL_REASON`)."""
    intend = intending(job_id, "cancel", by)

    def apply(rec: Record, now: datetime) -> None:
        intend(rec, now)
        rec.extensions[CANCEL_REASON] = {"by": by, "reason": reason}

    return apply


def recalling(job_id: str, epoch: int, reason: str, by: str, window: float) -> Apply:
    """Recall: ``Terminal``, ``StaleEpoch`` [JOB-R1], ``LeaseExpired`` [JOB-R2]; the expiry lowered [JOB-R3]."""

    def apply(rec: Record, now: datetime) -> None:
        lease = rec.lease
        if rec.terminal:
            raise Terminal(f"job {job_id} is {rec.state}; there is nothing to give back")
        if lease.epoch != epoch:
            raise StaleEpoch(f"job {job_id} is at epoch {lease.epoch}, not {epoch}")
        if not held(lease, now):
            raise LeaseExpired(f"job {job_id}: nobody holds the lease of epoch {epoch}")
        # The text after the record's verdicts: it lands in the lease, and in what its holder prints.
        if not reason.isprintable():
            raise Invalid(f"job {job_id}: the recall's reason holds a character that is not printable", job_id)
        who = asker(by, job_id)
        until = limits.later(now, window, "grace", job_id)
        lease.recall = Recall(reason, now, until, who)
        if lease.expires_at is None or until < lease.expires_at:
            lease.expires_at = until
        rec.updated_at = now

    return apply


# -- the arguments, refused before anything is read ----------------------------------------------------


def verdict(job_id: str, step: Callable[..., Record], *args: Any, **kwargs: Any) -> Record | JobError:
    """What ``step(*args, **kwargs)`` returns, or the refusal it raised: one of several steps, each judged alone.

    An I/O error becomes ``Refused`` naming the job (a step that cannot
    reach its record is refused, as any other).
    """
    try:
        return step(*args, **kwargs)
    except (JobError, OSError) as exc:
        return refusal(exc, job_id)


def refusal(exc: JobError | OSError, job_id: str) -> JobError:
    """The verdict an error is for a step on ``job_id``: named by the job; an I/O error is ``Refused``."""
    if isinstance(exc, OSError):
        return Refused(f"job {job_id}: {exc.strerror or exc}", job_id)
    if not exc.job_id:
        exc.job_id = job_id
    return exc


def _left(done: int | None) -> Any:
    """``finish``'s ``done``: None leaves it as it is."""
    return UNSET if done is None else done


def _done(done: Any, job_id: str) -> None:
    if not isinstance(done, int) or not limits.DONE.holds(done):
        raise Invalid(f"done must be a whole number ({limits.DONE.text()}), not {done!r}", job_id)


def asker(by: Any, job_id: str) -> str:
    """Who asks (an intent's, a recall's or a cancel's ``by``), refused before anything is read.

    ``""`` (nobody named) or a name as :func:`jobctl.submitter.check_name`
    takes it: it lands in the intent, the recall, the lease's owner and a
    cancel's error, which stay one line. Only new input is checked: a record
    another writer left with an odd ``by`` is read as it is.
    """
    if by is None or by == "":
        return ""
    if not isinstance(by, str):
        raise Invalid(f"job {job_id}: by must be text, not {type(by).__name__}", job_id)
    from ..submitter import check_name

    try:
        return check_name(by)
    except Invalid as exc:
        raise Invalid(f"job {job_id}: {exc.message}", job_id) from None


def askable(by: Any) -> bool:
    """Whether :func:`asker` takes ``by``: a step's statement may write it as it is."""
    try:
        asker(by, "")
    except Invalid:
        return False
    return True


def _want(want: Any, job_id: str) -> None:
    if want not in WANTS:
        raise Invalid(f"intent {want!r} is not run, pause or cancel [JOB-I1]", job_id)


def _recall_terms(job_id: str, epoch: Any, reason: Any, grace: Any) -> float:
    """A recall's arguments: a reason that is not blank, an epoch, a grace in seconds."""
    if not isinstance(reason, str) or not reason.strip():
        raise Invalid("a recall needs a reason", job_id)
    _epoch(epoch)
    return _seconds(grace, "grace")
