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

The child starts in its own process group under a :class:`Guardian`, a
small process of its own that the supervisor tells each group's deadline (a
little before its lease can run out) before the child may run any code of the
job, and again at every renewal: it SIGKILLs the group when the supervisor
is stopped (SIGSTOP, Ctrl-Z) and its deadline comes, and every group when the
supervisor dies. Where the store has a record file on the system clock it
also reads the lease there itself, so a recall or a claim made while the
supervisor is stopped is honoured too. ``jobctl run`` and the worker use it alike. A run that finds
its child's exit only after its own lease deadline (it was stopped) writes
nothing more. A process that escapes anyway (one that started its own
session) has every write refused by the epoch fencing once the job is
adopted. When the child exits, whatever is left in its process group is
killed: a job's processes do not outlive it.

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
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Protocol

from . import fsio
from .errors import Invalid, JobError, LeaseExpired, NotFound, Refused, StaleEpoch
from .jobenv import JobEnvironment
from .record import Record, format_time
from .schedule import attempt as attempt_of
from .schedule import not_before, record_failure
from .store.location import address

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
    "log_open",
    "log_read",
    "log_size",
    "child_env",
    "SHELL",
    "ClaimStore",
    "claim_next",
    "Guardian",
    "LeaseRecord",
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
    def lease_file(self, job_id: str) -> str | None: ...


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


def shell_command(rec: Record) -> Command:
    """The ``shell`` kind: ``argv`` (non-empty list of strings), ``cwd``, ``env`` (strings), ``timeout`` (seconds)."""
    from .shell import parse

    spec = parse(rec.spec, rec.id)
    return Command(spec.argv, spec.cwd, spec.env, spec.timeout)


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


def _log_dir_parts(store: RunStore, job_id: str) -> tuple[str, tuple[str, ...]]:
    """``(base, parts)``: the log directory as names below the directory that holds ``work/``.

    ``base`` is a file store's root (or, for a database store, the directory
    of this host's work directory); every part below it (``work``,
    ``.jobctl``, ``logs``, ``<id>``) is opened without following a link
    (:mod:`jobctl.fsio`): a link planted at any of them must not send a root
    worker's output, or ``jobctl logs``' reads, out of the store.
    """
    work = os.path.dirname(store.work_path(job_id))
    return os.path.dirname(work), (os.path.basename(work), ".jobctl", "logs", os.path.basename(log_dir(store, job_id)))


def _log_dir_open(store: RunStore, job_id: str, create: bool = False) -> fsio.Dir | None:
    """The job's log directory, opened without following links; None when it does not exist."""
    base, parts = _log_dir_parts(store, job_id)
    try:
        if create:
            # The root of the walk is a directory the user named (a file store's
            # root) or this host's work directory of a database store, which may
            # not exist yet; below it nothing is followed.
            os.makedirs(base, mode=0o755, exist_ok=True)
        return fsio.open_dir(base, *parts, create=create)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fsio.refusal(log_dir(store, job_id), exc, job_id) from None


def log_files(store: RunStore, job_id: str) -> list[tuple[int, str]]:
    """``(attempt, path)`` of every attempt log of the job, in attempt order."""
    at = _log_dir_open(store, job_id)
    if at is None:
        return []
    out = []
    with at:
        for entry in fsio.scan(at):
            name = entry.name
            if name.startswith("attempt-") and name.endswith(".log") and name[8:-4].isdigit():
                out.append((int(name[8:-4]), at.join(name)))
    out.sort()
    return out


def log_open(store: RunStore, job_id: str, attempt: int) -> IO[bytes]:
    """Attempt ``attempt``'s log, opened for appending (directories and file made as needed).

    A link or anything but a regular file at the log or any directory above
    it (below the root) is refused, never followed.
    """
    at = _log_dir_open(store, job_id, create=True)
    assert at is not None  # created
    name = f"attempt-{attempt}.log"
    with at:
        fd = fsio.open_append(at, name, job_id)
        path = at.join(name)
    # open() only wraps the descriptor fsio opened; its name stays the path for the outcome.
    return open(path, "ab", opener=lambda _path, _flags: fd)


