"""The child's work: a command run as a child process under a lease, and :class:`Run`, one attempt of it.

:class:`ChildWork` is the kind of work a :class:`~jobctl.keeper.Keeper`
keeps a lease for when the work is a command: it has the guardian start
the child (:mod:`jobctl.guardian`, :mod:`jobctl.runner.start`), copies its output to the
attempt's log (:mod:`jobctl.runner.logs`), stops it when the keeper says so,
and takes its result. :class:`Run` puts the two together for a caller that
holds a claimed record.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Protocol

from ..children import describe_status, feed, killpg
from ..errors import JobError, LeaseExpired, NotFound
from ..guardian import Child, Guardian, Late, LeaseRecord, Unguarded
from ..jobenv import JobEnvironment
from ..keeper import Keeper, Lookout, Outcome, Work
from ..prctl import seal
from ..record import Record
from .attempt import AttemptFiles
from .command import Command, Processor, RunStore, child_env
from .logs import LogRoot
from .start import executable, guard_margin, own_margin, read_every

__all__ = ["ChildWork", "Run", "ClaimStore", "claim_next"]


class ChildWork(Work):
    """A command run as a child process: the work of a ``shell`` job and of a handler command.

    The :class:`Guardian` process starts the child, in its own process group,
    and is its parent; its output goes to the attempt log (and to ``tee``).
    Stopping it is SIGTERM to the group, SIGKILL at the deadline, both sent
    through the guardian; when it exits, the guardian kills whatever is left
    in its group and tells its exit status on the start's channel.
    """

    def __init__(
        self,
        command: Command | Processor,
        *,
        env: Mapping[str, str] | None = None,
        tee: IO[bytes] | None = None,
        log: bool = True,
        guardian: Guardian | None = None,
        environment: JobEnvironment | None = None,
        logs: LogRoot | None = None,
    ) -> None:
        self._command = command
        self._env = env
        self._environment = environment or JobEnvironment()
        self._tee = tee
        self._guardian = guardian
        self._own_guardian = False
        self.files = AttemptFiles(logs, log)
        self.pid: int | None = None
        self.command: Command | None = None
        self.keeper: Keeper | None = None
        self._child: Child | None = None
        #: Its wait status once the guardian told it (None: still running, or the guardian is gone).
        self._status: int | None = None
        #: The guardian ended before it told the child's end (see :meth:`_orphaned`).
        self._orphan = False
        self._tee_r: int | None = None
        self._spec_fd = -1
        self._spec_left = memoryview(b"")
        self._kill_at = math.inf
        self._timeout_at = math.inf
        self._sent_term = False
        self._guarded_at = math.inf
        self._ttl = 30.0

    def prepare(self, keeper: Keeper) -> None:
        rec = keeper.rec
        command = self._command(rec) if callable(self._command) else self._command
        self._environment.check(command.env, rec.id)
        self.command = command
        self.keeper = keeper
        self._ttl = keeper.ttl

    def margin(self, ttl: float) -> float:
        return own_margin(ttl)

    # -- starting ---------------------------------------------------------------

    def start(self, keeper: Keeper, out: Outcome) -> bool:
        assert self.command is not None  # prepare() ran
        command = self.command
        log = self.files.open_log(keeper)
        out.log = None if log is None else log.name
        # Before any code of the job can run: it runs as this process's user, who could otherwise read
        # this process's environment, memory and descriptors through /proc (jobctl.prctl).
        seal()
        if self._guardian is None:
            self._guardian = Guardian()  # its process starts with the child it guards
            self._own_guardian = True
        self.files.result_ready(keeper)
        started = self._start(keeper, command, log, out, self._guardian)
        if started is None:
            self._close()  # before the write that records it, as a child that ran
            return False
        child, tee_r, spec, expiry = started
        self._child, self._tee_r = child, tee_r
        if spec is not None:
            self._spec_fd, self._spec_left = spec[0], memoryview(spec[1])
        self._heard(child.rest)  # a child quick to end: its status may have come with its pid
        self._guarded_at = expiry - guard_margin(self._ttl)
        start = time.monotonic()
        self._timeout_at = start + command.timeout if command.timeout else math.inf
        return True

    def _start(
        self, keeper: Keeper, command: Command, log: IO[bytes] | None, out: Outcome, guardian: Guardian
    ) -> tuple[Child, int | None, tuple[int, bytes] | None, float] | None:
        """Have the guardian start the child; None (with ``out`` telling why) when it did not start.

        Returns the child, the tee pipe, the spec still to write to the child's
        stdin (fd and bytes) and the lease's monotonic expiry. The guardian
        spawns the command itself, registered before it runs: a time already
        past (this process was stopped since the claim) starts nothing, since
        the lease may be somebody else's by now. Where the store allows, the
        guardian reads the record too: a recall made while this process is
        stopped cannot reach it otherwise.
        """
        store = keeper.store
        env = child_env(store, keeper.rec, self._env, self._environment)
        env.update(command.env)
        if self.files.result_file is not None:
            env["JOB_RESULT"] = os.path.abspath(self.files.result_file)
        expiry = keeper.lease_expiry()
        try:
            path = executable(command.argv[0], env, command.cwd)
        except OSError as exc:
            self._not_started(out, command, exc)
            return None
        if time.monotonic() >= expiry - own_margin(self._ttl):
            self._late(keeper, out)
            return None
        margin = guard_margin(self._ttl)
        source = store.lease_source(keeper.job_id)
        record = None if source is None else LeaseRecord(source, keeper.epoch, margin, read_every(self._ttl))
        # Its output: the log, or the tee pipe this process copies; else this process's own stdout and stderr.
        tee_r = tee_w = spec_r = spec_w = None
        if self._tee is not None:
            tee_r, tee_w = os.pipe()
        # The spec of a handler kind goes to the child's stdin, written by the
        # supervision loop as the child reads it: it may never read it, and a
        # blocking write would stop supervising once the pipe's buffer filled.
        if command.stdin:
            spec_r, spec_w = os.pipe()
        stdout = tee_w if tee_w is not None else log.fileno() if log is not None else 1
        try:
            child = guardian.start(
                command.argv,
                path,
                env,
                cwd=command.cwd,
                stdout=stdout,
                stderr=None if stdout != 1 else 2,
                stdin=spec_r,
                kill_at=expiry - margin,
                record=record,
            )
        except (OSError, Late, Unguarded) as exc:
            for fd in (tee_r, spec_w):
                if fd is not None:
                    os.close(fd)
            if isinstance(exc, OSError):
                self._not_started(out, command, exc)
            elif isinstance(exc, Late):
                self._late(keeper, out)
            else:
                out.exit_code = 126
                out.error = f"cannot start {command.argv[0]}: no guardian process to supervise it ({exc})"
                self.files.footer(out.error)
            return None
        finally:
            for fd in (tee_w, spec_r):
                if fd is not None:
                    os.close(fd)
        self.pid = out.pid = child.pid
        spec = None
        if spec_w is not None:
            os.set_blocking(spec_w, False)
            spec = (spec_w, command.stdin or b"")
        return child, tee_r, spec, expiry

    def _late(self, keeper: Keeper, out: Outcome) -> None:
        out.reason = "fenced"
        late = LeaseExpired(f"job {keeper.job_id}: the lease of epoch {keeper.epoch} ran out before the start")
        late.job_id = keeper.job_id
        out.verdict = late
        self.files.footer(f"not started; {late.verdict}: {late.message}")

    def completing(self, out: Outcome) -> Callable[[Record], None] | None:
        """The result the child left at ``$JOB_RESULT``, stored with the completion (:meth:`AttemptFiles.result`)."""
        return None if self.keeper is None else self.files.result(self.keeper.job_id)

    def _not_started(self, out: Outcome, command: Command, exc: OSError) -> None:
        out.exit_code = 127 if isinstance(exc, FileNotFoundError) else 126
        out.error = f"cannot start {command.argv[0]}: {exc.strerror or exc}"
        self.files.footer(out.error)

    # -- supervision (the keeper's loop calls these) ------------------------------

    def register(self, poller: select.poll) -> float:
        assert self._child is not None
        if not self.done():
            poller.register(self._child.chan.fileno(), select.POLLIN)
        if self._tee_r is not None:
            os.set_blocking(self._tee_r, False)
            poller.register(self._tee_r, select.POLLIN)
        if self._spec_fd >= 0:
            poller.register(self._spec_fd, select.POLLOUT)
        self._poller = poller
        return math.inf  # the child's end wakes the loop: the guardian tells it on the channel

    def ready(self, fd: int) -> None:
        child = self._child
        if fd == self._tee_r:
            self._pump(fd)
        elif fd == self._spec_fd:
            self._spec_left = feed(fd, self._spec_left)
            if not self._spec_left:
                self._poller.unregister(fd)
                os.close(fd)
                self._spec_fd = -1
        elif child is not None and fd == child.chan.fileno():
            try:
                data = child.chan.recv(256)
            except OSError:
                data = b""
            if not data:
                self._orphan = self._status is None  # end of file before the status: the guardian is gone
            else:
                self._heard(child.rest + data)
            if self.done():
                self._poller.unregister(fd)

    def _heard(self, data: bytes) -> None:
        """Take in what the guardian said on the child's channel: ``X<wait status>``, once."""
        assert self._child is not None
        line, nl, _ = data.partition(b"\n")
        self._child.rest = b"" if nl else data
        if line[:1] == b"X" and line[1:].lstrip(b"-").isdigit():
            self._status = int(line[1:])

    def done(self) -> bool:
        return self._status is not None or self._orphan

    def _signal(self, sig: int) -> None:
        assert self._child is not None and self._guardian is not None
        self._guardian.signal(self._child, sig)

    def stop(self, when: float, now: float) -> None:
        if when <= now:
            self._signal(signal.SIGKILL)
            self._kill_at = math.inf
            self._sent_term = True
            return
        if not self._sent_term:
            self._signal(signal.SIGTERM)
            self._sent_term = True
        self._kill_at = min(self._kill_at, when)

    def lease_moved(self, expiry: float) -> None:
        # The guardian follows the lease: it kills only when this loop could not.
        guarded_at = expiry - guard_margin(self._ttl)
        if guarded_at != self._guarded_at and self._child is not None and self._guardian is not None:
            self._guarded_at = guarded_at
            self._guardian.renew(self._child, guarded_at)

    def due(self) -> float:
        return min(self._kill_at, self._timeout_at)

    def tick(self, now: float) -> tuple[str, str] | None:
        assert self.command is not None
        stop_for = None
        if now >= self._timeout_at:
            stop_for = ("timeout", f"timed out after {self.command.timeout:g} s")
            self._timeout_at = math.inf
        if now >= self._kill_at:
            self._signal(signal.SIGKILL)
            self._kill_at = math.inf
        return stop_for

    def killed_unasked(self) -> bool:
        # SIGKILLed, and not by the keeper: most likely by the guardian.
        status = self._status
        return status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

    def _orphaned(self) -> None:
        """The guardian ended before the child did: kill what it started, never another's.

        The guardian is buried (:meth:`jobctl.guardian.Guardian.lost`): every
        process left in its session is killed before it is reaped, this
        child's group with it. Where there is no ``/proc`` to find them by,
        the pidfd the guardian sent names the child itself: while it shows
        the child has not exited, the group's id is still the child's, and
        the group is killed; the child is killed through the pidfd in any
        case. Without a pidfd nothing more is done: the child's id, its
        parent gone, may be another's by now.
        """
        child = self._child
        assert child is not None
        if self._guardian is not None:
            self._guardian.lost(child.generation)  # its whole session killed, this child's group with it
        pfd = child.pidfd
        if pfd is None:
            return
        exited = select.select([pfd], [], [], 0)[0]
        if not exited:
            killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pfd, signal.SIGKILL)

    def end(self, out: Outcome, disposition: str, detail: str, fenced: JobError | None) -> None:
        child = self._child
        assert child is not None
        if self._orphan:
            self._orphaned()
            code = -int(signal.SIGKILL)
            why = "killed: its guardian process ended"
        else:
            assert self._status is not None
            code = os.waitstatus_to_exitcode(self._status)
            why = describe_status(code)
        child.close()
        if self._spec_fd >= 0:
            os.close(self._spec_fd)
            self._spec_fd = -1
        if self._tee_r is not None:
            self._pump(self._tee_r)
        out.exit_code = code
        if fenced is not None:
            self.files.footer(f"{why}; {fenced.verdict}: {fenced.message}")
        else:
            self.files.footer(why + (f" ({disposition}: {detail})" if disposition else ""))
        self.succeeded = code == 0
        if not self.succeeded:
            out.error = why
        self._close()  # before the final write, as ever: its latency is not the record's

    def after(self, out: Outcome) -> None:
        self._close()  # a child that never started leaves them open
        self.files.close()

    def _close(self) -> None:
        """Close the tee pipe, the attempt's own guardian and the log (each once)."""
        if self._tee_r is not None:
            os.close(self._tee_r)
            self._tee_r = None
        if self._own_guardian and self._guardian is not None:
            self._guardian.close()
            self._own_guardian = False
        self.files.close_log()

    def _pump(self, fd: int) -> None:
        """Copy what the child wrote to the terminal and the log (tee mode)."""
        log = self.files.logfile
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return
            if not chunk:
                return
            if self._tee is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._tee.write(chunk)
                    self._tee.flush()
            if log is not None:
                with contextlib.suppress(OSError, ValueError):
                    log.write(chunk)


