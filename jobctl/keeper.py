"""Keep one claimed job's lease while some kind of work runs under it.

A :class:`Keeper` takes a record its caller has just claimed and a
:class:`Work` -- a child process (:class:`jobctl.runner.ChildWork`) or a
Python function (:class:`jobctl.processing.FunctionWork`) -- and does, from
the thread that calls :meth:`Keeper.execute`, what every kind of work needs
of its lease, without blocking on the work: a ``poll`` loop waits on a
wake-up pipe, on whatever descriptors the work watches and on the next
deadline. At every deadline the keeper moves toward what the record asks
[JOB-I8]:

* every third of the TTL it renews the lease; the renewal returns the record,
  so the intent and the recall are read in the same write. Between renewals it
  reads the record again as soon as the store's change notices say it was
  written (a :class:`Lookout`: inotify on a directory, LISTEN/NOTIFY on
  PostgreSQL), and about once a second in any case, so a cancel or a recall
  is noticed within a notice's delay and a read, not a polling interval;
* ``cancel`` -> the work is asked to stop (a child gets SIGTERM, then SIGKILL
  after the grace), the record ends ``cancelled`` with the reason [JOB-I9] [JOB-S3];
* ``pause`` -> the work is stopped and the job released: it becomes
  ``pending`` and stays paused, so no sweep adopts it [JOB-I10] [JOB-I11];
* a recall -> the work is stopped before ``until`` and the job released,
  keeping whatever checkpoint it wrote [JOB-R3] [JOB-R6];
* the job's timeout (``jobctl.run/timeout@1``, :mod:`jobctl.timeout`) passed
  since the work started -> the work is stopped as for a cancel (TERM, the
  grace, KILL) and the attempt fails, ``timed out after …``, counted under
  the retry policy;
* a write refused ``stale_epoch`` or ``lease_expired`` (or a read showing that
  somebody else claimed) means the job is somebody else's now: the work is
  stopped at once (a child SIGKILLed) and the keeper ends fenced, writing
  nothing more [JOB-L5]. If renewals keep failing for another reason, the
  work is stopped just before the lease the keeper last obtained runs out.

When the work ends by itself, the keeper makes the final write: ``complete``
(carrying what the work leaves in the record, such as its result, in the same
update), or a failure counted under the job's retry policy
(:func:`jobctl.schedule.record_failure`): back to ``pending`` with its next
not-before time, or ``failed``. The state, the error and the retry bookkeeping
travel in one update, and the update re-reads the record under the lock, so
the checkpoint and ``done`` the work wrote itself (with the same epoch) are
what the final write carries [JOB-T4].
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from .errors import Invalid, JobError, LeaseExpired, Refused, StaleEpoch
from .lookout import Lookout
from .record import Record
from .schedule import attempt as attempt_of
from .schedule import not_before, record_failure
from .store.contract import cancel_reason_of, cancelled_words
from .timeout import timed_out, timeout_of

if TYPE_CHECKING:
    from .store.base import LeaseSource, Notices

__all__ = ["Keeper", "KeeperStore", "Lookout", "Outcome", "Work"]


class KeeperStore(Protocol):
    """What a keeper needs of a store: the holder's operations and the job's paths."""

    root: str

    def now(self) -> datetime: ...
    def load(self, job_id: str) -> Record: ...
    def renew(self, job_id: str, epoch: int, ttl_seconds: float) -> Record: ...
    def release(self, job_id: str, epoch: int) -> Record: ...
    def update(self, job_id: str, epoch: int, mutate: Callable[[Record], object]) -> Record: ...
    def finish(self, job_id: str, epoch: int, state: str, *, error: str | None = None) -> Record: ...
    def finish_and_claim(
        self, job_id: str, epoch: int, state: str, *, error: str | None, next_id: str, owner: str, ttl_seconds: float
    ) -> tuple[Record | JobError, Record | JobError]: ...
    def work_path(self, job_id: str) -> str: ...
    def lease_source(self, job_id: str) -> LeaseSource | None: ...
    def notices(self, *, news_only: bool = False) -> Notices | None: ...


# -- the outcome ----------------------------------------------------------------


@dataclass
class Outcome:
    """How one run ended.

    ``state`` is the record's state after the run's last write: ``complete``,
    ``failed``, ``cancelled``, ``pending`` (released: retry, pause, recall,
    stop), or the state somebody else left when the run was fenced or its
    final write refused (``""`` when unknown). ``reason`` says why the work
    stopped: ``exit``, ``cancel``, ``pause``, ``recall``, ``stop``,
    ``timeout``, ``fenced``, ``not-started``, or ``result`` (the work ended
    well but its result could not be stored: a failed attempt). ``then``: the
    job a slot claimed with this finish (as picked; the claim's answer).
    """

    job_id: str
    kind: str
    epoch: int
    attempt: int
    state: str = ""
    reason: str = "exit"
    exit_code: int | None = None
    error: str = ""
    retried: bool = False
    not_before: datetime | None = None
    verdict: JobError | None = None
    log: str | None = None
    pid: int | None = None
    then: tuple[Record, Record | JobError] | None = None

    @property
    def fenced(self) -> bool:
        return isinstance(self.verdict, (StaleEpoch, LeaseExpired))

    @property
    def status(self) -> int:
        """An exit status mirroring the child's (128+N for signal N); a verdict's code when fenced."""
        if self.fenced and self.verdict is not None:
            return self.verdict.exit_code
        if self.reason == "result":
            return 1  # the child's exit 0 did not complete the job
        if self.exit_code is None:
            if self.verdict is not None:
                return self.verdict.exit_code
            return 0 if self.state in ("complete", "pending") else 1
        if self.exit_code < 0:
            return 128 - self.exit_code
        return self.exit_code


# -- what runs under the lease ----------------------------------------------------


class Work:
    """One kind of work run under a :class:`Keeper`'s lease; every method is called from the keeper's thread.

    The defaults suit work with nothing to watch but itself. A subclass says
    when it is done, how it stops, and what its end means for the record.
    """

    #: Set by :meth:`end`: whether the work succeeded, and whether a failure may be retried.
    succeeded: bool = False
    retryable: bool = True

    def prepare(self, keeper: Keeper) -> None:
        """Check the job can run (raise ``Invalid`` when its spec cannot: a retry would not help)."""

    def start(self, keeper: Keeper, out: Outcome) -> bool:
        """Start the work; False when it did not start (``out.verdict`` set: the lease ran out; else a failure)."""
        raise NotImplementedError

    def done(self) -> bool:
        """Whether the work has ended (or may be left to end by itself: see :meth:`stop`)."""
        raise NotImplementedError

    def stop(self, when: float, now: float) -> None:
        """Ask the work to stop; it must be done by ``when`` (monotonic), at once when ``when <= now``."""
        raise NotImplementedError

    def margin(self, ttl: float) -> float:
        """How long before the lease's end the keeper stops this work when it could not renew."""
        return own_margin(ttl)

    def lease_moved(self, expiry: float) -> None:
        """The lease now ends at ``expiry`` (monotonic, never late)."""

    def due(self) -> float:
        """The work's own next deadline (monotonic); :meth:`tick` runs once it has passed."""
        return math.inf

    def tick(self, now: float) -> tuple[str, str] | None:
        """Act on the work's own deadlines; a ``(disposition, detail)`` to stop it for (``timeout``), or None."""
        return None

    def register(self, poller: select.poll) -> float:
        """Add the descriptors the work waits on; returns the longest the loop may sleep without looking."""
        return math.inf

    def ready(self, fd: int) -> None:
        """One of the work's descriptors is ready."""

    def killed_unasked(self) -> bool:
        """Whether the work was stopped by something other than this keeper (the guardian)."""
        return False

    def end(self, out: Outcome, disposition: str, detail: str, fenced: JobError | None) -> None:
        """Collect the ended work: set ``out.exit_code``/``out.error``, :attr:`succeeded` and :attr:`retryable`."""
        raise NotImplementedError

    def completing(self, out: Outcome) -> Callable[[Record], None] | None:
        """Before the write that completes the job: what that write adds to the record (its result).

        May submit what must exist before the job is complete (its next
        jobs). Raises ``Invalid`` when what the work left cannot be stored:
        the attempt then fails with that error instead.
        """
        return None

    def after(self, out: Outcome) -> None:
        """Once the final write is made (or refused): tidy what the attempt left."""


# -- the keeper -----------------------------------------------------------------

# Dispositions in the order one overrides another: losing the lease beats
# everything, a cancel beats a release, a release beats a timeout.
_PRIORITY = {"fenced": 4, "cancel": 3, "pause": 2, "recall": 2, "stop": 2, "timeout": 1}


def own_margin(ttl: float) -> float:
    """How long before its lease ends a keeper stops work it could not renew for: a fifth of the TTL, 1 s at most."""
    return min(1.0, ttl / 5)


class Keeper:
    """One attempt of one claimed job under its lease: run the work, keep the lease, record the end.

    ``rec`` is the record as the claim returned it. ``execute()`` blocks until
    the work is done and the record written; ``stop()`` may be called from
    any thread or a signal handler to stop the work and release the job;
    ``wake()`` from any thread makes the loop look at the work again, and
    ``look()`` makes it read the record again. ``lookout``: the process's
    :class:`Lookout` (a worker shares one among its runs); without one the
    keeper starts its own for the attempt. ``successor``: where a worker's
    slot keeps the job to claim with this one's finish (:class:`Ending`).
    ``claimed_at``: the monotonic time before the claim went out, which
    spares the first read when nothing was heard of the record since
    (:meth:`Lookout.follow`); None reads it once.
    """

    def __init__(
        self,
        store: KeeperStore,
        rec: Record,
        *,
        ttl: float = 30.0,
        grace: float = 10.0,
        check_every: float = 1.0,
        lookout: Lookout | None = None,
        successor: Callable[[], Record | None] | None = None,
        claimed_at: float | None = None,
    ) -> None:
        if not ttl > 0:
            raise Invalid("ttl must be positive")
        self.store = store
        self.rec = rec
        self.job_id = rec.id
        self.epoch = rec.lease.epoch
        self.owner = rec.lease.owner
        self.ttl = float(ttl)
        self.grace = max(0.0, float(grace))
        self.renew_every = self.ttl / 3
        self.check_every = min(max(0.05, float(check_every)), self.renew_every)
        self.attempt = attempt_of(rec)
        self.ending = Ending(store, rec, self.attempt, successor, self.ttl)
        self.claimed_at = claimed_at
        #: What the loop decided to stop the work for ("" while it runs on), and why.
        self.disposition = ""
        self.detail = ""
        # Reentrant: stop() may run in a signal handler on the thread that holds it.
        self._lock = threading.RLock()
        # Stop requests, appended by stop() and consumed in order by the loop;
        # list.append is atomic, so a request can never be lost between a read and a reset.
        self._requests: list[tuple[str, float | None]] = []
        self._handled = 0
        self._lookout = lookout
        # Set by look() (the lookout's thread), cleared by the loop before it reads:
        # a notice that comes during a read makes another.
        self._look = False
        self._wake_r, self._wake_w = _wake_pipe()
        self._closed = False

    # -- control from other threads -------------------------------------------

    def stop(self, reason: str = "stopped", *, grace: float | None = None) -> None:
        """Stop the work (a child: SIGTERM, SIGKILL after ``grace``) and release the job.

        Safe from another thread and from a signal handler. Calling it again
        with a shorter grace hurries the stop along; ``grace=0`` is at once.
        """
        self._requests.append((reason, grace))
        self.wake()

    def wake(self) -> None:
        """Make the loop look again (safe from any thread, and after the keeper is done)."""
        with self._lock:
            if self._closed:
                return
            try:
                os.write(self._wake_w, b"!")
            except (BlockingIOError, OSError):
                pass

    def look(self) -> None:
        """Read the record again now: the store says it was written (safe from any thread)."""
        self._look = True
        self.wake()

    # -- the attempt ----------------------------------------------------------

    def outcome(self, **kw: Any) -> Outcome:
        return Outcome(self.job_id, self.rec.kind, self.epoch, self.attempt, **kw)

    def execute(self, work: Work) -> Outcome:
        lookout, own = self._lookout, self._lookout is None
        try:
            if lookout is None:
                lookout = Lookout(self.store)
            # A write by somebody else between the claim and now reached no look: read once if there was one.
            self._look = lookout.follow(self.job_id, self.look, self.claimed_at)
            return self._execute(work)
        finally:
            if lookout is not None:
                lookout.drop(self.job_id, self.look)
                if own:
                    lookout.close()
            with self._lock:
                self._closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _execute(self, work: Work) -> Outcome:
        rec = self.rec
        # Check the intent before starting [JOB-I8]: the claim keeps it as found.
        if rec.want == "cancel":
            return self.ending.cancel(self.outcome(reason="not-started"), rec)
        if rec.want == "pause":
            return self.ending.release(self.outcome(reason="pause", error=""))
        try:
            work.prepare(self)
        except Invalid as exc:
            # A spec this kind cannot run will not run on a retry either.
            return self.ending.finish(self.outcome(reason="not-started", error=f"cannot run: {exc.message}"), "failed")
        out = self.outcome()
        try:
            if not work.start(self, out):
                if out.verdict is not None:
                    # The lease ran out before the work could start: write nothing [JOB-L5].
                    with contextlib.suppress(JobError):
                        out.state = self.store.load(self.job_id).state
                    return out
                return self.ending.failed(out, out.exit_code)
            fenced = self._watch(work)
            disposition, detail = self.disposition, self.detail
            work.end(out, disposition, detail, fenced)
            return self._decide(work, out, disposition, detail, fenced)
        finally:
            work.after(out)

    def _decide(self, work: Work, out: Outcome, disposition: str, detail: str, fenced: JobError | None) -> Outcome:
        if fenced is not None:
            # Somebody else owns the job now: write nothing more [JOB-L5].
            out.reason, out.verdict = "fenced", fenced
            with contextlib.suppress(JobError):
                out.state = self.store.load(self.job_id).state
            return out
        if disposition == "cancel":
            out.reason = "cancel"
            return self.ending.cancel(out, None, detail)
        if disposition in ("pause", "recall", "stop"):
            out.reason = disposition
            return self.ending.release(out)
        if disposition == "timeout":
            out.reason = "timeout"
            out.error = detail
            return self.ending.failed(out, None)
        if work.succeeded:
            out.error = ""
            try:
                extra = work.completing(out)
            except Invalid as exc:
                out.reason, out.error = "result", exc.message
                return self.ending.failed(out, None)
            except (JobError, OSError) as exc:
                # What must exist before the job completes could not be written:
                # the job stays this holder's, released for another attempt.
                verdict = exc if isinstance(exc, JobError) else _io(exc, self.job_id)
                out.error = f"{verdict.verdict}: {verdict.message}"
                return self.ending.failed(out, None)
            return self.ending.finish(out, "complete", extra)
        return self.ending.failed(out, out.exit_code, retryable=work.retryable)

    # -- the loop ---------------------------------------------------------------

    def lease_expiry(self) -> float:
        """The lease as the claim left it, on this process's monotonic clock, never later than it really ends."""
        before = time.monotonic()
        end = self.rec.lease.expires_at
        # store.now() is read after ``before``: the estimate can only be early.
        return before + ((end - self.store.now()).total_seconds() if end is not None else 0.0)

    def _watch(self, work: Work) -> JobError | None:
        """Keep the lease until the work is done: returns the fencing verdict, if the lease was lost.

        The disposition (why the work was stopped, if it was) is left in
        :attr:`disposition` and :attr:`detail`. The keeper stops the work at
        the lease's end less :meth:`Work.margin`.
        """
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        cap = work.register(poller)
        mono = time.monotonic
        w = _Watch(self, work)
        limit = timeout_of(self.rec)
        timeout_at = math.inf if limit is None else w.started + limit
        while not work.done():
            now = mono()
            if now >= timeout_at:
                timeout_at = math.inf  # asked once; the grace and the kill are the work's
                w.begin("timeout", timed_out(limit or 0), None)
            while self._handled < len(self._requests):
                why, grace = self._requests[self._handled]
                self._handled += 1
                w.begin("stop", why, grace)
            if now >= work.due():
                stop_for = work.tick(now)
                if stop_for is not None and self.disposition == "":
                    w.begin(stop_for[0], stop_for[1], None)
            if w.fenced is None and now >= w.lease_end:
                w.fenced = self._ran_out()
                w.begin("fenced", w.fenced.message, 0)
            if w.fenced is None and now >= w.renew_at:
                w.renew()
            elif w.fenced is None and (now >= w.check_at or self._look):
                self._look = False
                try:
                    rec = self.store.load(self.job_id)
                except (JobError, OSError):
                    pass
                else:
                    w.examine(rec)
                w.check_at = mono() + self.check_every
            deadline = min(w.renew_at, w.check_at, work.due(), w.lease_end, timeout_at)
            if w.fenced is not None:
                deadline = min(work.due(), mono() + 0.05)
            wait = min(max(0.0, deadline - mono()), cap)
            for fd, _mask in poller.poll(math.ceil(wait * 1000)):
                if fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 512)
                else:
                    work.ready(fd)
        if w.fenced is None and not self.disposition and work.killed_unasked():
            # Stopped, and not by this loop: most likely by the guardian, which
            # reads the record more often than this loop does and may have
            # seen a recall or a claim this loop had not. Judge the record as
            # it is now, so such a kill is never counted as the job failing.
            with contextlib.suppress(JobError, OSError):
                w.examine(self.store.load(self.job_id))
        if w.fenced is None and mono() >= w.lease_end:
            # The end was seen only after the lease's own deadline: this
            # process was stopped or starved. Whatever the work did, the lease
            # may be somebody else's.
            w.fenced = self._ran_out()
        return w.fenced

    def _ran_out(self) -> LeaseExpired:
        ran_out = LeaseExpired(f"job {self.job_id}: the lease of epoch {self.epoch} ran out unrenewed")
        ran_out.job_id = self.job_id
        return ran_out


