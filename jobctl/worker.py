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
does not exist) the dependent is cancelled by the pick (:mod:`jobctl.picker`)
with a reason naming it, so nothing waits forever and the cancellation
cascades down a pipeline. A failed attempt under a retry policy goes back to
``pending`` with its next not-before time; only the last one leaves the job
``failed``, and then the ``on_failure`` command runs with ``JOB_ID``,
``JOB_KIND``, ``JOB_ERROR`` and ``JOB_ATTEMPT`` in its environment, and a
JSON message is posted to the ``on_failure_url`` webhook from a background
thread (both in :mod:`jobctl.alerts`). Every event is said, and counted in
the run's :class:`Summary`, by :mod:`jobctl.ledger`.

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
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from .alerts import Alerts
from .board import Board
from .errors import JobError
from .jobenv import JobEnvironment
from .keeper import Keeper, Lookout
from .ledger import Ledger, Summary
from .picker import Picker
from .prctl import seal
from .quota import Quota
from .record import TERMINAL, Record
from .roster import Announcer, announce_ttl
from .runner import Guardian, LogRoot, Processor, Run, processors
from .slots import Event, Report, Slots, SlotStore, Started
from .store.base import Notices, OpenListing
from .timetable import Firing, FiringStore

if TYPE_CHECKING:
    from .processor import AsyncLoop, ProcessorFunction

__all__ = ["Worker", "WorkerStore", "Event", "Summary", "MODES", "default_owner"]

MODES = ("loop", "once", "drain")


class WorkerStore(SlotStore, FiringStore, Protocol):
    """What the loop needs of a store beyond its slots' needs."""

    def claim(self, job_id: str, owner: str, ttl_seconds: float, *, wait: bool = True) -> Record: ...
    def announce(self, owner: str, kinds: Iterable[str], ttl_seconds: float) -> None: ...
    def withdraw(self, owner: str) -> None: ...
    def ids(self) -> list[str]: ...
    def list_open(self) -> OpenListing: ...
    def set_intent(self, job_id: str, want: str, by: str = "") -> Record: ...
    def notices(self, *, news_only: bool = False) -> Notices | None: ...


def default_owner(name: str = "worker") -> str:
    """``<name>@<host>:<pid>``: unique to this process, so two workers never share a lease owner."""
    # The node name is the host name gethostname(2) returns, without importing socket for it.
    return f"{name}@{os.uname().nodename}:{os.getpid()}"


