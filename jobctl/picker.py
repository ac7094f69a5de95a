"""What a worker's loop picks next from its board, and the dependents it cancels on the way.

A pick (:meth:`Picker.next`) is the oldest job the board would run, left
out of the picks after it: the jobs handed to a slot, picked ahead or being
taken by one, and the ones passed over for a while (:meth:`Picker.excluded`)
are never picked twice. A job passed over is one whose claim was refused
(until the next poll, or for good), one a recall took back (for the recall's
grace [JOB-I9], so another worker can take it), and one just doomed.

A job one of whose dependencies ended ``failed`` or ``cancelled``, or does
not exist, can never run: the pick cancels it with a reason naming the
dependency [JOB-S3] [JOB-S4] -- a cancel intent, a claim, and the
``cancelled`` write under that claim -- so nothing waits forever and the
cancellation cascades down a pipeline (:mod:`jobctl.schedule`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Protocol

from .board import Board
from .errors import JobError
from .record import TERMINAL, Record
from .runner import RunStore
from .slots import Event, Report

__all__ = ["Picker", "PickerStore"]


class PickerStore(RunStore, Protocol):
    """What dooming needs of a store beyond a run's needs: a cancel intent and a claim."""

    def claim(self, job_id: str, owner: str, ttl_seconds: float, *, wait: bool = True) -> Record: ...
    def set_intent(self, job_id: str, want: str, by: str = "") -> Record: ...


class Picker:
    """The picks of one worker (main thread only); ``emit`` says what a cancel did."""

    def __init__(
        self, store: PickerStore, owner: str, ttl: float, poll_interval: float, emit: Callable[[Event], None]
    ) -> None:
        self.store = store
        self.owner = owner
        self.ttl = ttl
        self.poll_interval = poll_interval
        self._emit = emit
        #: The jobs passed over, each until a time on the monotonic clock.
        self.passed: dict[str, float] = {}

    def excluded(self, busy: Iterable[str], taken: Iterable[str], now_mono: float) -> set[str]:
        """What a pick leaves out: the jobs the slots hold or will claim, and those passed over for now."""
        skip = set(busy)
        skip.update(taken)
        skip.update(j for j, until in self.passed.items() if until > now_mono)
        return skip

    def next(
        self, board: Board, only: set[str] | None, skip: set[str], blocked: Callable[[Record], bool] | None = None
    ) -> tuple[Record | None, datetime | None]:
        """The oldest job the view would run (and ``blocked`` allows), left out of later picks.

        Doomed ones are cancelled on the way.
        """
        while True:
            got = board.pick(self.store.now(), exclude=skip, only=only, blocked=blocked)
            if not got.doomed:
                break
            for doomed, why in got.doomed:
                self.doom(board, doomed, why)  # their dependents may be doomed now, and the view has moved
                skip.add(doomed.id)  # passed over for a while, as doom says, whether or not it was cancelled
        if got.record is not None:
            skip.add(got.record.id)
            if only is not None:
                only.discard(got.record.id)
        return got.record, got.wake

    def doom_all(self, board: Board, now: datetime) -> None:
        """Cancel every job the view shows doomed at ``now``, and those they doom in turn (``once`` does it first)."""
        while True:  # a cancelled job dooms its own dependents in turn
            doomed = [(r, why) for r, why in board.survey_doomed(now) if r.id not in self.passed]
            if not doomed:
                break
            for rec, why in doomed:
                self.doom(board, rec, why)

    def reported(self, report: Report) -> None:
        """Pass over a job its slot reported back, for as long as the report (or a recall on it) asks."""
        job_id = report.job_id
        if report.skip:
            self.passed[job_id] = math.inf if report.forever else time.monotonic() + max(self.poll_interval, 1.0)
        out = report.outcome
        if out is not None and out.state not in TERMINAL:
            # A recall asks for the lease back [JOB-I9]: the giver leaves the job
            # alone for the recall's grace, so another worker can take it. That
            # holds however the run ended -- released, or its child killed by
            # the guardian at the recall's end with nothing written.
            grace = self._recall_grace(job_id)
            if out.reason == "recall" or grace is not None:
                self.passed[job_id] = time.monotonic() + max(grace or 0.0, self.poll_interval, 1.0)

    def _recall_grace(self, job_id: str) -> float | None:
        """The grace the recall on ``job_id``'s record gave (``until - at``); None when it has none (or is unread)."""
        try:
            recall = self.store.load(job_id).lease.recall
        except (JobError, OSError):
            return None
        if recall is None or recall.at is None or recall.until is None:
            return None
        return max(0.0, (recall.until - recall.at).total_seconds())

    # -- dependencies ---------------------------------------------------------------

    def doom(self, board: Board, rec: Record, why: str) -> None:
        """Cancel a job whose dependency failed, was cancelled or does not exist [JOB-S3] [JOB-S4]."""
        store = self.store
        self.passed[rec.id] = time.monotonic() + max(self.poll_interval, 1.0)
        try:
            store.set_intent(rec.id, "cancel", self.owner)
            claimed = store.claim(rec.id, self.owner, self.ttl)
        except (JobError, OSError):
            # Held: its holder sees the cancel intent and honours it. Gone or
            # terminal: nothing to do. Either way the view catches up.
            with contextlib.suppress(JobError, OSError):
                board.reload(rec.id)
            return
        final, event = self.cancel_held(claimed, f"cancelled: {why}")
        if final is not None:
            board.note(final)
        else:
            with contextlib.suppress(JobError, OSError):
                board.reload(rec.id)
        self._emit(event)

    def cancel_held(self, claimed: Record, reason: str) -> tuple[Record | None, Event]:
        """Write ``cancelled`` under the claim this worker holds; the event says what became of it."""

        def mutate(r: Record) -> None:
            r.state = "cancelled"
            r.error = reason

        try:
            final = self.store.update(claimed.id, claimed.lease.epoch, mutate)
        except (JobError, OSError) as exc:
            return None, Event("refused", claimed.id, claimed.kind, f"cancel: {exc}")
        return final, Event("cancelled", final.id, final.kind, reason)