class _Watch:
    """What a keeper's loop (:meth:`Keeper._watch`) moves: the lease's end as it knows it, its next renewal
    and read, and the fencing verdict once the lease is lost."""

    def __init__(self, keeper: Keeper, work: Work) -> None:
        self.keeper, self.work = keeper, work
        start = self.started = time.monotonic()
        self.margin = work.margin(keeper.ttl)
        self.expiry = keeper.lease_expiry()
        self.lease_end = self.expiry - self.margin
        self.renew_at = start + keeper.renew_every
        self.check_at = start + keeper.check_every
        self.fenced: JobError | None = None

    def lease(self, new_expiry: float) -> None:
        """The lease now ends at ``new_expiry`` (monotonic): the loop and the work follow."""
        self.expiry = new_expiry
        self.lease_end = new_expiry - self.margin
        self.work.lease_moved(new_expiry)

    def begin(self, what: str, why: str, grace: float | None, deadline: float = math.inf) -> None:
        keeper, work = self.keeper, self.work
        if work.done():
            return  # it ended on its own first: how it ended decides
        if _PRIORITY.get(what, 0) > _PRIORITY.get(keeper.disposition, 0):
            keeper.disposition, keeper.detail = what, why
        now = time.monotonic()
        work.stop(min(now + (keeper.grace if grace is None else max(0.0, grace)), deadline), now)

    def renew(self) -> None:
        keeper, store = self.keeper, self.keeper.store
        before = time.monotonic()
        try:
            rec = store.renew(keeper.job_id, keeper.epoch, keeper.ttl)
        except (StaleEpoch, LeaseExpired) as exc:
            self.fenced = exc
            self.begin("fenced", exc.message, 0)
        except (JobError, OSError):
            # Not a verdict about the lease (an I/O error, a lock
            # refused): try again soon; the lease guard above still
            # stops the work before the last good lease runs out.
            self.renew_at = time.monotonic() + min(1.0, keeper.renew_every)
        else:
            end = rec.lease.expires_at
            if end is not None:
                # store.now() is read after the write, ``before`` before
                # it: the lease can only be longer than this estimate.
                self.lease(before + (end - store.now()).total_seconds())
            self.renew_at = before + keeper.renew_every
            self.check_at = time.monotonic() + keeper.check_every
            self.examine(rec)

    def examine(self, rec: Record) -> None:
        keeper = self.keeper
        if rec.lease.epoch != keeper.epoch:
            self.fenced = StaleEpoch(
                f"job {keeper.job_id} is at epoch {rec.lease.epoch}, not {keeper.epoch}: "
                f"{rec.lease.owner or 'somebody'} claimed it since",
                keeper.job_id,
            )
            self.begin("fenced", self.fenced.message, 0)
            return
        if rec.terminal:
            return  # the work finished the job itself; let it end
        if rec.want == "cancel":
            by = rec.intent.by if rec.intent is not None else ""
            self.begin("cancel", cancelled_words(by, cancel_reason_of(rec)), None)
        elif rec.want == "pause":
            self.begin("pause", "paused on request", None)
        if rec.lease.expires_at is not None:
            # A recall lowers the lease's end [JOB-R3]; a read sees it as well as a renewal.
            self.lease(min(self.expiry, time.monotonic() + (rec.lease.expires_at - keeper.store.now()).total_seconds()))
        recall = rec.lease.recall
        if recall is not None and recall.until is not None:
            # Stop the work early enough to release before the lease ends:
            # a holder that yields is not one that was evicted [JOB-R3].
            left = self.lease_end - time.monotonic()
            self.begin("recall", f"recalled: {recall.reason}", None, self.lease_end - min(0.5, max(0.0, left) / 4))