class Worker:
    """A loop over one store. See the module docstring for what it promises.

    The main thread owns the board and hands the oldest runnable records to
    ``concurrency`` slot threads; each slot claims its record, runs it and
    reports back through a queue. Claims happen in the slots so that their
    fsyncs overlap, and a slot thread lives as long as the worker.
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
        limits: Mapping[str, int] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        #: At most N jobs of a kind at once (``--limit KIND=N``); and one job of an exclusive key.
        self.quota = Quota(limits)
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
        self.env = dict(os.environ if env is None else env)
        #: Every event is said here, counted in its summary and handed to ``on_event``.
        self.ledger = Ledger(store, self.handled, on_event)
        self._emit = self.ledger.emit
        # The alerts' environment is all of self.env; the jobs' is an allow-list of it.
        self.alerts = Alerts(store, self.owner, self.env, on_failure, on_failure_url, emit=self._emit, wake=self._wake)
        self.environment = environment or JobEnvironment()
        self.notices = notices
        self.summary = self.ledger.summary
        self._guardian: Guardian | None = None
        self._logs = LogRoot(store)  # work/.jobctl/logs, opened once for every run's log
        self._lookout: Lookout | None = None
        self._states: Mapping[str, str] = {}
        # Main thread only: ids handed to a slot and not reported back yet.
        self._busy: dict[str, Record] = {}
        self._picker = Picker(store, self.owner, self.ttl, self.poll_interval, self._emit)
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
            cancel=self._picker.cancel_held,
            start=self._started,
        )
        self._stop_level = 0
        self._stop_deadline = math.inf
        self._announced = False
        # What this worker runs, said to the store while it claims (jobctl.roster); taken back when it stops.
        self._word = Announcer(
            store, self.owner, self.kinds, announce_ttl(self.ttl, self.poll_interval), self._unannounced
        )
        # Recurring schedules: every worker fires the due slots, each once however many fire (jobctl.timetable).
        self._firing = Firing(store, lambda what, job_id, detail: self._emit(Event(what, job_id, detail=detail)))
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

    @property
    def on_event(self) -> Callable[[Event], None] | None:
        """What each event is handed to (besides the summary's count); may be set before :meth:`run`."""
        return self.ledger.on_event

    @on_event.setter
    def on_event(self, listener: Callable[[Event], None] | None) -> None:
        self.ledger.on_event = listener

    def _unannounced(self, line: str) -> None:
        self._emit(Event("unannounced", detail=line))

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
            self._logs.close()
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
            self._picker.doom_all(board, now)
        scanned_at = -1
        while True:
            self._collect(board)
            self.alerts.reap()
            now_mono = time.monotonic()
            wake: datetime | None = None
            if self._stop_level == 0:
                self._word.tick(now_mono)
                self._firing.tick(now_mono)
                board.refresh(max_age=self.poll_interval, skip=self._busy)
                self.ledger.say_unreadable(board)
                idle, wake = self._hand_out(board, only, now_mono)
                if not self._busy:
                    if mode == "once" and not only:
                        self.ledger.say_left(board)
                        return
                    if mode == "drain" and idle:
                        # Leave only on a fresh view: what just finished may
                        # have unblocked something the view does not show yet.
                        finished = self.summary["finished"]
                        if board.watching or scanned_at == finished:
                            due = self.ledger.retries_due(board)
                            if due is None:
                                self.ledger.settle_ran(board)
                                self.ledger.say_left(board)
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
        picked = self._slots.picked()  # not to be picked again, and counted against the kinds' limits
        skip = self._picker.excluded(self._busy, {rec.id for rec in picked}, now_mono)
        tally = self.quota.tally([*self._busy.values(), *picked])
        batch: list[Record] = []
        wake: datetime | None = None
        idle = False
        while len(self._busy) < self.concurrency:
            rec = self._slots.take_ahead()  # picked ahead of time, before any newer pick (counted already)
            if rec is None:
                rec, wake = self._picker.next(board, only, skip, tally.blocks)
                if rec is None:
                    idle = True
                    break
                tally.add(rec)
            elif only is not None:
                only.discard(rec.id)
            self._busy[rec.id] = rec
            batch.append(rec)
        self._slots.hand(batch)
        while not idle and self._slots.ahead() < self.concurrency:
            rec, _ = self._picker.next(board, only, skip, tally.blocks)
            if rec is None:
                break
            tally.add(rec)
            self._slots.add_ahead(rec)
        return idle, wake

    def _idle(self, board: Board, wake: datetime | None, now_mono: float) -> None:
        timeout = self.poll_interval
        if wake is not None:
            timeout = min(timeout, max(0.0, (wake - self.store.now()).total_seconds()) + 0.001)
        if self._stop_level == 0:
            timeout = min(timeout, max(0.0, self._firing.due_mono - now_mono))
        if self._stop_level == 1:
            timeout = min(timeout, max(0.0, self._stop_deadline - now_mono))
        if self.alerts.running:
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
            logs=self._logs,
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
        self._picker.reported(report)
        out = report.outcome
        if report.record is not None:
            board.note(report.record)
        elif out is not None and out.state in TERMINAL and out.verdict is None:
            board.settle(job_id, out.state)
        else:
            with contextlib.suppress(JobError, OSError):
                board.reload(job_id)
        if report.event is not None:
            self._emit(report.event)
        if out is not None and self.ledger.ran(job_id, out) == "failed":
            self.alerts.alert(out)

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
        self.alerts.close()