def log_read(store: RunStore, job_id: str, attempt: int, offset: int = 0) -> bytes | None:
    """What attempt ``attempt``'s log holds from ``offset`` on; None when there is no such log."""
    at = _log_dir_open(store, job_id)
    if at is None:
        return None
    name = f"attempt-{attempt}.log"
    with at:
        fd = fsio.open_read(at, name, job_id)
    if fd is None:
        return None
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.pread(fd, 1 << 16, offset)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)
    finally:
        os.close(fd)


def log_size(store: RunStore, job_id: str, attempt: int) -> int | None:
    """The size of attempt ``attempt``'s log in bytes; None when there is no such log."""
    at = _log_dir_open(store, job_id)
    if at is None:
        return None
    with at:
        fd = fsio.open_read(at, f"attempt-{attempt}.log", job_id)
    if fd is None:
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _cut_short(store: RunStore, job_id: str, attempt: int) -> str | None:
    """Whether attempt ``attempt``'s log was left open by a holder that died: None if not, else what ends its last line.

    A closed log ends with a ``--- jobctl: <how it ended> ---`` line; an empty
    one was never started. Anything else -- output, or only the start line --
    was cut short. The answer is ``"\\n"`` when the last line is unfinished.
    """
    try:
        size = log_size(store, job_id, attempt)
        if not size:
            return None
        tail = log_read(store, job_id, attempt, max(0, size - 4096)) or b""
    except (OSError, JobError):
        return None
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    closed = last.startswith(b"--- jobctl: ") and last.endswith(b" ---") and b", started " not in last
    if closed and tail.endswith(b"\n"):
        return None
    return "" if tail.endswith(b"\n") else "\n"


# -- the child's environment ----------------------------------------------------

_CHILD_VARS = ("JOB_STORE", "JOB_ID", "JOB_EPOCH", "JOB_KIND", "JOB_WORK", "JOB_CHECKPOINT", "JOB_ATTEMPT")


def child_env(
    store: RunStore, rec: Record, base: Mapping[str, str] | None = None, environment: JobEnvironment | None = None
) -> dict[str, str]:
    """The environment a job's command starts with: the allowed part of ``base``, plus the ``JOB_*`` variables.

    Only the names ``environment`` lets through reach the job (the default
    list of :mod:`jobctl.jobenv`, plus ``pass_env``): the worker's secrets
    stay the worker's. ``JOB_CHECKPOINT`` is the predecessor's checkpoint as
    compact JSON, and ``null`` when there is none (as ``claim --format env``
    prints it): always JSON, so a command can parse it without a special case.
    """
    env = (environment or JobEnvironment()).base(os.environ if base is None else base)
    for name in _CHILD_VARS:
        env.pop(name, None)
    env["JOB_STORE"] = address(store)
    env["JOB_ID"] = rec.id
    env["JOB_EPOCH"] = str(rec.lease.epoch)
    env["JOB_KIND"] = rec.kind
    env["JOB_WORK"] = os.path.abspath(store.work_path(rec.id))
    env["JOB_ATTEMPT"] = str(attempt_of(rec))
    env["JOB_CHECKPOINT"] = checkpoint_env(rec)
    return env


def checkpoint_env(rec: Record) -> str:
    """``JOB_CHECKPOINT``'s value: the checkpoint as compact JSON, or ``null`` when there is none."""
    text = rec.checkpoint_text()
    return "null" if text is None else text


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
import os, select, signal, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
    signal.signal(sig, signal.SIG_IGN)
INF = float("inf")
LIMIT = 1 << 26  # a larger file is not read: the time its supervisor reported still holds
OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
LEASE = b'\n  "lease": {\n    "owner": "'
RACY = 1.0  # seconds: a file changed this shortly before it was read may change again unseen by its times
def kill(pid):
    for fn in (os.killpg, os.kill):
        try:
            fn(pid, signal.SIGKILL)
        except OSError:
            pass
