"""The worker loop: pick runnable jobs, run up to N at once, retry, respect dependencies.

One :class:`Worker` is one process's loop over one store. Its main thread
keeps a :class:`jobctl.board.Board` up to date and, while a slot is free,
hands the oldest runnable jobs to ``concurrency`` slot threads
(:mod:`jobctl.slots`), which claim them -- several in one step when several
slots are free, and a slot's next job with its last one's finish -- and run
each under its lease (:class:`jobctl.runner.Run`). The
command runs as a child of the worker process, directly: no ``jobctl run``
process per job. A small guardian process (:class:`jobctl.runner.Guardian`)
kills the children's process groups if the worker dies, and each one just
before its lease runs out if the worker is stopped (SIGSTOP, Ctrl-Z) and
renews nothing; a child runs no code of its job until the guardian has it.

Nothing here coordinates workers with each other. Two workers, or twenty, on
one store never run a job twice at the same time because of the lease: a
claim is a compare-and-set on the record's epoch [JOB-L2] [JOB-L4], a live
lease refuses every other claimant [JOB-O1], each worker's lease owner is
unique to its process (``<name>@<host>:<pid>``, so the same-owner re-claim of
[JOB-O2] never joins two workers), and a run kills its child before the lease
it holds can run out, or at once when a write tells it somebody else owns the
job now [JOB-L5].

Scheduling metadata (:mod:`jobctl.schedule`): a job runs only once every job
it depends on is ``complete``; when one ends ``failed`` or ``cancelled`` (or
does not exist) the dependent is cancelled here with a reason naming it, so
nothing waits forever and the cancellation cascades down a pipeline. A
failed attempt under a retry policy goes back to ``pending`` with its next
not-before time; only the last one leaves the job ``failed``, and then the
``on_failure`` command runs with ``JOB_ID``, ``JOB_KIND``, ``JOB_ERROR`` and
``JOB_ATTEMPT`` in its environment, and a JSON message is posted to the
``on_failure_url`` webhook from a background thread (:mod:`jobctl.webhook`).

Stopping: :meth:`Worker.request_stop` (the CLI calls it on SIGTERM/SIGINT)
stops claiming and lets running jobs go on for ``shutdown_grace`` seconds,
then stops them (SIGTERM, SIGKILL after ``grace``) and releases them for
somebody else; a second request stops them at once (SIGKILL) and releases.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from .board import UNREADABLE, Board
from .errors import JobError
from .jobenv import JobEnvironment
from .keeper import Keeper, Lookout
from .prctl import seal
from .record import TERMINAL, Record, format_time, held
from .roster import Announcer, announce_ttl
from .runner import Guardian, Outcome, Processor, Run, processors
from .schedule import after_of, attempt, not_before, pipeline_of
from .slots import Event, Report, Slots, SlotStore, Started
from .store.base import Notices, OpenListing
from .store.location import address

if TYPE_CHECKING:
    from .processor import AsyncLoop, ProcessorFunction
    from .webhook import Delivery, Webhook

__all__ = ["Worker", "WorkerStore", "Event", "Summary", "MODES", "default_owner"]

MODES = ("loop", "once", "drain")


class WorkerStore(SlotStore, Protocol):
    """What the loop needs of a store beyond its slots' needs."""

    def claim(self, job_id: str, owner: str, ttl_seconds: float, *, wait: bool = True) -> Record: ...
    def announce(self, owner: str, kinds: Iterable[str], ttl_seconds: float) -> None: ...
    def withdraw(self, owner: str) -> None: ...
    def ids(self) -> list[str]: ...
    def list_open(self) -> OpenListing: ...
    def set_intent(self, job_id: str, want: str, by: str = "") -> Record: ...
    def notices(self, *, news_only: bool = False) -> Notices | None: ...


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


def default_owner(name: str = "worker") -> str:
    """``<name>@<host>:<pid>``: unique to this process, so two workers never share a lease owner."""
    # The node name is the host name gethostname(2) returns, without importing socket for it.
    return f"{name}@{os.uname().nodename}:{os.getpid()}"


