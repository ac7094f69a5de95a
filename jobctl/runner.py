"""Run one command under a lease that jobctl keeps alive.

A :class:`Run` takes a record its caller has just claimed and a
:class:`Command`, starts the command as a child process and supervises it
from the same thread, without blocking on it: a ``poll`` loop waits on the
child's exit (a pidfd on Linux), on a wake-up pipe and on the next deadline.

At every deadline the run moves toward what the record asks [JOB-I8]:

* every third of the TTL it renews the lease; the renewal returns the record,
  so the intent and the recall are read in the same write. Between renewals a
  plain read checks them about once a second, so a cancel is noticed quickly;
* ``cancel`` -> SIGTERM to the child's process group, SIGKILL after the grace,
  the record ends ``cancelled`` with the reason [JOB-I9] [JOB-S3];
* ``pause`` -> the child is stopped and the job released: it becomes
  ``pending`` and stays paused, so no sweep adopts it [JOB-I10] [JOB-I11];
* a recall -> the child is stopped before ``until`` and the job released,
  keeping whatever checkpoint the child wrote [JOB-R3] [JOB-R6];
* a write refused ``stale_epoch`` or ``lease_expired`` (or a read showing that
  somebody else claimed) means the job is somebody else's now: the child is
  SIGKILLed at once and the run ends fenced, writing nothing more [JOB-L5].
  If renewals keep failing for another reason, the child is killed just
  before the lease the run last obtained runs out, so an adopter never starts
  while this child still runs.

The child starts in its own process group with a parent-death signal
(``prctl(PR_SET_PDEATHSIG, SIGKILL)`` on Linux), so it dies with a SIGKILLed
supervisor; one that escapes anyway (a grandchild) has every write refused by
the epoch fencing once the job is adopted. When the child exits, whatever is
left in its process group is killed: a job's processes do not outlive it.

On exit status 0 the record becomes ``complete``; otherwise the failure is
counted under the job's retry policy (:func:`jobctl.schedule.record_failure`)
and the record either goes back to ``pending`` with its next not-before time
or ends ``failed``. The state, the error and the retry bookkeeping travel in
one update, and the update re-reads the record under the lock, so the
checkpoint and ``done`` a child wrote itself (``jobctl checkpoint`` with the
same epoch) are what the final write carries [JOB-T4].

Output: each attempt's stdout and stderr go to
``<root>/work/.jobctl/logs/<id>/attempt-<N>.log`` (see :func:`log_dir` for why
not inside ``work/<id>``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Protocol

from .errors import Invalid, JobError, LeaseExpired, NotFound, Refused, StaleEpoch
from .record import Record, format_time
from .schedule import attempt as attempt_of
from .schedule import claim_next as schedule_claim_next
from .schedule import not_before, record_failure
from .store.base import OpenListing

__all__ = [
    "Command",
    "Outcome",
    "Processor",
    "Run",
    "RunStore",
    "shell_command",
    "handler_command",
    "processors",
    "log_dir",
    "log_path",
    "log_files",
    "child_env",
    "SHELL",
    "ClaimStore",
    "claim_next",
    "Guardian",
]

#: The kind jobctl runs without any set-up: spec ``{"argv": [...], "cwd"?, "env"?, "timeout"?}``.
SHELL = "shell"


class RunStore(Protocol):
    """What a run needs of a store: the holder's operations and the job's paths."""

    root: str

    def now(self) -> datetime: ...
    def load(self, job_id: str) -> Record: ...
    def renew(self, job_id: str, epoch: int, ttl_seconds: float) -> Record: ...
    def release(self, job_id: str, epoch: int) -> Record: ...
    def update(self, job_id: str, epoch: int, mutate: Callable[[Record], object]) -> Record: ...
    def work_path(self, job_id: str) -> str: ...


# -- what to run ----------------------------------------------------------------


@dataclass
class Command:
    """A child process to start: argv, and optionally cwd, extra env, a timeout and stdin bytes."""

    argv: list[str]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    stdin: bytes | None = None


#: Turns a claimed record into the command that does its work; raises ``Invalid`` for a spec it cannot run.
Processor = Callable[[Record], Command]


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def shell_command(rec: Record) -> Command:
    """The ``shell`` kind: ``argv`` (non-empty list of strings), ``cwd``, ``env`` (strings), ``timeout`` (seconds)."""
    spec = rec.spec
    if not isinstance(spec, dict):
        raise Invalid("a shell job's spec must be an object with argv", rec.id)
    argv = spec.get("argv")
    if not _str_list(argv) or not argv:
        raise Invalid('a shell job\'s spec needs "argv": a non-empty list of strings', rec.id)
    cwd = spec.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise Invalid('"cwd" must be a directory path', rec.id)
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise Invalid('"env" must be an object of strings', rec.id)
    timeout = spec.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf
    ):
        raise Invalid('"timeout" must be a positive number of seconds', rec.id)
    return Command(list(argv), cwd, dict(env), None if timeout is None else float(timeout))


def handler_command(command_line: str) -> Processor:
    """A processor for another kind: ``/bin/sh -c COMMAND_LINE``, the job's spec (compact JSON) on stdin."""

    def build(rec: Record) -> Command:
        spec = rec.opaque_text("spec") or "{}"
        return Command(["/bin/sh", "-c", command_line], stdin=spec.encode("utf-8"))

    return build