class Ending:
    """The final writes of one attempt: each one update, fenced by the attempt's epoch.

    Each returns the outcome with the record's state after the write, or,
    when the write is refused, the verdict and the state somebody else left.
    A plain finish asks ``successor`` for the job to take next and claims it
    in the same step (``Store.finish_and_claim``) for the same owner; the
    claim's answer travels in the outcome's ``then``.
    """

    def __init__(
        self, store: KeeperStore, rec: Record, attempt: int, successor: Callable[[], Record | None] | None, ttl: float
    ) -> None:
        self.store = store
        self.rec = rec
        self.job_id = rec.id
        self.epoch = rec.lease.epoch
        self.attempt = attempt
        self.successor = successor
        self.ttl = ttl

    def refused(self, out: Outcome, exc: JobError) -> Outcome:
        out.verdict = exc
        if isinstance(exc, (StaleEpoch, LeaseExpired)):
            out.reason = "fenced"
        with contextlib.suppress(JobError):
            out.state = self.store.load(self.job_id).state
        return out

    def finish(self, out: Outcome, state: str, extra: Callable[[Record], None] | None = None) -> Outcome:
        """The final state, the error and ``extra``'s part in one write; checkpoint and done as found [JOB-T4].

        Without ``extra`` (a result), the store's ``finish``: on PostgreSQL one
        statement, where an ``update`` reads the row under its lock first.
        """
        error = out.error

        def mutate(rec: Record) -> None:
            rec.state = state
            rec.error = error
            if extra is not None:
                extra(rec)

        following = self.successor() if extra is None and self.successor is not None else None
        try:
            if following is not None:
                done, taken = self.store.finish_and_claim(
                    self.job_id,
                    self.epoch,
                    state,
                    error=error,
                    next_id=following.id,
                    owner=self.rec.lease.owner,
                    ttl_seconds=self.ttl,
                )
                out.then = (following, taken)
                if isinstance(done, JobError):
                    raise done
                rec = done
            elif extra is None:
                rec = self.store.finish(self.job_id, self.epoch, state, error=error)
            else:
                rec = self.store.update(self.job_id, self.epoch, mutate)
        except Invalid as exc:
            if extra is None or state != "complete":
                return self.refused(out, exc)
            # What the work left (its result) is more than a record can carry, and nothing was
            # written: fail the attempt. Left running, every adopter would run the job again.
            out.reason, out.error = "result", exc.message
            return self.failed(out, None)
        except (JobError, OSError) as exc:
            verdict = exc if isinstance(exc, JobError) else _io(exc, self.job_id)
            if following is not None and out.then is None:
                out.then = (following, verdict)  # whether the claim was taken is unknown: its lease will tell
            return self.refused(out, verdict)
        out.state = rec.state
        return out

    def failed(self, out: Outcome, code: int | None, *, retryable: bool = True) -> Outcome:
        """Count the failure under the retry policy: back to pending with a not-before time, or failed."""
        now = self.store.now()
        error = f"attempt {self.attempt}: {out.error}"
        decided: dict[str, bool] = {}

        def mutate(rec: Record) -> None:
            again = record_failure(rec, code, now, retryable=retryable)
            decided["again"] = again
            rec.error = error
            if not again:
                rec.state = "failed"

        try:
            rec = self.store.update(self.job_id, self.epoch, mutate)
        except (JobError, OSError) as exc:
            return self.refused(out, exc if isinstance(exc, JobError) else _io(exc, self.job_id))
        out.error = error
        if not decided.get("again"):
            out.state = rec.state
            return out
        out.retried = True
        out.not_before = not_before(rec)
        return self.release(out)

    def release(self, out: Outcome) -> Outcome:
        try:
            rec = self.store.release(self.job_id, self.epoch)
        except (JobError, OSError) as exc:
            return self.refused(out, exc if isinstance(exc, JobError) else _io(exc, self.job_id))
        out.state = rec.state
        return out

    def cancel(self, out: Outcome, rec: Record | None, reason: str = "") -> Outcome:
        if not reason:
            current = rec if rec is not None else self.rec
            by = current.intent.by if current.intent is not None else ""
            reason = cancelled_words(by, cancel_reason_of(current))
        out.error = reason
        return self.finish(out, "cancelled")


def _wake_pipe() -> tuple[int, int]:
    """A pipe with both ends non-blocking: one system call where there is ``pipe2`` (one a job on a worker)."""
    if hasattr(os, "pipe2"):
        return os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def _io(exc: OSError, job_id: str) -> JobError:
    return Refused(f"job {job_id}: {exc}", job_id)