def instant(t):
    # An RFC 3339 time in seconds since 1970 (days from the civil date: no datetime to import).
    try:
        digits = t[:4] + t[5:7] + t[8:10] + t[11:13] + t[14:16] + t[17:19]
        if not (digits.isascii() and digits.isdigit() and len(digits) == 14 and t[4] + t[7] + t[13] + t[16] == "--::"):
            return None
        y, mo, d, h, mi, s = int(t[:4]), int(t[5:7]), int(t[8:10]), int(t[11:13]), int(t[14:16]), int(t[17:19])
        rest, n = t[19:], 1
        if rest[:1] == ".":
            while n < len(rest) and "0" <= rest[n] <= "9":
                n += 1
            s += float("0" + rest[:n])
            rest = rest[n:]
        if rest in ("Z", "z"):
            off = 0
        elif len(rest) == 6 and rest[0] in "+-" and rest[3] == ":" and (rest[1:3] + rest[4:]).isdigit():
            off = (int(rest[1:3]) * 3600 + int(rest[4:]) * 60) * (1 if rest[0] == "+" else -1)
        else:
            return None
    except (IndexError, ValueError):
        return None
    y -= mo <= 2
    era, yoe = divmod(y, 400)
    doy = (153 * (mo + (-3 if mo > 2 else 9)) + 2) // 5 + d - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    return days * 86400 + h * 3600 + mi * 60 + s - off
def ident(st):
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns
def read(path):
    # (bytes, the identity of the file read, or None when too fresh to stand for it); None when unread.
    # Never a link, never a FIFO or a device, never more than LIMIT bytes.
    try:
        fd = os.open(path, OPEN)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000:
            return None
        parts, size = [], 0
        while size <= LIMIT:
            chunk = os.read(fd, LIMIT + 1 - size)
            if not chunk:
                # A write after this read changes the identity: every write renames a new inode over the
                # record, and even one in place moves its times -- unless it lands within the same tick of
                # the file system's clock as the last change, so a file changed just now is read again.
                fresh = time.time() - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 < RACY
                return b"".join(parts), None if fresh else ident(st)
            parts.append(chunk)
            size += len(chunk)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)
def same(g):
    # Whether the record's file is still the one last read (a stat: no open, no read, no parse).
    if g[7] is None:
        return False
    try:
        return ident(os.stat(g[1], follow_symlinks=False)) == g[7]
    except OSError:
        return False
def lease(data):
    # (epoch, expires_at in seconds since 1970; -INF when unset) as the record says; None when unknown.
    i = data.find(LEASE)
    if i >= 0:
        # The lease block as every conforming writer lays it out: at the top level (two spaces after a raw
        # newline, which no JSON string holds), the owner's line ends where its raw newline is.
        e = data.find(b"\n", i + len(LEASE))
        f = data[e + 1 : e + 128].split(b"\n")
        if e > 0 and data[e - 2 : e] == b'",' and len(f) > 1:
            ep, at = f[0], f[1]
            ok = ep[:13] == b'    "epoch": ' and ep[-1:] == b"," and ep[13:-1].isdigit()
            if ok and at[:19] == b'    "expires_at": "':
                at = at[19:-2] if at[-2:] == b'",' else at[19:-1]
                t = instant(at.decode("ascii", "replace"))
                if t is not None:
                    return int(ep[13:-1]), t
    try:
        import json
        doc = json.loads(data)
        epoch, at = doc["lease"]["epoch"], doc["lease"].get("expires_at")
    except Exception:
        return None
    if type(epoch) is not int:
        return None
    if at is None or at == "":
        return epoch, -INF
    t = instant(at) if isinstance(at, str) else None
    return None if t is None else (epoch, t)
# pid -> [kill time reported, record path, epoch held, margin, read interval, kill time the record says, next read,
#         identity of the record's file when last read (None: read it next time), (epoch, expires_at) it said]
live = {}
def handle(line):
    op, fields = line[:1], line[1:].split()
    try:
        pid = int(fields[0])
        at = float(fields[1]) if op != b"-" else 0.0
        watch = None
        if len(fields) > 5:
            watch = (bytes.fromhex(fields[5].decode()), int(fields[2]), float(fields[3]), float(fields[4]))
    except (IndexError, ValueError):
        return
    if op == b"+":
        if watch is None:
            live[pid] = [at, None, 0, 0.0, INF, INF, INF, None, None]
        else:
            live[pid] = [at, *watch, INF, -INF, None, None]
    elif op == b"=" and pid in live:
        live[pid][0] = at
    elif op == b"-":
        live.pop(pid, None)