def processors(handlers: Mapping[str, str] | None = None) -> dict[str, Processor]:
    """``shell`` plus one handler command per other kind. A handler for ``shell`` replaces the built-in."""
    out: dict[str, Processor] = {SHELL: shell_command}
    for kind, command_line in (handlers or {}).items():
        out[kind] = handler_command(command_line)
    return out


# -- where output goes ----------------------------------------------------------


def log_dir(store: RunStore, job_id: str) -> str:
    """``<root>/work/.jobctl/logs/<id>``: the attempt logs of one job.

    Not ``work/<id>/...``: ``work/<id>`` is a *name* reserved for the job, and
    the job alone decides whether it becomes a file or a directory [JOB-W1].
    A job that writes its result to ``$JOB_WORK`` as a file would find a
    directory in its way if jobctl had made one there. ``.jobctl`` starts with
    a dot, which no job id can (ids are checked; minted ones are digits), so
    it can never be a job's reserved name either, and it stays under the
    store's ``work/`` on the same filesystem, moving with the store.
    """
    work = store.work_path(job_id)
    return os.path.join(os.path.dirname(work), ".jobctl", "logs", os.path.basename(work))


def log_path(store: RunStore, job_id: str, attempt: int) -> str:
    return os.path.join(log_dir(store, job_id), f"attempt-{attempt}.log")


def log_files(store: RunStore, job_id: str) -> list[tuple[int, str]]:
    """``(attempt, path)`` of every attempt log of the job, in attempt order."""
    directory = log_dir(store, job_id)
    out = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name.startswith("attempt-") and name.endswith(".log") and name[8:-4].isdigit():
            out.append((int(name[8:-4]), os.path.join(directory, name)))
    out.sort()
    return out


# -- the child's environment ----------------------------------------------------

_CHILD_VARS = ("JOB_STORE", "JOB_ID", "JOB_EPOCH", "JOB_KIND", "JOB_WORK", "JOB_CHECKPOINT", "JOB_ATTEMPT")


