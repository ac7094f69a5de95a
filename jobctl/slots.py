"""A worker's slots: the threads that claim the jobs its loop picks and run them under their leases.

The loop (:class:`jobctl.worker.Worker`, on the main thread) keeps the board
and decides what runs; :class:`Slots` is the other half. :meth:`Slots.hand`
gives it records to claim: one per free slot, several at once when several
slots are free, claimed in one step (``Store.claim_each``: one statement on
PostgreSQL). The slot that took them checks each claim as found under its
lock (a job paused or blocked since the pick is let go), runs the first, and
hands the others, claimed, to the free slots.

While every slot is busy, the loop picks the next jobs ahead of time
(:meth:`Slots.add_ahead`). A slot that ends its job with a plain finish
claims the oldest of them in the same step (``Store.finish_and_claim``: one
round trip on PostgreSQL) and runs it at once, without going back to the
loop; the loop hands the rest to slots that come free otherwise.

Nothing handed out is picked again until its slot reports it back: the
records handed to slots (the loop's ``busy``), the ones picked ahead, and
the ones a slot is taking from them are all left out of the next pick
(:meth:`Slots.taken`). That exclusion is what keeps one worker from running
a job twice: every slot claims as the worker's one owner, and a claim by the
owner of a live lease is a re-claim [JOB-O2], not a refusal.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .errors import JobError, LeaseHeld, LockBusy, NotFound, Terminal, Untrusted
from .record import Record
from .runner import Outcome, Run, RunStore
from .schedule import blocked_by
from .store.base import Verdicts
from .store.contract import cancel_reason_of, cancelled_words, refusal

if TYPE_CHECKING:
    from .keeper import Keeper
    from .processor import FunctionWork

__all__ = ["Slots", "SlotStore", "Event", "Report", "Started"]


class SlotStore(RunStore, Protocol):
    """What the slots need of a store beyond a run's needs."""

    def claim_each(self, job_ids: Sequence[str], owner: str, ttl_seconds: float) -> Verdicts: ...


@dataclass
class Event:
    """Something the worker did, for its log.

    ``what``: ``started``, ``complete``, ``failed``, ``retry``, ``cancelled``
    (a run honoured a cancel, or a dependency failed), ``released`` (pause,
    recall, shutdown), ``fenced`` (the lease was lost), ``refused`` (a write
    or claim refused for another reason), ``untrusted`` (a record not owned by
    the worker's user, with the store's ``owned_by`` set: said once, then left
    alone), ``alert`` / ``alert-failed``, ``stopping``; ``waiting`` (``drain``
    waits for a retry of a job it ran; or a job is not started again while
    the processor of its earlier attempt, given up at the grace, still runs),
    ``unreadable`` (a record that cannot be read, once per record), ``blocked`` (a job waits for an unreadable
    record, once per job), ``unhandled`` (``drain``/``once`` leaves pending
    jobs of a kind nothing here can run, once per kind), ``unannounced`` (the store
    would not take the worker's word on the kinds it runs: said once), ``scheduled`` (it
    fired a schedule's slot: the job it submitted), ``schedule-failed`` (it could not read or
    fire the schedules: said once until they work again).
    """

    what: str
    job_id: str = ""
    kind: str = ""
    detail: str = ""
    outcome: Outcome | None = None

    def line(self) -> str:
        if not self.job_id and not self.kind and self.detail:
            return f"{self.what}: {self.detail}"  # about the worker, not a job: "stopping: claiming nothing more"
        parts = [self.what]
        if self.job_id:
            parts.append(self.job_id)
        if self.kind:
            parts.append(f"kind={self.kind}")
        if self.detail:
            parts.append(self.detail)
        return " ".join(parts)


@dataclass
class Report:
    """What a slot tells the loop: a start, or the end of its work on one record.

    ``took``: the job this slot claimed with the finish of this one, and runs now.
    """

    job_id: str
    started: Event | None = None
    outcome: Outcome | None = None
    record: Record | None = None
    event: Event | None = None
    skip: bool = False
    forever: bool = False
    took: Record | None = None