rest = b""
while True:
    now = time.monotonic()
    for g in live.values():
        if g[6] > now:
            continue
        seen = g[8] if same(g) else None  # an unchanged record says what it said when last read
        if seen is None:
            got = read(g[1])
            seen = None if got is None else lease(got[0])
            if seen is not None:
                g[7], g[8] = got[1], seen
        now, wall = time.monotonic(), time.time()
        if seen is not None:
            # Another epoch: somebody claimed the job. Else its lease's end, now on the record, moved to
            # this clock (the file store's clock is the system clock, so this is done at every look: a step
            # of that clock moves it too): a recall made behind a stopped supervisor's back shortens it here too.
            g[5] = -INF if seen[0] != g[2] else now + (seen[1] - wall) - g[3]
        g[6] = now + g[4]
    # Every message that came first: a group whose "-PID" is written may be reaped, its id reused.
    eof = False
    while select.select([0], [], [], 0)[0]:
        chunk = os.read(0, 65536)
        if not chunk:
            eof = True
            break
        *lines, rest = (rest + chunk).split(b"\n")
        for line in lines:
            handle(line)
    if eof:
        break
    now = time.monotonic()
    for pid, g in list(live.items()):
        if min(g[0], g[5]) <= now:
            kill(pid)
            del live[pid]
    wake = min((min(g[0], g[5], g[6]) for g in live.values()), default=None)
    select.select([0], [], [], None if wake is None else max(0.0, wake - time.monotonic()))
for pid in live:
    kill(pid)