def child_env(store: RunStore, rec: Record, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a job's command starts with: ``base`` plus the ``JOB_*`` variables.

    ``JOB_CHECKPOINT`` is the predecessor's checkpoint as compact JSON, unset
    when there is none, so ``jobctl checkpoint`` and a resuming command need
    no flags.
    """
    env = dict(os.environ if base is None else base)
    for name in _CHILD_VARS:
        env.pop(name, None)
    env["JOB_STORE"] = os.path.abspath(store.root)
    env["JOB_ID"] = rec.id
    env["JOB_EPOCH"] = str(rec.lease.epoch)
    env["JOB_KIND"] = rec.kind
    env["JOB_WORK"] = os.path.abspath(store.work_path(rec.id))
    env["JOB_ATTEMPT"] = str(attempt_of(rec))
    checkpoint = rec.checkpoint_text()
    if checkpoint is not None and checkpoint != "null":
        env["JOB_CHECKPOINT"] = checkpoint
    return env


# -- starting the child ---------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


_PRCTL = _load_prctl()


def _child_setup(parent: int) -> Callable[[], None]:
    """What runs in the child between fork and exec.

    Its own process group, so a stop reaches everything the command started;
    the parent-death signal, so a SIGKILLed supervisor takes the child with
    it. The death signal is armed only from here on: if the parent already
    died between fork and prctl, the child must not start at all. Everything
    used here is resolved in the parent beforehand.
    """
    prctl = _PRCTL
    kill = int(signal.SIGKILL)

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(128 + kill)

    return setup


_GUARDIAN = r"""
import os, signal, sys
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
live = set()
for line in sys.stdin.buffer:
    try:
        pid = int(line[1:])
    except ValueError:
        continue
    if line[:1] == b"+":
        live.add(pid)
    else:
        live.discard(pid)
for pid in live:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


class Guardian:
    """A small process that kills the process groups of a supervisor's children if the supervisor dies.

    The worker starts children the cheap way (vfork/exec, no code between
    them), where no parent-death signal can be armed: a ``preexec_fn`` forces
    a full fork of the Python process, which costs more than the rest of a
    trivial job together. Instead each child's process group is registered
    here (``+pid``) when it starts and withdrawn (``-pid``) before it is
    reaped. The guardian reads its stdin until end of file, which the kernel
    delivers when the supervisor dies however it dies (its descriptors close;
    no child holds a copy, they are all started with ``close_fds``), and then
    SIGKILLs every group still registered -- the whole group, which a
    parent-death signal on the direct child alone would not reach. It ignores
    terminal signals and lives in its own session, so a Ctrl-C meant for the
    worker leaves it standing guard while the worker shuts down.
    """

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARDIAN],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self.proc.stdin is not None
        self._fd = self.proc.stdin.fileno()
        self._lock = threading.Lock()

    def _say(self, line: str) -> None:
        with self._lock:
            if self._fd < 0:
                return
            try:
                os.write(self._fd, line.encode())
            except OSError:
                self._fd = -1  # it died: the children are left to the epoch fencing

    def watch(self, pid: int) -> None:
        self._say(f"+{pid}\n")

    def forget(self, pid: int) -> None:
        self._say(f"-{pid}\n")

    def close(self) -> None:
        """Nothing left to guard: end the guardian (it kills only what is still registered)."""
        with self._lock:
            self._fd = -1
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


#: Popen starts a child in its own process group without a preexec_fn from Python 3.11.
_VFORK_GROUPS = sys.version_info >= (3, 11)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        # A member changed its credentials (setuid); the rest still get it.
        pass


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it.

    Not reaping keeps the zombie's pid, which is also the process group's id,
    from being reused while the group is still being signalled.
    """
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == pid


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _describe_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit status {code}"


# -- the outcome ----------------------------------------------------------------


@dataclass
class Outcome:
    """How one run ended.

    ``state`` is the record's state after the run's last write: ``complete``,
    ``failed``, ``cancelled``, ``pending`` (released: retry, pause, recall,
    stop), or the state somebody else left when the run was fenced or its
    final write refused (``""`` when unknown). ``reason`` says why the child
    stopped: ``exit``, ``cancel``, ``pause``, ``recall``, ``stop``,
    ``timeout``, ``fenced``, or ``not-started``.
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

    @property
    def fenced(self) -> bool:
        return isinstance(self.verdict, (StaleEpoch, LeaseExpired))

    @property
    def status(self) -> int:
        """An exit status mirroring the child's (128+N for signal N); a verdict's code when fenced."""
        if self.fenced and self.verdict is not None:
            return self.verdict.exit_code
        if self.exit_code is None:
            if self.verdict is not None:
                return self.verdict.exit_code
            return 0 if self.state in ("complete", "pending") else 1
        if self.exit_code < 0:
            return 128 - self.exit_code
        return self.exit_code


# -- the run --------------------------------------------------------------------

