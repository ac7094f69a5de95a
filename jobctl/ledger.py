"""A worker's account of what it did: each event said and counted, and the lines it says once.

The loop (:class:`jobctl.worker.Worker`) says everything through one
:class:`Ledger`, on its main thread: the events its slots report, what an
attempt's outcome came to, and the lines about the store it says only once
(a record that cannot be read, a job that waits for one, a retry ``drain``
waits for, the kinds of pending job nothing here can run). The counts, and
the state each job it ran was left in, are the :class:`Summary` that
:meth:`jobctl.worker.Worker.run` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from . import ids
from .board import UNREADABLE, Board
from .errors import JobError
from .record import TERMINAL, format_time, held
from .runner import Outcome, RunStore
from .schedule import after_of, attempt, not_before
from .slots import Event

__all__ = ["Ledger", "Summary"]


@dataclass
class Summary:
    """What one call to :meth:`Worker.run` did, counted by event."""

    counts: dict[str, int] = field(default_factory=dict)
    #: Each job this worker ran, and the state its last attempt here left it in.
    ran: dict[str, str] = field(default_factory=dict)

    @property
    def all_complete(self) -> bool:
        """Whether every job this worker ran ended ``complete`` (True when it ran none)."""
        return all(state == "complete" for state in self.ran.values())

    def add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def __getitem__(self, what: str) -> int:
        return self.counts.get(what, 0)


class Ledger:
    """The events of one worker, counted in its :class:`Summary` and handed to ``on_event``.

    ``handled`` is every kind the worker can run (before ``--kind`` narrows
    it): a pending job of another kind is what :meth:`say_left` names.
    """

    def __init__(
        self, store: RunStore, handled: frozenset[str], on_event: Callable[[Event], None] | None = None
    ) -> None:
        self.store = store
        self.handled = handled
        self.on_event = on_event
        self.summary = Summary()
        # Said once each: unreadable ids, jobs blocked by one, retry waits (id, attempt).
        self._said_unreadable: set[str] = set()
        self._said_blocked: set[str] = set()
        self._said_waits: set[tuple[str, int]] = set()

    def emit(self, event: Event) -> None:
        self.summary.add(event.what)
        if self.on_event is not None:
            self.on_event(event)

    def ran(self, job_id: str, out: Outcome) -> str:
        """Count an attempt of ``job_id`` that ended here and say what it came to; returns the event's ``what``."""
        self.summary.add("finished")
        self.summary.ran[job_id] = out.state or "refused"
        if out.fenced:
            what, detail = "fenced", f"{out.verdict.verdict if out.verdict else ''}: the job is somebody else's now"
        elif out.verdict is not None:
            what, detail = "refused", f"{out.verdict.verdict}: {out.verdict}"
        elif out.retried:
            when = format_time(out.not_before) if out.not_before else "now"
            what, detail = "retry", f"{out.error}; next attempt not before {when}"
        elif out.state == "pending":
            what, detail = "released", out.reason
        else:
            what, detail = out.state or "refused", out.error
        self.emit(Event(what, out.job_id, out.kind, detail, out))
        return what

    # -- what drain waits for, and what it leaves ---------------------------------------

    def retries_due(self, board: Board) -> datetime | None:
        """The earliest not-before time of a retry of a job this worker ran; None when none is due.

        Only the retries of jobs it attempted are waited for: a job that is
        held by somebody else, paused, or was scheduled with a not-before
        time of its own is not this drain's business. A job that becomes
        runnable because one it ran completed needs no wait: the board offers
        it at once.
        """
        now = self.store.now()
        due: datetime | None = None
        for job_id in self.summary.ran:
            rec = board.open.get(job_id)
            if rec is None or rec.state != "pending" or held(rec.lease, now) or rec.want == "pause":
                continue
            try:
                when = not_before(rec)
            except JobError:
                continue  # malformed scheduling data: the board reports it as doomed
            if when is None or when <= now:
                continue
            number = attempt(rec)
            if (job_id, number) not in self._said_waits:
                self._said_waits.add((job_id, number))
                self.emit(Event("waiting", job_id, rec.kind, f"attempt {number} not before {format_time(when)}"))
            due = when if due is None else min(due, when)
        return due

    def settle_ran(self, board: Board) -> None:
        """How the jobs it ran ended, as the store says now: a retry another worker finished counts."""
        for job_id in self.summary.ran:
            state = board.states.get(job_id)
            if state in TERMINAL:
                self.summary.ran[job_id] = state

    def say_unreadable(self, board: Board) -> None:
        """One line per record that cannot be read, and per job that waits for one (each said once)."""
        fresh = [j for j in board.unreadable if j not in self._said_unreadable]
        if not fresh:
            return
        for job_id in fresh:
            self._said_unreadable.add(job_id)
            path = getattr(self.store, "path", None)
            # A file's name need not be an id path() takes (a stray "a\nb.json"): then no path, and no refusal.
            where = f"{path(job_id)}: " if callable(path) and ids.safe(job_id) else ""
            self.emit(Event("unreadable", job_id, "", f"{where}{board.unreadable[job_id].message}"))
        for job_id, rec in board.open.items():
            if job_id in self._said_blocked:
                continue
            try:
                deps = after_of(rec)
            except JobError:
                continue
            for dep in deps:
                if board.states.get(dep) == UNREADABLE:
                    self._said_blocked.add(job_id)
                    self.emit(Event("blocked", job_id, rec.kind, f"waits for {dep}, which cannot be read"))
                    break

    def say_left(self, board: Board) -> None:
        """On leaving (once, drain): one line per kind of pending job that nothing here can run."""
        left: dict[str, int] = {}
        for rec in board.open.values():
            if rec.state == "pending" and rec.kind not in self.handled:
                left[rec.kind] = left.get(rec.kind, 0) + 1
        for kind, count in sorted(left.items()):
            self.emit(Event("unhandled", "", kind, f"{count} pending job(s) left: no handler for kind {kind}"))