"""


@dataclass(frozen=True)
class LeaseRecord:
    """A record a :class:`Guardian` reads to follow a lease itself: its path, the epoch held, when to kill.

    The guardian kills ``margin`` seconds before the record's ``expires_at``
    (on the system clock), and at once when its epoch is not ``epoch``; it
    reads it every ``every`` seconds.
    """

    path: str
    epoch: int
    margin: float
    every: float


class Guardian:
    """The supervisor that is never frozen with the party it stands behind: a small process of its own.

    A worker (or ``jobctl run``) registers each child's process group here
    before the child may run any code of the job (see :func:`_trampoline`), with
    the monotonic time by which the group must be gone: a little before the
    child's lease can run out. Each renewal moves that time on. The guardian
    SIGKILLs a group when its time comes and no later time was reported, and
    every group still registered when its stdin reaches end of file, which the
    kernel delivers when the supervisor dies however it dies (its descriptors
    close; no child holds a copy, they are all started with ``close_fds``).

    So a supervisor that is stopped (SIGSTOP, Ctrl-Z: all its threads frozen,
    nothing renews) cannot leave a child running past its lease, where an
    adopter would start the job a second time; and a killed one cannot leave
    one running at all. The whole group is killed, which a parent-death signal
    on the direct child alone would not reach. The guardian ignores terminal
    signals and lives in its own session, so neither a Ctrl-C nor a Ctrl-Z
    meant for the worker reaches it. ``time.monotonic`` is ``CLOCK_MONOTONIC``
    on Linux, one clock for every process of the machine, so the times mean
    the same on both sides of the pipe.

    What the supervisor reports is not all a stopped supervisor misses: a
    recall made meanwhile lowers the lease's end in the record [JOB-R3], and
    an adopter may claim at the recall's ``until``. So where the store has a
    :meth:`~jobctl.store.base.Store.lease_file` (the file store: the record,
    its times on the system clock), the guardian also looks at the record
    itself every :func:`_read_every` and kills the group at the lease's end
    less the margin when that comes first, and at once when the epoch is no
    longer the one held (somebody claimed the job). A look is a ``stat``: the
    record is read again only when its file's identity (inode, size,
    modification and change times) moved since the last read, or when that
    read came within a second of the file's last change (a second write in the
    same tick of the file system's clock could leave its times as they were;
    every jobctl write renames a new inode over the record). It opens the
    record without following a link or blocking, reads only a regular file of at most 64 MiB,
    and reads only the lease block's epoch and ``expires_at`` (a full JSON
    parse only for a record not laid out as jobctl writes them). A record it
    cannot read leaves the last time it read, and the reported one, in force.

    Lines on the pipe: ``+PID AT`` (a new group, to be gone by AT), ``+PID AT
    EPOCH MARGIN EVERY PATH`` (the same, and read the record at PATH, in hex,
    every EVERY seconds: the lease of EPOCH ends MARGIN seconds before its
    ``expires_at``), ``=PID AT`` (a renewal or a recall moved AT), ``-PID``
    (reaped by its supervisor; never signal that id again). The guardian
    takes in every message waiting before it kills anything. If the guardian
    process dies, the next message starts a new one and replays every
    registration first.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # pid -> (kill time, the rest of its "+" line: the record to watch, or "")
        self._live: dict[int, tuple[float, str]] = {}
        self._closed = False
        self.proc: subprocess.Popen[bytes] | None = None
        self._fd = -1
        self._spawn()

    def _spawn(self) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARDIAN],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert proc.stdin is not None
        self.proc, self._fd = proc, proc.stdin.fileno()

    def _send(self, line: str) -> bool:
        """Write one message (lock held); on a dead guardian start another and replay. False: nobody guards."""
        data = line.encode()
        for _ in range(2):
            if self._fd >= 0:
                try:
                    _write_all(self._fd, data)
                    return True
                except OSError:
                    self._fd = -1
                    if self.proc is not None:
                        with contextlib.suppress(OSError):
                            assert self.proc.stdin is not None
                            self.proc.stdin.close()
                        self.proc.poll()  # reap it if it is gone
            try:
                self._spawn()
            except OSError:
                return False
            data = "".join(f"+{pid} {at!r}{rest}\n" for pid, (at, rest) in self._live.items()).encode()
        return False

    def watch(self, pid: int, kill_at: float, record: LeaseRecord | None = None) -> bool:
        """Guard the group ``pid`` until :meth:`forget`; SIGKILL it at monotonic ``kill_at``. False: no guardian.

        ``record``: the lease to follow in its record as well, where the store has one.
        """
        rest = ""
        if record is not None:
            path = os.fsencode(os.path.abspath(record.path)).hex()  # the guardian's cwd is not ours to rely on
            rest = f" {record.epoch} {record.margin!r} {record.every!r} {path}"
        with self._lock:
            if self._closed:
                return False
            self._live[pid] = (kill_at, rest)
            return self._send(f"+{pid} {kill_at!r}{rest}\n")

    def renew(self, pid: int, kill_at: float) -> None:
        """Move the group's time on (a renewal) or back (a recall)."""
        with self._lock:
            if self._closed or pid not in self._live:
                return
            self._live[pid] = (kill_at, self._live[pid][1])
            self._send(f"={pid} {kill_at!r}\n")

    def forget(self, pid: int) -> None:
        """The group is gone and about to be reaped: never signal that id again."""
        with self._lock:
            if self._live.pop(pid, None) is not None and not self._closed:
                self._send(f"-{pid}\n")

    def close(self) -> None:
        """Nothing left to guard: end the guardian (it kills only what is still registered)."""
        with self._lock:
            self._closed = True
            self._fd = -1
            proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


#: What a child runs first: wait for the supervisor's go on stdin, then become the job's command.
#: End of file instead of ``go`` means the supervisor is gone (or refused): exit, running nothing.
_GO = 'IFS= read -r go && [ "$go" = go ] || exit 125\n'
_SH = "/bin/sh"
#: The exit status of a child that never got its go.
NO_GO = 125


def _trampoline(stdin_null: bool, keep_pwd: bool) -> str:
    """The ``/bin/sh -c`` script that starts every child (its argv follows as ``"$@"``).

    The child is in its own process group and blocked on this read before
    its supervisor registers it with the guardian; only then does the
    supervisor write ``go``. No code of the job can run unsupervised, and a
    supervisor killed in between leaves a child that reads end of file and
    exits. The shell sets ``PWD``; it is unset again unless the job's
    environment had it, so the command starts with the environment it was given.
    """
    script = _GO
    if not keep_pwd:
        script += "unset PWD\n"
    return script + ('exec "$@" </dev/null' if stdin_null else 'exec "$@"')