# Dispositions in the order one overrides another: losing the lease beats
# everything, a cancel beats a release, a release beats a timeout.
_PRIORITY = {"fenced": 4, "cancel": 3, "pause": 2, "recall": 2, "stop": 2, "timeout": 1}


class Run:
    """One attempt of one claimed job: start the command, keep the lease, record the end.

    ``rec`` is the record as the claim returned it. ``execute()`` blocks until
    the child is gone and the record written; ``stop()`` may be called from
    any thread or a signal handler to stop the child and release the job.
    The thread that calls ``execute()`` is the child's parent for the
    parent-death signal, so it must be the one that lives as long as the child.
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
    ) -> None:
        if not ttl > 0:
            raise Invalid("ttl must be positive")
        self.store = store
        self.rec = rec
        self.job_id = rec.id
        self.epoch = rec.lease.epoch
        self.owner = rec.lease.owner
        self._command = command
        self.ttl = float(ttl)
        self.grace = max(0.0, float(grace))
        self.renew_every = self.ttl / 3
        self.check_every = min(max(0.05, float(check_every)), self.renew_every)
        self._env = env
        self._tee = tee
        self._guardian = guardian
        self._log = log
        self.attempt = attempt_of(rec)
        self.pid: int | None = None
        # Reentrant: stop() may run in a signal handler on the thread that holds it.
        self._lock = threading.RLock()
        # Stop requests, appended by stop() and consumed in order by the loop;
        # list.append is atomic, so a request can never be lost between a read and a reset.
        self._requests: list[tuple[str, float | None]] = []
        self._handled = 0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._closed = False

    # -- control from other threads -------------------------------------------

    def stop(self, reason: str = "stopped", *, grace: float | None = None) -> None:
        """Stop the child (SIGTERM, SIGKILL after ``grace``) and release the job.

        Safe from another thread and from a signal handler. Calling it again
        with a shorter grace hurries the stop along; ``grace=0`` is SIGKILL now.
        """
        self._requests.append((reason, grace))
        with self._lock:
            if self._closed:
                return
            try:
                os.write(self._wake_w, b"!")
            except (BlockingIOError, OSError):
                pass

    # -- the attempt ----------------------------------------------------------

    def execute(self) -> Outcome:
        try:
            return self._execute()
        finally:
            with self._lock:
                self._closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _outcome(self, **kw: Any) -> Outcome:
        return Outcome(self.job_id, self.rec.kind, self.epoch, self.attempt, **kw)

    def _execute(self) -> Outcome:
        rec = self.rec
        # Check the intent before starting [JOB-I8]: the claim keeps it as found.
        if rec.want == "cancel":
            return self._cancel(self._outcome(reason="not-started"), rec)
        if rec.want == "pause":
            return self._release(self._outcome(reason="pause", error=""))
        try:
            command = self._command(rec) if callable(self._command) else self._command
        except Invalid as exc:
            # A spec this kind cannot run will not run on a retry either.
            return self._finish(self._outcome(reason="not-started", error=f"cannot run: {exc.message}"), "failed")
        return self._supervise(command)

    def _open_log(self) -> IO[bytes] | None:
        if not self._log:
            return None
        path = log_path(self.store, self.job_id, self.attempt)
        try:
            try:
                handle = open(path, "ab")  # noqa: SIM115 -- closed by _supervise once the child is gone
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                handle = open(path, "ab")  # noqa: SIM115 -- as above
        except OSError:
            return None  # no log beats no run: the output goes where the runner's goes
        handle.write(
            f"--- jobctl: attempt {self.attempt}, epoch {self.epoch}, owner {self.owner}, "
            f"started {format_time(self.store.now())} ---\n".encode()
        )
        handle.flush()
        return handle

    def _supervise(self, command: Command) -> Outcome:
        log = self._open_log()
        out = self._outcome(log=None if log is None else log.name)
        try:
            started = self._start(command, log, out)
            if started is None:
                return self._failed(out, out.exit_code)
            proc, tee_r = started
            try:
                code, disposition, detail, fenced = self._watch(proc, command, tee_r, log)
            finally:
                if tee_r is not None:
                    os.close(tee_r)
            out.exit_code = code
            if fenced is not None:
                self._footer(log, f"{_describe_status(code)}; {fenced.verdict}: {fenced.message}")
            else:
                self._footer(log, _describe_status(code) + (f" ({disposition}: {detail})" if disposition else ""))
        finally:
            if log is not None:
                log.close()
        if fenced is not None:
            # Somebody else owns the job now: write nothing more [JOB-L5].
            out.reason, out.verdict = "fenced", fenced
            with contextlib.suppress(JobError):
                out.state = self.store.load(self.job_id).state
            return out
        if disposition == "cancel":
            out.reason = "cancel"
            return self._cancel(out, None, detail)
        if disposition in ("pause", "recall", "stop"):
            out.reason = disposition
            return self._release(out)
        if disposition == "timeout":
            out.reason = "timeout"
            out.error = detail
            return self._failed(out, None)
        if code == 0:
            out.error = ""
            return self._finish(out, "complete")
        out.error = _describe_status(code)
        return self._failed(out, code)

    def _start(
        self, command: Command, log: IO[bytes] | None, out: Outcome
    ) -> tuple[subprocess.Popen[bytes], int | None] | None:
        """Start the child; None (with ``out`` telling why) when it could not be started."""
        env = child_env(self.store, self.rec, self._env)
        env.update(command.env)
        stdout: Any = log
        tee_r: int | None = None
        tee_w: int | None = None
        if self._tee is not None:
            tee_r, tee_w = os.pipe()
            stdout = tee_w
        # The spec goes in through an unlinked temporary, not a pipe: the
        # child may never read it, and a pipe would block once its buffer filled.
        with contextlib.ExitStack() as stack:
            stdin: Any = subprocess.DEVNULL
            if command.stdin is not None:
                stdin = stack.enter_context(tempfile.TemporaryFile())
                stdin.write(command.stdin)
                stdin.seek(0)
            spawn: dict[str, Any] = {}
            if self._guardian is not None and _VFORK_GROUPS:
                spawn["process_group"] = 0
            else:
                # setpgid and PR_SET_PDEATHSIG can only be done by the child itself.
                spawn["preexec_fn"] = _child_setup(os.getpid())
            try:
                proc = subprocess.Popen(
                    command.argv,
                    cwd=command.cwd,
                    env=env,
                    stdin=stdin,
                    stdout=stdout,
                    stderr=subprocess.STDOUT if stdout is not None else None,
                    **spawn,
                )
            except OSError as exc:
                if tee_r is not None:
                    os.close(tee_r)
                out.exit_code = 127 if isinstance(exc, FileNotFoundError) else 126
                out.error = f"cannot start {command.argv[0]}: {exc.strerror or exc}"
                self._footer(log, out.error)
                return None
            finally:
                if tee_w is not None:
                    os.close(tee_w)
        self.pid = out.pid = proc.pid
        if self._guardian is not None:
            self._guardian.watch(proc.pid)
        return proc, tee_r

    def _footer(self, log: IO[bytes] | None, text: str) -> None:
        if log is None:
            return
        try:
            log.write(f"--- jobctl: {text} ---\n".encode())
            log.flush()
        except (OSError, ValueError):
            pass

    # -- supervision loop -----------------------------------------------------

    def _watch(
        self, proc: subprocess.Popen[bytes], command: Command, tee_r: int | None, log: IO[bytes] | None
    ) -> tuple[int, str, str, JobError | None]:
        """Supervise the child until it exits: returns (exit code, disposition, detail, fencing verdict)."""
        store = self.store
        pid = proc.pid
        pidfd = _pidfd(pid)
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        if tee_r is not None:
            os.set_blocking(tee_r, False)
            poller.register(tee_r, select.POLLIN)
        mono = time.monotonic
        start = mono()
        # The lease as the claim left it, on this process's monotonic clock,
        # a little early: the child must be gone before an adopter may start.
        remaining = (self.rec.lease.expires_at - store.now()).total_seconds() if self.rec.lease.expires_at else 0
        margin = min(0.2, self.ttl / 10)
        lease_end = start + remaining - margin
        renew_at = start + self.renew_every
        check_at = start + self.check_every
        timeout_at = start + command.timeout if command.timeout else math.inf
        kill_at = math.inf
        disposition, detail = "", ""
        fenced: JobError | None = None
        sent_term = False

        def begin(what: str, why: str, grace: float | None, deadline: float = math.inf) -> None:
            nonlocal disposition, detail, kill_at, sent_term
            if _exited(pid):
                return  # it ended on its own first: its exit status decides
            if _PRIORITY.get(what, 0) > _PRIORITY.get(disposition, 0):
                disposition, detail = what, why
            now = mono()
            when = min(now + (self.grace if grace is None else max(0.0, grace)), deadline)
            if when <= now:
                _killpg(pid, signal.SIGKILL)
                kill_at = math.inf
                sent_term = True
                return
            if not sent_term:
                _killpg(pid, signal.SIGTERM)
                sent_term = True
            kill_at = min(kill_at, when)

        def examine(rec: Record) -> None:
            nonlocal fenced, lease_end
            if rec.lease.epoch != self.epoch:
                fenced = StaleEpoch(
                    f"job {self.job_id} is at epoch {rec.lease.epoch}, not {self.epoch}: "
                    f"{rec.lease.owner or 'somebody'} claimed it since",
                    self.job_id,
                )
                begin("fenced", fenced.message, 0)
                return
            if rec.terminal:
                return  # the child finished the job itself; let it exit
            if rec.want == "cancel":
                by = rec.intent.by if rec.intent is not None else ""
                begin("cancel", f"cancelled at the request of {by}" if by else "cancelled on request", None)
            elif rec.want == "pause":
                begin("pause", "paused on request", None)
            if rec.lease.expires_at is not None:
                # A recall lowers the lease's end [JOB-R3]; a read sees it as well as a renewal.
                lease_end = min(lease_end, mono() + (rec.lease.expires_at - store.now()).total_seconds() - margin)
            recall = rec.lease.recall
            if recall is not None and recall.until is not None:
                # Stop the child early enough to release before the lease ends:
                # a holder that yields is not one that was evicted [JOB-R3].
                left = lease_end - mono()
                begin("recall", f"recalled: {recall.reason}", None, lease_end - min(0.5, max(0.0, left) / 4))

        while True:
            if _exited(pid):
                break
            now = mono()
            while self._handled < len(self._requests):
                why, grace = self._requests[self._handled]
                self._handled += 1
                begin("stop", why, grace)
            if now >= timeout_at and disposition == "":
                begin("timeout", f"timed out after {command.timeout:g} s", None)
                timeout_at = math.inf
            if now >= kill_at:
                _killpg(pid, signal.SIGKILL)
                kill_at = math.inf
            if fenced is None and now >= lease_end:
                fenced = LeaseExpired(f"job {self.job_id}: the lease of epoch {self.epoch} ran out unrenewed")
                fenced.job_id = self.job_id
                begin("fenced", fenced.message, 0)
            if fenced is None and now >= renew_at:
                before = mono()
                try:
                    rec = store.renew(self.job_id, self.epoch, self.ttl)
                except (StaleEpoch, LeaseExpired) as exc:
                    fenced = exc
                    begin("fenced", exc.message, 0)
                except (JobError, OSError):
                    # Not a verdict about the lease (an I/O error, a lock
                    # refused): try again soon; the lease guard above still
                    # kills the child before the last good lease runs out.
                    renew_at = mono() + min(1.0, self.renew_every)
                else:
                    end = rec.lease.expires_at
                    if end is not None:
                        lease_end = before + (end - store.now()).total_seconds() - margin
                        # store.now() is read after the write; the lease can
                        # only be longer than this estimate.
                    renew_at = before + self.renew_every
                    check_at = mono() + self.check_every
                    examine(rec)
            elif fenced is None and now >= check_at:
                try:
                    rec = store.load(self.job_id)
                except (JobError, OSError):
                    pass
                else:
                    examine(rec)
                check_at = mono() + self.check_every
            deadline = min(renew_at, check_at, kill_at, timeout_at, lease_end)
            if fenced is not None:
                deadline = min(kill_at, mono() + 0.05)
            wait = max(0.0, deadline - mono())
            if pidfd is None:
                wait = min(wait, 0.02)
            for fd, _mask in poller.poll(math.ceil(wait * 1000)):
                if fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 512)
                elif fd == tee_r:
                    self._pump(tee_r, log)
        # The leader is a zombie: its pid (the group's id) cannot be reused
        # yet. Nothing the job started outlives it.
        _killpg(pid, signal.SIGKILL)
        if self._guardian is not None:
            self._guardian.forget(pid)
        code = proc.wait()
        if pidfd is not None:
            os.close(pidfd)
        if tee_r is not None:
            self._pump(tee_r, log)
        return code, disposition, detail, fenced

    def _pump(self, fd: int, log: IO[bytes] | None) -> None:
        """Copy what the child wrote to the terminal and the log (tee mode)."""
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

    # -- final writes ---------------------------------------------------------

    def _refused(self, out: Outcome, exc: JobError) -> Outcome:
        out.verdict = exc
        if isinstance(exc, (StaleEpoch, LeaseExpired)):
            out.reason = "fenced"
        with contextlib.suppress(JobError):
            out.state = self.store.load(self.job_id).state
        return out

    def _finish(self, out: Outcome, state: str) -> Outcome:
        """The final state, with the error, in one update; checkpoint and done as found [JOB-T4]."""
        error = out.error

        def mutate(rec: Record) -> None:
            rec.state = state
            rec.error = error

        try:
            rec = self.store.update(self.job_id, self.epoch, mutate)
        except (JobError, OSError) as exc:
            return self._refused(out, exc if isinstance(exc, JobError) else _io(exc, self.job_id))
        out.state = rec.state
        return out

    def _failed(self, out: Outcome, code: int | None) -> Outcome:
        """Count the failure under the retry policy: back to pending with a not-before time, or failed."""
        now = self.store.now()
        error = f"attempt {self.attempt}: {out.error}"
        decided: dict[str, bool] = {}

        def mutate(rec: Record) -> None:
            again = record_failure(rec, code, now)
            decided["again"] = again
            rec.error = error
            if not again:
                rec.state = "failed"

        try:
            rec = self.store.update(self.job_id, self.epoch, mutate)
        except (JobError, OSError) as exc:
            return self._refused(out, exc if isinstance(exc, JobError) else _io(exc, self.job_id))
        out.error = error
        if not decided.get("again"):
            out.state = rec.state
            return out
        out.retried = True
        out.not_before = not_before(rec)
        return self._release(out)

    def _release(self, out: Outcome) -> Outcome:
        try:
            rec = self.store.release(self.job_id, self.epoch)
        except (JobError, OSError) as exc:
            return self._refused(out, exc if isinstance(exc, JobError) else _io(exc, self.job_id))
        out.state = rec.state
        return out

    def _cancel(self, out: Outcome, rec: Record | None, reason: str = "") -> Outcome:
        if not reason:
            current = rec if rec is not None else self.rec
            by = current.intent.by if current.intent is not None else ""
            reason = f"cancelled at the request of {by}" if by else "cancelled on request"
        out.error = reason
        return self._finish(out, "cancelled")


def _io(exc: OSError, job_id: str) -> JobError:
    return Refused(f"job {job_id}: {exc}", job_id)


class ClaimStore(RunStore, Protocol):
    """A store a run can also claim from and list."""

    def list_open(self) -> OpenListing: ...
    def claim(self, job_id: str, owner: str, ttl_seconds: float) -> Record: ...


def claim_next(store: ClaimStore, owner: str, ttl: float, kinds: set[str] | None = None) -> Record:
    """Claim the oldest runnable job (of ``kinds``, when given); ``NotFound`` when there is none."""
    rec = schedule_claim_next(store, owner, ttl, kinds)
    if rec is not None:
        return rec
    missing = NotFound("no runnable job" + (f" of kind {', '.join(sorted(kinds))}" if kinds else ""))
    missing.hint = "nothing may start now; jobctl list shows what each job waits for"
    raise missing