class Worker:
    """A loop over one store. See the module docstring for what it promises.

    The main thread owns the board and hands the oldest runnable records to
    ``concurrency`` slot threads; each slot claims its record, runs it and
    reports back through a queue. Claims happen in the slots so that their
    fsyncs overlap, and a slot thread lives as long as the worker, so it
    outlives every child it starts (the thread a parent-death signal is tied to).
    """

    def __init__(
        self,
        store: WorkerStore,
        *,
        name: str = "worker",
        concurrency: int = 1,
        poll_interval: float = 1.0,
        ttl: float = 30.0,
        grace: float = 10.0,
        shutdown_grace: float = 30.0,
        handlers: Mapping[str, str] | None = None,
        processors_: Mapping[str, Processor] | None = None,
        kinds: Iterable[str] | None = None,
        on_failure: str = "",
        on_failure_url: str = "",
        on_event: Callable[[Event], None] | None = None,
        env: Mapping[str, str] | None = None,
        notices: bool = True,
        environment: JobEnvironment | None = None,
        functions: Mapping[str, ProcessorFunction] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.store = store
        self.owner = default_owner(name)
        self.concurrency = int(concurrency)
        self.poll_interval = max(0.01, float(poll_interval))
        self.ttl = float(ttl)
        self.grace = float(grace)
        self.shutdown_grace = float(shutdown_grace)
        table = dict(processors_) if processors_ is not None else processors(handlers)
        # A Python processor replaces a command for the same kind.
        python = dict(functions or {})
        table = {k: v for k, v in table.items() if k not in python}
        #: Every kind something here can run, before --kind narrows it.
        self.handled: frozenset[str] = frozenset(table) | frozenset(python)
        if kinds is not None:
            wanted = set(kinds)
            table = {k: v for k, v in table.items() if k in wanted}
            python = {k: v for k, v in python.items() if k in wanted}
        #: The kinds run as a command (``shell``, handlers), and the kinds run by a Python function.
        self.processors: dict[str, Processor] = table
        self.functions: dict[str, ProcessorFunction] = python
        self.on_failure = on_failure
        # Posted from the webhook's own thread; what became of each comes back
        # here and is said by the main thread, as every other event is.
        self._deliveries: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
        self._webhook: Webhook | None = None
        if on_failure_url:
            from .webhook import Webhook  # its HTTP client only for a worker that posts alerts

            self._webhook = Webhook(on_failure_url, self._delivered)
        self.on_event = on_event
        self.env = dict(os.environ if env is None else env)
        # The jobs' environment is an allow-list of self.env; the alert keeps all of it.
        self.environment = environment or JobEnvironment()
        self.notices = notices
        self.summary = Summary()
        self._guardian: Guardian | None = None
        self._lookout: Lookout | None = None
        self._states: Mapping[str, str] = {}
        # Main thread only: ids handed to a slot and not reported back yet.
        self._busy: dict[str, Record] = {}
        self._skip: dict[str, float] = {}
        self._alerts: list[tuple[subprocess.Popen[bytes], str]] = []
        # Said once each: unreadable ids, jobs blocked by one, retry waits (id, attempt).
        self._said_unreadable: set[str] = set()
        self._said_blocked: set[str] = set()
        self._said_waits: set[tuple[str, int]] = set()
        self._lock = threading.Lock()  # the Python processors' event loop, made by the first slot that needs it
        self._async: AsyncLoop | None = None
        self._done: queue.SimpleQueue[Report] = queue.SimpleQueue()
        self._slots = Slots(
            store,
            self.owner,
            self.ttl,
            self.concurrency,
            post=self._post,
            stopping=lambda: self._stop_level > 0,
            states=lambda: self._states,
            cancel=self._cancel_held,
            start=self._started,
        )
        self._stop_level = 0
        self._stop_deadline = math.inf
        self._announced = False
        # What this worker runs, said to the store while it claims (jobctl.roster); taken back when it stops.
        self._word = Announcer(
            store, self.owner, self.kinds, announce_ttl(self.ttl, self.poll_interval), self._unannounced
        )
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds this worker runs: by a command, or by a Python function."""
        return frozenset(self.processors) | frozenset(self.functions)

    # -- control ----------------------------------------------------------------

    def request_stop(self, immediate: bool = False) -> None:
        """Stop claiming; running jobs get ``shutdown_grace``. A second call (or ``immediate``) stops them now.

        Safe from a signal handler and from another thread.
        """
        level = 2 if immediate or self._stop_level >= 1 else 1
        if level == 1 and self._stop_level == 0:
            self._stop_deadline = time.monotonic() + self.shutdown_grace
        self._stop_level = max(self._stop_level, level)
        self._wake()

    def _wake(self) -> None:
        fd = self._wake_w
        if fd >= 0:  # -1 once run() has closed it: never write to a number reused since
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(fd, b"!")

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """Within: SIGTERM and SIGINT call :meth:`request_stop` (main thread only)."""

        def handler(signum: int, frame: FrameType | None) -> None:
            self.request_stop()

        old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, previous in old.items():
                signal.signal(sig, previous)

    def _unannounced(self, line: str) -> None:
        self._emit(Event("unannounced", detail=line))

    def _emit(self, event: Event) -> None:
        self.summary.add(event.what)
        if self.on_event is not None:
            self.on_event(event)

    # -- the loop -----------------------------------------------------------------

    def run(self, mode: str = "loop") -> Summary:
        """Run until stopped (``loop``), after one pass (``once``), or when idle (``drain``). Call it once."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        # Non-dumpable before any work starts: what a job (or a processor) starts runs as this user (jobctl.prctl).
        seal()
        board = Board(self.store, self.kinds, notices=self.notices)
        self._states = board.states
        self._guardian = Guardian()
        # Without notices the keepers read their records on their own clock only.
        self._lookout = Lookout(self.store if self.notices else None)
        self._slots.start()
        try:
            self._loop(board, mode)
        finally:
            self._word.withdraw()
            self._shutdown(board)
            board.close()
            if self._guardian is not None:
                self._guardian.close()
            if self._lookout is not None:
                self._lookout.close()
            if self._async is not None:
                self._async.close()
            wake_r, wake_w = self._wake_r, self._wake_w
            self._wake_r = self._wake_w = -1
            os.close(wake_r)
            os.close(wake_w)
        return self.summary

    def _loop(self, board: Board, mode: str) -> None:
        only: set[str] | None = None
        if mode == "once":
            now = self.store.now()
            only = set(board.runnable_ids(now))
            while True:  # a cancelled job dooms its own dependents in turn
                doomed = [(r, why) for r, why in board.survey_doomed(now) if r.id not in self._skip]
                if not doomed:
                    break
                for rec, why in doomed:
                    self._doom(board, rec, why)
        scanned_at = -1
        while True:
            self._collect(board)
            self._reap_alerts()
            now_mono = time.monotonic()
            wake: datetime | None = None
            if self._stop_level == 0:
                self._word.tick(now_mono)
                board.refresh(max_age=self.poll_interval, skip=self._busy)
                self._say_unreadable(board)
                idle, wake = self._hand_out(board, only, now_mono)
                if not self._busy:
                    if mode == "once" and not only:
                        self._say_left(board)
                        return
                    if mode == "drain" and idle:
                        # Leave only on a fresh view: what just finished may
                        # have unblocked something the view does not show yet.
                        finished = self.summary["finished"]
                        if board.watching or scanned_at == finished:
                            due = self._retries_due(board)
                            if due is None:
                                self._settle_ran(board)
                                self._say_left(board)
                                return
                            wake = due if wake is None else min(wake, due)
                        else:
                            board.refresh(force=True)
                            scanned_at = finished
                            continue
            else:
                if not self._announced:
                    self._announced = True
                    self._word.withdraw()  # it claims nothing more: pending jobs are not its to run
                    self._emit(
                        Event("stopping", detail=f"claiming nothing more; {len(self._busy)} job(s) to finish or stop")
                    )
                if not self._busy:
                    return
                if self._stop_level >= 2:
                    self._stop_runs(2, "the worker was stopped at once", 0.0)
                elif now_mono >= self._stop_deadline:
                    self._stop_runs(1, "the worker is shutting down", None)
            self._idle(board, wake, now_mono)

    def _hand_out(self, board: Board, only: set[str] | None, now_mono: float) -> tuple[bool, datetime | None]:
        """Give the free slots the oldest runnable jobs (claimed together), then pick the next ones ahead.

        With every slot busy, up to one job per slot is picked ahead: a
        slot's finish claims the next of them. Returns whether the view had
        nothing more to run, and when a job it holds back (a not-before
        time) may run.
        """
        skip = self._excluded(now_mono)
        batch: list[Record] = []
        wake: datetime | None = None
        idle = False
        while len(self._busy) < self.concurrency:
            rec = self._slots.take_ahead()  # picked ahead of time, before any newer pick
            if rec is None:
                rec, wake = self._next(board, only, skip)
                if rec is None:
                    idle = True
                    break
            elif only is not None:
                only.discard(rec.id)
            self._busy[rec.id] = rec
            batch.append(rec)
        self._slots.hand(batch)
        while not idle and self._slots.ahead() < self.concurrency:
            rec, _ = self._next(board, only, skip)
            if rec is None:
                break
            self._slots.add_ahead(rec)
        return idle, wake

    def _next(self, board: Board, only: set[str] | None, skip: set[str]) -> tuple[Record | None, datetime | None]:
        """The oldest job the view would run, left out of later picks; doomed ones are cancelled on the way."""
        while True:
            got = board.pick(self.store.now(), exclude=skip, only=only)
            if not got.doomed:
                break
            for doomed, why in got.doomed:
                self._doom(board, doomed, why)  # their dependents may be doomed now, and the view has moved
                skip.add(doomed.id)  # passed over for a while, as _doom says, whether or not it was cancelled
        if got.record is not None:
            skip.add(got.record.id)
            if only is not None:
                only.discard(got.record.id)
        return got.record, got.wake

    def _excluded(self, now_mono: float) -> set[str]:
        """What a pick leaves out: the jobs the slots hold or will claim, and those passed over for now."""
        skip = set(self._busy)
        skip.update(self._slots.taken())
        skip.update(j for j, until in self._skip.items() if until > now_mono)
        return skip

    def _idle(self, board: Board, wake: datetime | None, now_mono: float) -> None:
        timeout = self.poll_interval
        if wake is not None:
            timeout = min(timeout, max(0.0, (wake - self.store.now()).total_seconds()) + 0.001)
        if self._stop_level == 1:
            timeout = min(timeout, max(0.0, self._stop_deadline - now_mono))
        if self._alerts:
            timeout = min(timeout, 0.5)
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        fd = board.fileno()
        if fd is not None and self._stop_level == 0 and len(self._busy) < self.concurrency:
            # With every slot taken nothing is handed out (the jobs picked ahead
            # are judged again by their claim): the store's changes (each write
            # of the running jobs among them) wait in the notice queue, read all
            # at once by the refresh after the next report.
            poller.register(fd, select.POLLIN)
        for ready, _mask in poller.poll(math.ceil(timeout * 1000)):
            if ready == self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)

    # -- the slots ------------------------------------------------------------------

    def _post(self, report: Report) -> None:
        self._done.put(report)
        self._wake()

    def _started(self, claimed: Record, at: float, successor: Callable[[], Record | None]) -> Started:
        """The run of a claimed job: its command under a :class:`Run`, or its Python processor under a Keeper."""
        function = self.functions.get(claimed.kind)
        if function is not None:
            # A Python processor: the same lease keeping, a function as the work.
            from .processor import FunctionWork

            keeper = Keeper(
                self.store,
                claimed,
                ttl=self.ttl,
                grace=self.grace,
                lookout=self._lookout,
                successor=successor,
                claimed_at=at,
            )
            work = FunctionWork(function, loop=self._async_loop)
            return Started(keeper, lambda: keeper.execute(work), work)
        run = Run(
            self.store,
            claimed,
            self.processors[claimed.kind],
            ttl=self.ttl,
            grace=self.grace,
            env=self.env,
            guardian=self._guardian,
            environment=self.environment,
            lookout=self._lookout,
            successor=successor,
            claimed_at=at,
        )
        return Started(run, run.execute)

    def _async_loop(self) -> AsyncLoop:
        """The one event loop the ``async def`` processors share, started when the first needs it."""
        from .processor import AsyncLoop

        with self._lock:
            if self._async is None:
                self._async = AsyncLoop()
            return self._async

    def _collect(self, board: Board) -> None:
        while True:
            try:
                report = self._done.get_nowait()
            except queue.Empty:
                return
            self._receive(board, report)

    def _receive(self, board: Board, report: Report) -> None:
        if report.started is not None:
            self._emit(report.started)
            return
        job_id = report.job_id
        self._busy.pop(job_id, None)
        self._slots.reported(job_id)  # a job taken from the ones picked ahead, refused: pickable again
        if report.took is not None:  # its slot claimed the next job with this one's finish, and runs it
            self._busy[report.took.id] = report.took
            self._slots.reported(report.took.id)
        if report.skip:
            self._skip[job_id] = math.inf if report.forever else time.monotonic() + max(self.poll_interval, 1.0)
        out = report.outcome
        if out is not None and out.state not in TERMINAL:
            # A recall asks for the lease back [JOB-I9]: the giver leaves the job
            # alone for the recall's grace, so another worker can take it. That
            # holds however the run ended -- released, or its child killed by
            # the guardian at the recall's end with nothing written.
            grace = self._recall_grace(job_id)
            if out.reason == "recall" or grace is not None:
                self._skip[job_id] = time.monotonic() + max(grace or 0.0, self.poll_interval, 1.0)
        if report.record is not None:
            board.note(report.record)
        elif out is not None and out.state in TERMINAL and out.verdict is None:
            board.settle(job_id, out.state)
        else:
            with contextlib.suppress(JobError, OSError):
                board.reload(job_id)
        if report.event is not None:
            self._emit(report.event)
        if out is not None:
            self.summary.add("finished")
            self.summary.ran[job_id] = out.state or "refused"
            self._report(out)

    def _recall_grace(self, job_id: str) -> float | None:
        """The grace the recall on ``job_id``'s record gave (``until - at``); None when it has none (or is unread)."""
        try:
            recall = self.store.load(job_id).lease.recall
        except (JobError, OSError):
            return None
        if recall is None or recall.at is None or recall.until is None:
            return None
        return max(0.0, (recall.until - recall.at).total_seconds())

    def _report(self, out: Outcome) -> None:
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
        self._emit(Event(what, out.job_id, out.kind, detail, out))
        if what == "failed":
            self._alert(out)

    # -- what drain waits for, and what it leaves ---------------------------------------

    def _retries_due(self, board: Board) -> datetime | None:
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
                self._emit(Event("waiting", job_id, rec.kind, f"attempt {number} not before {format_time(when)}"))
            due = when if due is None else min(due, when)
        return due

    def _settle_ran(self, board: Board) -> None:
        """How the jobs it ran ended, as the store says now: a retry another worker finished counts."""
        for job_id in self.summary.ran:
            state = board.states.get(job_id)
            if state in TERMINAL:
                self.summary.ran[job_id] = state

    def _say_unreadable(self, board: Board) -> None:
        """One line per record that cannot be read, and per job that waits for one (each said once)."""
        fresh = [j for j in board.unreadable if j not in self._said_unreadable]
        if not fresh:
            return
        for job_id in fresh:
            self._said_unreadable.add(job_id)
            path = getattr(self.store, "path", None)
            where = f"{path(job_id)}: " if callable(path) else ""
            self._emit(Event("unreadable", job_id, "", f"{where}{board.unreadable[job_id].message}"))
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
                    self._emit(Event("blocked", job_id, rec.kind, f"waits for {dep}, which cannot be read"))
                    break

    def _say_left(self, board: Board) -> None:
        """On leaving (once, drain): one line per kind of pending job that nothing here can run."""
        left: dict[str, int] = {}
        for rec in board.open.values():
            if rec.state == "pending" and rec.kind not in self.handled:
                left[rec.kind] = left.get(rec.kind, 0) + 1
        for kind, count in sorted(left.items()):
            self._emit(Event("unhandled", "", kind, f"{count} pending job(s) left: no handler for kind {kind}"))

    # -- dependencies ---------------------------------------------------------------

    def _doom(self, board: Board, rec: Record, why: str) -> None:
        """Cancel a job whose dependency failed, was cancelled or does not exist [JOB-S3] [JOB-S4]."""
        store = self.store
        self._skip[rec.id] = time.monotonic() + max(self.poll_interval, 1.0)
        try:
            store.set_intent(rec.id, "cancel", self.owner)
            claimed = store.claim(rec.id, self.owner, self.ttl)
        except (JobError, OSError):
            # Held: its holder sees the cancel intent and honours it. Gone or
            # terminal: nothing to do. Either way the view catches up.
            with contextlib.suppress(JobError, OSError):
                board.reload(rec.id)
            return
        final, event = self._cancel_held(claimed, f"cancelled: {why}")
        if final is not None:
            board.note(final)
        else:
            with contextlib.suppress(JobError, OSError):
                board.reload(rec.id)
        self._emit(event)

    def _cancel_held(self, claimed: Record, reason: str) -> tuple[Record | None, Event]:
        def mutate(r: Record) -> None:
            r.state = "cancelled"
            r.error = reason

        try:
            final = self.store.update(claimed.id, claimed.lease.epoch, mutate)
        except (JobError, OSError) as exc:
            return None, Event("refused", claimed.id, claimed.kind, f"cancel: {exc}")
        return final, Event("cancelled", final.id, final.kind, reason)

    # -- alerts -----------------------------------------------------------------------

    def _alert(self, out: Outcome) -> None:
        if self._webhook is not None:
            self._post_alert(self._webhook, out)
        if not self.on_failure:
            return
        env = dict(self.env)
        for name in ("JOB_EPOCH", "JOB_CHECKPOINT", "JOB_WORK"):
            env.pop(name, None)
        env.update(
            {
                "JOB_ID": out.job_id,
                "JOB_KIND": out.kind,
                "JOB_ERROR": out.error,
                "JOB_ATTEMPT": str(out.attempt),
                "JOB_STORE": address(self.store),
            }
        )
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", self.on_failure],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            self._emit(Event("alert-failed", out.job_id, out.kind, f"cannot start the alert: {exc}"))
            return
        self._alerts.append((proc, out.job_id))

    def _post_alert(self, hook: Webhook, out: Outcome) -> None:
        pipeline = None
        with contextlib.suppress(JobError, OSError):  # the message goes without it rather than not at all
            pipeline = pipeline_of(self.store.load(out.job_id))
        from .webhook import message

        body = message(out.job_id, out.kind, out.error, out.attempt, pipeline, self.owner)
        if not hook.post(out.job_id, out.kind, body):
            detail = f"webhook {hook.where}: {hook.backlog} alerts wait for it already; this one is dropped"
            self._emit(Event("alert-failed", out.job_id, out.kind, detail))

    def _delivered(self, delivery: Delivery) -> None:
        """From the webhook's thread: queue the news for the main thread, and wake it."""
        self._deliveries.put(delivery)
        self._wake()

    def _said_deliveries(self) -> None:
        while True:
            try:
                got = self._deliveries.get_nowait()
            except queue.Empty:
                return
            self._emit(Event("alert" if got.ok else "alert-failed", got.job_id, got.kind, got.detail))

    def _reap_alerts(self, wait: float = 0.0) -> None:
        self._said_deliveries()
        deadline = time.monotonic() + wait
        keep = []
        for proc, job_id in self._alerts:
            left = deadline - time.monotonic()
            try:
                code = proc.wait(left) if left > 0 else proc.poll()
            except subprocess.TimeoutExpired:
                code = None
            if code is None:
                if wait > 0:
                    proc.kill()
                    proc.wait()
                    self._emit(Event("alert-failed", job_id, "", "the alert did not finish in time"))
                else:
                    keep.append((proc, job_id))
            elif code == 0:
                self._emit(Event("alert", job_id))
            else:
                self._emit(Event("alert-failed", job_id, "", f"the alert command exited {code}"))
        self._alerts = keep

    # -- stopping ---------------------------------------------------------------------

    def _stop_runs(self, level: int, why: str, grace: float | None) -> None:
        stopped = self._slots.stop_runs(level, why, grace)
        if stopped >= 0:
            self._emit(Event("stopping", detail=f"{why}; {stopped} job(s) running"))

    def _shutdown(self, board: Board) -> None:
        """Leave nothing behind: running jobs stopped and released, slots ended, alerts waited for."""
        if self._busy:
            self._stop_runs(2, "the worker is leaving", 0.0)
        self._slots.close()
        self._collect(board)
        deadline = time.monotonic() + 30.0
        self._reap_alerts(wait=30.0)
        if self._webhook is not None:
            self._webhook.close(wait=deadline - time.monotonic())  # what it leaves is reported failed
            self._said_deliveries()