class Run:
    """One attempt of one claimed job's command: a :class:`ChildWork` under a :class:`Keeper`.

    ``rec`` is the record as the claim returned it. ``execute()`` blocks until
    the child is gone and the record written; ``stop()`` may be called from
    any thread or a signal handler to stop the child and release the job.
    ``guardian``: the supervisor's
    :class:`Guardian` (a worker shares one among its runs); without one the
    run starts its own for the attempt. ``lookout``: likewise, the
    :class:`jobctl.keeper.Lookout` that tells the run its record was written.
    ``successor`` and ``claimed_at``: a worker slot's, as :class:`jobctl.keeper.Keeper` takes them.
    ``logs``: the store's log directory held open (:class:`~jobctl.runner.logs.LogRoot`, a worker
    shares one among its runs); without one the attempt's log directory is walked to from the root.
    """

    def __init__(
        self,
        store: RunStore,
        rec: Record,
        command: Command | Processor,
        *,
        ttl: float = 30.0,
        grace: float = 10.0,
        check_every: float = 1.0,
        env: Mapping[str, str] | None = None,
        tee: IO[bytes] | None = None,
        log: bool = True,
        guardian: Guardian | None = None,
        environment: JobEnvironment | None = None,
        lookout: Lookout | None = None,
        successor: Callable[[], Record | None] | None = None,
        claimed_at: float | None = None,
        logs: LogRoot | None = None,
    ) -> None:
        self.keeper = Keeper(
            store,
            rec,
            ttl=ttl,
            grace=grace,
            check_every=check_every,
            lookout=lookout,
            successor=successor,
            claimed_at=claimed_at,
        )
        self.work = ChildWork(command, env=env, tee=tee, log=log, guardian=guardian, environment=environment, logs=logs)
        self.store = store
        self.rec = rec
        self.job_id = rec.id
        self.epoch = rec.lease.epoch
        self.owner = rec.lease.owner
        self.attempt = self.keeper.attempt

    @property
    def pid(self) -> int | None:
        return self.work.pid

    def stop(self, reason: str = "stopped", *, grace: float | None = None) -> None:
        """Stop the child (SIGTERM, SIGKILL after ``grace``) and release the job.

        Safe from another thread and from a signal handler. Calling it again
        with a shorter grace hurries the stop along; ``grace=0`` is SIGKILL now.
        """
        self.keeper.stop(reason, grace=grace)

    def execute(self) -> Outcome:
        return self.keeper.execute(self.work)


class ClaimStore(RunStore, Protocol):
    """A store a run can also claim the next runnable job from."""

    def claim_next(
        self,
        owner: str,
        ttl: float,
        kinds: Iterable[str] | None = None,
        *,
        skipped: list[tuple[str, JobError]] | None = None,
    ) -> Record | None: ...


def claim_next(
    store: ClaimStore,
    owner: str,
    ttl: float,
    kinds: set[str] | None = None,
    skipped: list[tuple[str, JobError]] | None = None,
) -> Record:
    """Claim the oldest runnable job (of ``kinds``, when given); ``NotFound`` when there is none.

    ``skipped`` gets the jobs passed over for a refusal of their own (an
    ``Untrusted`` record, malformed scheduling data).
    """
    rec = store.claim_next(owner, ttl, kinds, skipped=skipped)
    if rec is not None:
        return rec
    missing = NotFound("no runnable job" + (f" of kind {', '.join(sorted(kinds))}" if kinds else ""))
    missing.hint = "nothing may start now; jobctl list shows what each job waits for"
    raise missing