@dataclass
class Started:
    """A claimed job's run, made by the worker: the thing to stop, how to run it, and a Python processor's work."""

    run: Run | Keeper
    execute: Callable[[], Outcome]
    work: FunctionWork | None = None


@dataclass
class _Claimed:
    """A record another slot claimed in its batch: to be run as it is, with no claim of its own."""

    rec: Record
    claimed: Record
    at: float  # time.monotonic() before the claim went out


#: What the worker gives the slots: the run of a claimed job (when its claim went out), told where to
#: take its successor from.
Starter = Callable[[Record, float, Callable[[], Record | None]], Started]

#: A job to run next: as picked, as claimed, and when the claim went out.
Next = tuple[Record, Record, float]


class Slots:
    """``count`` threads that claim what the loop hands them and run it (see the module docstring).

    ``post`` carries a :class:`Report` to the loop; ``stopping`` says whether
    the worker stops claiming; ``states`` is the board's view of every job's
    state (a claim is judged against it); ``cancel`` cancels a held job whose
    dependency will never complete; ``start`` makes a claimed job's run.
    """

    def __init__(
        self,
        store: SlotStore,
        owner: str,
        ttl: float,
        count: int,
        *,
        post: Callable[[Report], None],
        stopping: Callable[[], bool],
        states: Callable[[], Mapping[str, str]],
        cancel: Callable[[Record, str], tuple[Record | None, Event]],
        start: Starter,
    ) -> None:
        self.store = store
        self.owner = owner
        self.ttl = ttl
        self.count = count
        self._post = post
        self._stopping = stopping
        self._states = states
        self._cancel = cancel
        self._start = start
        self.lock = threading.Lock()
        #: The runs under way, by job id (the stop reaches them here).
        self.runs: dict[str, Run | Keeper] = {}
        #: The last stop applied to the runs: (level, why, grace); a run that starts after it gets it too.
        self.stop_applied: tuple[int, str, float | None] = (0, "", None)
        # Python processors given up at the grace whose thread still runs: the
        # job is not started again here until it ends (said once per job).
        self._left: dict[str, FunctionWork] = {}
        self._said_left: set[str] = set()
        self._said_busy: set[str] = set()  # jobs whose lock another writer held
        self._work: queue.SimpleQueue[list[Record] | _Claimed | None] = queue.SimpleQueue()
        self._ahead: deque[Record] = deque()
        # Taken from _ahead by a slot's finish (the record, and when), until the loop has a report naming
        # the job: the claim's, or its refusal. Kept out of picks, and counted against its kind's limit and
        # its key, till then (:meth:`reported`).
        self._taking: dict[str, tuple[Record, float]] = {}
        self._slot_taking = threading.local()  # the job this slot's finish under way took, if any
        self._threads: list[threading.Thread] = []

    # -- the loop's side -----------------------------------------------------------

    def start(self) -> None:
        for n in range(self.count):
            slot = threading.Thread(target=self._slot, name=f"jobctl slot {n + 1}", daemon=True)
            slot.start()
            self._threads.append(slot)

    def hand(self, recs: list[Record]) -> None:
        """Claim and run these records, one per free slot: the slot that takes them claims them together."""
        if recs:
            self._work.put(recs)

    def ahead(self) -> int:
        """How many jobs are picked ahead."""
        with self.lock:
            return len(self._ahead)

    def add_ahead(self, rec: Record) -> None:
        """A job picked ahead of a free slot: the next slot that finishes claims it with its finish."""
        with self.lock:
            self._ahead.append(rec)

    def picked(self) -> list[Record]:
        """The jobs picked ahead, oldest first, then the ones a slot is taking from them.

        None of them is to be picked again, and the loop counts them with its
        busy jobs against the kinds' limits: a job a slot's finish is claiming
        is in neither the loop's busy jobs nor the ones ahead until the loop
        reads that slot's report.
        """
        with self.lock:
            return [*self._ahead, *(rec for rec, _ in self._taking.values())]

    def take_ahead(self) -> Record | None:
        """The oldest job picked ahead, for the loop to hand to a free slot; None when there is none."""
        with self.lock:
            return self._ahead.popleft() if self._ahead else None

    def reported(self, job_id: str) -> None:
        """The loop has a report naming ``job_id``: if a slot took it from the ones picked ahead, it is let go."""
        with self.lock:
            self._taking.pop(job_id, None)

    def stop_runs(self, level: int, why: str, grace: float | None) -> int:
        """Stop the runs under way (and any that starts later) at ``level``; how many were stopped (-1: done before)."""
        with self.lock:
            if self.stop_applied[0] >= level:
                return -1
            self.stop_applied = (level, why, grace)
            self._ahead.clear()
            runs = list(self.runs.values())
        for run in runs:
            run.stop(why, grace=grace)
        return len(runs)

    def close(self) -> None:
        """End the slot threads, once what they run is over; a claimed record nobody took is released."""
        with self.lock:
            self._ahead.clear()
        for _ in self._threads:
            self._work.put(None)
        for slot in self._threads:
            slot.join()
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Claimed):
                self._let_go(item.rec, item.claimed)
            elif item is not None:
                for rec in item:
                    self._post(Report(rec.id))

    # -- a slot --------------------------------------------------------------------

    def _slot(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            if isinstance(item, _Claimed):
                self._guarded([item.rec], self._run, item.rec, item.claimed, item.at)
            else:
                self._guarded(item, self._claim, item)

    def _guarded(self, recs: list[Record], step: Callable[..., Next | None], *args: object) -> None:
        """Run ``step``, then each job claimed with a finish, until one ends with nothing to take next."""
        while True:
            try:
                following = step(*args)
            except Exception as exc:  # a bug or an I/O failure must not eat the slot
                taking = getattr(self._slot_taking, "rec", None)  # a successor the failed finish took
                self._slot_taking.rec = None
                for rec in [*recs, *([taking] if taking is not None else [])]:
                    # each goes back to the loop, which would otherwise wait for it (or leave it out) for ever
                    self._post(Report(rec.id, event=Event("refused", rec.id, rec.kind, f"internal error: {exc!r}")))
                return
            if following is None:
                return
            recs, step, args = [following[0]], self._run, following

    def _claim(self, recs: list[Record]) -> Next | None:
        """Claim the records (together when several), run the first claimed; the others go to free slots."""
        if self._stopping():
            for rec in recs:
                self._post(Report(rec.id))
            return None
        recs = [rec for rec in recs if not self._left_running(rec)]
        if not recs:
            return None
        at = time.monotonic()
        try:
            # Each claim waits for a lock a moment only (LOCK_PATIENCE): a writer stopped in the middle of
            # a write would hold this slot (and a stop of the worker) for as long as it stays stopped.
            got: Verdicts = self.store.claim_each([rec.id for rec in recs], self.owner, self.ttl)
        except (JobError, OSError) as exc:  # the server away for good: none of them is claimed here
            got = [refusal(exc, rec.id) for rec in recs]
        first: Next | None = None
        for rec, answer in zip(recs, got, strict=True):
            if isinstance(answer, JobError):
                self._refused(rec, answer)
            elif first is None:
                first = (rec, answer, at)
            else:
                self._work.put(_Claimed(rec, answer, at))  # a free slot runs it as it is
        return first

    def _left_running(self, rec: Record) -> bool:
        """Whether the processor of an earlier attempt of ``rec``, given up at its grace, still runs here."""
        with self.lock:
            left = self._left.get(rec.id)
            if left is not None and not left.left_running:
                del self._left[rec.id]
                left = None
            say = left is not None and rec.id not in self._said_left
            if say:
                self._said_left.add(rec.id)
        if left is None:
            return False
        # Its processor still runs on its thread: a second one here would run the job twice at once.
        detail = "its processor from an earlier attempt is still running here; not started again until it ends"
        self._post(Report(rec.id, skip=True, event=Event("waiting", rec.id, rec.kind, detail) if say else None))
        return True

    def _refused(self, rec: Record, exc: JobError) -> None:
        """Report a claim refused: the job goes back to the loop, passed over for a while or for good."""
        if isinstance(exc, LockBusy):
            with self.lock:
                say = rec.id not in self._said_busy
                self._said_busy.add(rec.id)
            detail = f"{exc.message}; passed over, tried again later"
            self._post(Report(rec.id, skip=True, event=Event("waiting", rec.id, rec.kind, detail) if say else None))
        elif isinstance(exc, (LeaseHeld, Terminal, NotFound)):
            self._post(Report(rec.id))  # somebody was quicker; the view was stale
        elif isinstance(exc, Untrusted):
            # Not this worker's to run: named once, then never picked again by this worker.
            event = Event("untrusted", rec.id, rec.kind, exc.message)
            self._post(Report(rec.id, skip=True, forever=True, event=event))
        else:
            self._post(Report(rec.id, skip=True, event=Event("refused", rec.id, rec.kind, f"claim: {exc}")))

    def _let_go(self, rec: Record, claimed: Record) -> None:
        """Release a claim that will not run (the worker stops), and report the record back."""
        with contextlib.suppress(JobError, OSError):
            self.store.release(claimed.id, claimed.lease.epoch)
        self._post(Report(rec.id))

    def _successor(self) -> Record | None:
        """The oldest job picked ahead, for the finish under way to claim; None when stopping or there is none.

        A job whose processor from an earlier attempt still runs here is
        passed over (reported back to the loop), as a claim of it would be.
        """
        while not self._stopping():
            with self.lock:
                if self.stop_applied[0] or not self._ahead:
                    return None
                rec = self._ahead.popleft()
                self._taking[rec.id] = (rec, time.monotonic())
            if not self._left_running(rec):
                self._slot_taking.rec = rec
                return rec
        return None

    def _run(self, rec: Record, claimed: Record, at: float) -> Next | None:
        """Check a claimed record again and run it; the job its finish claimed next, if any."""
        if self._stopping():
            self._let_go(rec, claimed)
            return None
        # The claim kept the record as found under the lock; judge that, not the view.
        why, detail = blocked_by(claimed, self._states(), self.store.now())
        if why == "doomed":
            final, event = self._cancel(claimed, f"cancelled: {detail}")
            self._post(Report(rec.id, record=final, event=event))
            return None
        if why == "waiting":
            self._let_go(rec, claimed)
            return None
        if claimed.want == "cancel":  # asked to stop before it started [JOB-I8]: ended here, never started
            by = claimed.intent.by if claimed.intent is not None else ""
            final, event = self._cancel(claimed, cancelled_words(by, cancel_reason_of(claimed)))
            self._post(Report(rec.id, record=final, event=event))
            return None
        started = self._start(claimed, at, self._successor)
        with self.lock:
            self.runs[claimed.id] = started.run
            level, why_stop, grace = self.stop_applied
        if level:
            started.run.stop(why_stop, grace=grace)  # the stop went out while this slot was claiming
        detail = f"epoch={claimed.lease.epoch} attempt={started.run.attempt}"
        if rec.state == "running" and rec.lease.owner:
            detail += f" adopted from {rec.lease.owner}"
        self._post(Report(rec.id, started=Event("started", claimed.id, claimed.kind, detail)))
        try:
            outcome = started.execute()
        finally:
            with self.lock:
                self.runs.pop(claimed.id, None)
                if started.work is not None and started.work.left_running:
                    self._left[claimed.id] = started.work
        return self._then(rec, outcome)

    def _then(self, rec: Record, outcome: Outcome) -> Next | None:
        """Report the run's end, with the job its finish claimed; that job's claim and record, to run next."""
        then, outcome.then = outcome.then, None
        self._slot_taking.rec = None
        if then is None:
            self._post(Report(rec.id, outcome=outcome))
            return None
        following, answer = then
        with self.lock:
            _, at = self._taking.get(following.id, (following, 0.0))
        if isinstance(answer, JobError):
            self._post(Report(rec.id, outcome=outcome))
            self._refused(following, answer)  # the loop lets it go from _taking on this report
            return None
        self._post(Report(rec.id, outcome=outcome, took=following))
        return following, answer, at