def _check_executable(argv0: str, env: Mapping[str, str], cwd: str | None) -> None:
    """Raise what ``exec`` would for ``argv0`` (looked up as execvpe does): the shell would only exit 127."""
    if "/" in argv0:
        candidates = [os.path.join(cwd or "", argv0)]
    else:
        candidates = [os.path.join(cwd or "", d or ".", argv0) for d in os.get_exec_path(dict(env))]
    denied = False
    for path in candidates:
        if os.path.isfile(path):
            if os.access(path, os.X_OK):
                return
            denied = True
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), argv0)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv0)


#: Popen starts a child in its own process group without a preexec_fn from Python 3.11.
_VFORK_GROUPS = sys.version_info >= (3, 11)


def _own_margin(ttl: float) -> float:
    """How long before its lease ends a run kills a child it could not renew for: a fifth of the TTL, 1 s at most."""
    return min(1.0, ttl / 5)


def _guard_margin(ttl: float) -> float:
    """How long before the lease ends the guardian kills: half the run's margin, so it acts only when the run cannot.

    The lease's end it is given is already early (read before each renewal);
    the margin covers the guardian's own wake-up on a busy machine.
    """
    return _own_margin(ttl) / 2


def _read_every(ttl: float) -> float:
    """How often the guardian reads a lease's record: a tenth of the TTL, a quarter second at most.

    A recall is seen within this, so one whose grace is longer than it plus
    the guardian's margin is honoured even while the supervisor is stopped.
    """
    return min(ttl / 10, 0.25)


def _feed(fd: int, left: memoryview) -> memoryview:
    """Write what the pipe takes now; what is left (empty when done, or when the child closed its stdin)."""
    while left:
        try:
            left = left[os.write(fd, left) :]
        except BlockingIOError:
            return left
        except OSError:
            return left[:0]
    return left


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


def _sigkilled(pid: int) -> bool:
    """Whether the exited child was ended by SIGKILL, without reaping it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return info is not None and info.si_code == os.CLD_KILLED and info.si_status == signal.SIGKILL


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
    parent-death signal (armed on Python 3.10's start path), so it must be the
    one that lives as long as the child. ``guardian``: the supervisor's
    :class:`Guardian` (a worker shares one among its runs); without one the
    run starts its own for the attempt.
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
        self._environment = environment or JobEnvironment()
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
            self._environment.check(command.env, rec.id)
        except Invalid as exc:
            # A spec this kind cannot run will not run on a retry either.
            return self._finish(self._outcome(reason="not-started", error=f"cannot run: {exc.message}"), "failed")
        return self._supervise(command)

    def _open_log(self) -> IO[bytes] | None:
        if not self._log:
            return None
        try:
            handle = log_open(self.store, self.job_id, self.attempt)  # closed by _supervise once the child is gone
        except (OSError, JobError):
            # No log beats no run (the output goes where the runner's goes); a
            # link planted at the log's name is refused, never followed.
            return None
        cut = _cut_short(self.store, self.job_id, self.attempt)
        if cut is not None:
            handle.write(
                f"{cut}--- jobctl: cut short: its holder stopped without closing this log "
                f"(its worker was killed?); adopted at epoch {self.epoch} by {self.owner} ---\n".encode()
            )
        handle.write(
            f"--- jobctl: attempt {self.attempt}, epoch {self.epoch}, owner {self.owner}, "
            f"started {format_time(self.store.now())} ---\n".encode()
        )
        handle.flush()
        return handle

    def _supervise(self, command: Command) -> Outcome:
        log = self._open_log()
        out = self._outcome(log=None if log is None else log.name)
        guardian = self._guardian
        own = guardian is None
        try:
            if guardian is None:
                try:
                    guardian = Guardian()
                except OSError as exc:
                    out.exit_code = 126
                    out.error = f"cannot start the guardian: {exc.strerror or exc}"
                    self._footer(log, out.error)
                    return self._failed(out, out.exit_code)
            started = self._start(command, log, out, guardian)
            if started is None:
                if out.verdict is not None:
                    # The lease ran out before the child could start: write nothing [JOB-L5].
                    with contextlib.suppress(JobError):
                        out.state = self.store.load(self.job_id).state
                    return out
                return self._failed(out, out.exit_code)
            proc, tee_r, spec, expiry = started
            try:
                code, disposition, detail, fenced = self._watch(proc, command, tee_r, spec, log, guardian, expiry)
            finally:
                if tee_r is not None:
                    os.close(tee_r)
            out.exit_code = code
            if fenced is not None:
                self._footer(log, f"{_describe_status(code)}; {fenced.verdict}: {fenced.message}")
            else:
                self._footer(log, _describe_status(code) + (f" ({disposition}: {detail})" if disposition else ""))
        finally:
            if own and guardian is not None:
                guardian.close()
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

    def _lease_expiry(self) -> float:
        """The lease as the claim left it, on this process's monotonic clock, never later than it really ends."""
        before = time.monotonic()
        end = self.rec.lease.expires_at
        # store.now() is read after ``before``: the estimate can only be early.
        return before + ((end - self.store.now()).total_seconds() if end is not None else 0.0)

    def _start(
        self, command: Command, log: IO[bytes] | None, out: Outcome, guardian: Guardian
    ) -> tuple[subprocess.Popen[bytes], int | None, tuple[int, bytes] | None, float] | None:
        """Start the child under the guardian; None (with ``out`` telling why) when it did not start.

        Returns the child, the tee pipe, the spec still to write to the child's
        stdin (fd and bytes) and the lease's monotonic expiry. The child is
        ``/bin/sh`` running :func:`_trampoline`, blocked until this method has
        registered it with the guardian and written ``go``.
        """
        env = child_env(self.store, self.rec, self._env, self._environment)
        env.update(command.env)
        expiry = self._lease_expiry()
        try:
            _check_executable(command.argv[0], env, command.cwd)
        except OSError as exc:
            self._not_started(out, log, command, exc)
            return None
        stdout: Any = log
        tee_r: int | None = None
        tee_w: int | None = None
        if self._tee is not None:
            tee_r, tee_w = os.pipe()
            stdout = tee_w
        # The child's stdin is the pipe its go comes through. The spec of a
        # handler kind follows the go on the same pipe, written by the
        # supervision loop as the child reads it: it may never read it, and
        # a blocking write would stop supervising once the pipe's buffer filled.
        go_r, go_w = os.pipe()
        spawn: dict[str, Any] = {}
        if _VFORK_GROUPS:
            spawn["process_group"] = 0
        else:
            # Python 3.10 has no process_group: setpgid must be done by the
            # child itself, which forces a full fork; it arms the
            # parent-death signal too while it is there.
            spawn["preexec_fn"] = _child_setup(os.getpid())
        script = _trampoline(command.stdin is None, "PWD" in env)
        try:
            proc = subprocess.Popen(
                [_SH, "-c", script, "jobctl", *command.argv],
                cwd=command.cwd,
                env=env,
                stdin=go_r,
                stdout=stdout,
                stderr=subprocess.STDOUT if stdout is not None else None,
                **spawn,
            )
        except OSError as exc:
            os.close(go_w)
            if tee_r is not None:
                os.close(tee_r)
            self._not_started(out, log, command, exc)
            return None
        finally:
            os.close(go_r)
            if tee_w is not None:
                os.close(tee_w)
        self.pid = out.pid = proc.pid
        margin = _guard_margin(self.ttl)
        # Supervised first, then go: the guardian has the group before the job
        # runs anything. A time already past (this process was stopped since
        # the claim) gets no go: the lease may be somebody else's by now.
        # Where the store allows, the guardian reads the record too: a recall
        # made while this process is stopped cannot reach it otherwise.
        path = self.store.lease_file(self.job_id)
        record = None if path is None else LeaseRecord(path, self.epoch, margin, _read_every(self.ttl))
        guarded = guardian.watch(proc.pid, expiry - margin, record)
        if not guarded or time.monotonic() >= expiry - _own_margin(self.ttl):
            os.close(go_w)  # end of file: the child exits without running anything
            _killpg(proc.pid, signal.SIGKILL)
            guardian.forget(proc.pid)
            proc.wait()
            if tee_r is not None:
                os.close(tee_r)
            if guarded:
                out.reason = "fenced"
                late = LeaseExpired(f"job {self.job_id}: the lease of epoch {self.epoch} ran out before the start")
                late.job_id = self.job_id
                out.verdict = late
                self._footer(log, f"not started; {late.verdict}: {late.message}")
                return None
            out.exit_code = 126
            out.error = f"cannot start {command.argv[0]}: no guardian process to supervise it"
            self._footer(log, out.error)
            return None
        spec: tuple[int, bytes] | None = None
        try:
            os.write(go_w, b"go\n")
        except OSError:
            pass  # it is dead already (the guardian's time came): the loop sees its exit
        if command.stdin:
            os.set_blocking(go_w, False)
            spec = (go_w, command.stdin)
        else:
            os.close(go_w)
        return proc, tee_r, spec, expiry

    def _not_started(self, out: Outcome, log: IO[bytes] | None, command: Command, exc: OSError) -> None:
        out.exit_code = 127 if isinstance(exc, FileNotFoundError) else 126
        out.error = f"cannot start {command.argv[0]}: {exc.strerror or exc}"
        self._footer(log, out.error)

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
        self,
        proc: subprocess.Popen[bytes],
        command: Command,
        tee_r: int | None,
        spec: tuple[int, bytes] | None,
        log: IO[bytes] | None,
        guardian: Guardian,
        expiry: float,
    ) -> tuple[int, str, str, JobError | None]:
        """Supervise the child until it exits: returns (exit code, disposition, detail, fencing verdict).

        ``expiry`` is the lease's end on the monotonic clock, never late. The
        run kills the child at ``expiry`` less :func:`_own_margin`; the guardian,
        told of every change, at ``expiry`` less the smaller
        :func:`_guard_margin`, so it acts only when this loop could not.
        """
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
        spec_fd, spec_left = (spec[0], memoryview(spec[1])) if spec is not None else (-1, memoryview(b""))
        if spec_fd >= 0:
            poller.register(spec_fd, select.POLLOUT)
        mono = time.monotonic
        start = mono()
        margin = _own_margin(self.ttl)
        guard_margin = _guard_margin(self.ttl)
        lease_end = expiry - margin
        guarded_at = expiry - guard_margin

        def lease(new_expiry: float) -> None:
            """The lease now ends at ``new_expiry`` (monotonic): the loop and the guardian follow."""
            nonlocal expiry, lease_end, guarded_at
            expiry = new_expiry
            lease_end = expiry - margin
            if expiry - guard_margin != guarded_at:
                guarded_at = expiry - guard_margin
                guardian.renew(pid, guarded_at)

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
            nonlocal fenced
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
                lease(min(expiry, mono() + (rec.lease.expires_at - store.now()).total_seconds()))
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
                        # store.now() is read after the write, ``before`` before
                        # it: the lease can only be longer than this estimate.
                        lease(before + (end - store.now()).total_seconds())
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
                elif fd == spec_fd:
                    spec_left = _feed(spec_fd, spec_left)
                    if not spec_left:
                        poller.unregister(spec_fd)
                        os.close(spec_fd)
                        spec_fd = -1
        if fenced is None and not disposition and _sigkilled(pid):
            # SIGKILLed, and not by this loop: most likely by the guardian,
            # which reads the record more often than this loop does and may
            # have seen a recall or a claim this loop had not. Judge the record
            # as it is now, so such a kill is never counted as the job failing.
            with contextlib.suppress(JobError, OSError):
                examine(store.load(self.job_id))
        if fenced is None and mono() >= lease_end:
            # The exit was seen only after the lease's own deadline: this
            # process was stopped (the guardian killed the child in time) or
            # starved. Whatever the child did, the lease may be somebody else's.
            fenced = LeaseExpired(f"job {self.job_id}: the lease of epoch {self.epoch} ran out unrenewed")
            fenced.job_id = self.job_id
        # The leader is a zombie: its pid (the group's id) cannot be reused
        # yet. Nothing the job started outlives it.
        _killpg(pid, signal.SIGKILL)
        guardian.forget(pid)
        code = proc.wait()
        if pidfd is not None:
            os.close(pidfd)
        if spec_fd >= 0:
            os.close(spec_fd)
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
