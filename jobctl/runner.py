"""Run one command under a lease that jobctl keeps alive.

A :class:`Run` takes a record its caller has just claimed and a
:class:`Command`, and runs the command as a :class:`ChildWork` under a
:class:`jobctl.keeper.Keeper`: the keeper keeps the lease (renewal every
third of the TTL, the intent and recall checks, fencing, the final write) and
asks the child to stop when the record says so; this module starts the child
and supervises it from the keeper's thread, without blocking on it: the
keeper's ``poll`` loop waits on the child's exit (a pidfd on Linux), on its
output and on the next deadline. What the keeper does at each deadline is
told in :mod:`jobctl.keeper`; for a child it means:

* ``cancel``, ``pause``, a recall, :meth:`Run.stop` -> SIGTERM to the child's
  process group, SIGKILL after the grace (a recall: before ``until``);
* the lease lost (``stale_epoch``, ``lease_expired``, or a read showing that
  somebody else claimed) -> SIGKILL at once, and nothing more is written
  [JOB-L5]; the same just before the lease runs out when renewals keep
  failing for another reason, so an adopter never starts while this child
  still runs.

The child starts in its own process group under a :class:`Guardian`, a
small process of its own that the supervisor tells each group's deadline (a
little before its lease can run out) before the child may run any code of the
job, and again at every renewal: it SIGKILLs the group when the supervisor
is stopped (SIGSTOP, Ctrl-Z) and its deadline comes, and every group when the
supervisor dies. It also reads the lease itself where the store says how
(:meth:`~jobctl.store.base.Store.lease_source`: the record file, or the
PostgreSQL row), so a recall or a claim made while the supervisor is stopped
is honoured too. ``jobctl run`` and the worker use it alike. A run that finds
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
import errno
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from . import fsio
from .children import describe_status, exited, feed, killpg, pidfd, sigkilled, write_all
from .errors import Invalid, JobError, LeaseExpired, NotFound
from .jobenv import JobEnvironment
from .keeper import Keeper, KeeperStore, Lookout, Outcome, Work
from .prctl import PR_SET_PDEATHSIG, PRCTL, seal
from .record import Record, format_time
from .schedule import attempt as attempt_of
from .store.base import LeaseSource
from .store.location import address

__all__ = [
    "Command",
    "Outcome",
    "Processor",
    "Run",
    "ChildWork",
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
    "result_path",
    "child_env",
    "SHELL",
    "ClaimStore",
    "claim_next",
    "Guardian",
    "LeaseRecord",
]

#: The kind jobctl runs without any set-up: spec ``{"argv": [...], "cwd"?, "env"?, "timeout"?}``.
SHELL = "shell"


#: What a run needs of a store: the holder's operations and the job's paths, as
#: the lease keeper needs them (one protocol, kept in jobctl.keeper).
RunStore = KeeperStore


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
    with at:
        return _log_append(at, job_id, attempt)


def _log_append(at: fsio.Dir, job_id: str, attempt: int) -> IO[bytes]:
    name = f"attempt-{attempt}.log"
    fd = fsio.open_append(at, name, job_id)
    # open() only wraps the descriptor fsio opened; its name stays the path for the outcome.
    return open(at.join(name), "ab", opener=lambda _path, _flags: fd)


def log_read(store: RunStore, job_id: str, attempt: int, offset: int = 0) -> bytes | None:
    """What attempt ``attempt``'s log holds from ``offset`` on; None when there is no such log."""
    at = _log_dir_open(store, job_id)
    if at is None:
        return None
    with at:
        return _log_read(at, job_id, attempt, offset)


def _log_read(at: fsio.Dir, job_id: str, attempt: int, offset: int = 0) -> bytes | None:
    fd = fsio.open_read(at, f"attempt-{attempt}.log", job_id)
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


def _log_size(at: fsio.Dir, job_id: str, attempt: int) -> int | None:
    fd = fsio.open_read(at, f"attempt-{attempt}.log", job_id)
    if fd is None:
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def log_size(store: RunStore, job_id: str, attempt: int) -> int | None:
    """The size of attempt ``attempt``'s log in bytes; None when there is no such log."""
    at = _log_dir_open(store, job_id)
    if at is None:
        return None
    with at:
        return _log_size(at, job_id, attempt)


def result_name(attempt: int, epoch: int) -> str:
    """The name of the file a child leaves its result in (``$JOB_RESULT``), beside its attempt's log.

    The epoch is in the name: an adopter runs the same attempt number as the
    holder it replaced, and must never store a result that holder left.
    """
    return f"attempt-{attempt}.epoch-{epoch}.result.json"


def result_path(store: RunStore, job_id: str, attempt: int, epoch: int) -> str:
    """``<root>/work/.jobctl/logs/<id>/attempt-<N>.epoch-<E>.result.json``: what ``$JOB_RESULT`` names."""
    return os.path.join(log_dir(store, job_id), result_name(attempt, epoch))


def _cut_short(at: fsio.Dir, job_id: str, attempt: int) -> str | None:
    """Whether the attempt's log in ``at`` was cut short (its holder died): None if not, else what ends its last line.

    A closed log ends with a ``--- jobctl: <how it ended> ---`` line; an empty
    one was never started. Anything else -- output, or only the start line --
    was cut short. The answer is ``"\\n"`` when the last line is unfinished.
    """
    try:
        size = _log_size(at, job_id, attempt)
        if not size:
            return None
        tail = _log_read(at, job_id, attempt, max(0, size - 4096)) or b""
    except (OSError, JobError):
        return None
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    closed = last.startswith(b"--- jobctl: ") and last.endswith(b" ---") and b", started " not in last
    if closed and tail.endswith(b"\n"):
        return None
    return "" if tail.endswith(b"\n") else "\n"


# -- the child's environment ----------------------------------------------------

_CHILD_VARS = (
    "JOB_STORE",
    "JOB_ID",
    "JOB_EPOCH",
    "JOB_KIND",
    "JOB_WORK",
    "JOB_CHECKPOINT",
    "JOB_ATTEMPT",
    "JOB_RESULT",
)


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


def _child_setup(parent: int) -> Callable[[], None]:
    """What runs in the child between fork and exec.

    Its own process group, so a stop reaches everything the command started;
    the parent-death signal, so a SIGKILLed supervisor takes the child with
    it. The death signal is armed only from here on: if the parent already
    died between fork and prctl, the child must not start at all. Everything
    used here is resolved in the parent beforehand.
    """
    prctl = PRCTL
    kill = int(signal.SIGKILL)

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(128 + kill)

    return setup


_GUARDIAN = r"""
import ctypes, os, select, signal, sys, time
# Non-dumpable first (jobctl.prctl): from here on no other process of this user -- a job -- reads this
# one's memory, environment or descriptors. Until now there was nothing to read: it started with no
# secret in its environment (its supervisor's comes on stdin), and its stdin is a socket, which no
# process can open through /proc.
try:
    ctypes.CDLL(None).prctl(4, *(ctypes.c_ulong(0),) * 4)  # PR_SET_DUMPABLE, 0
except (OSError, AttributeError):
    pass
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
# A lease in a database row is read by a thread per database, never by the loop that kills: a server
# that is down, slow or unreachable leaves the last lease read (and the supervisor's time) in force.
WAKE_R, WAKE_W = os.pipe()  # a reader's news wakes the loop
os.set_blocking(WAKE_R, False)
os.set_blocking(WAKE_W, False)
ROWS = {}  # url -> Rows
class Rows:
    # Every EVERY seconds one read of every id guarded in this database (the store's named query, by
    # primary key): (monotonic time it was sent, epoch, seconds left by the server's clock or None).
    # The time left is counted from the statement's start, after the time taken here: never late.
    def __init__(self, url, query):
        import threading
        self.url, self.query, self.lock = url, query, threading.Lock()
        self.want = {}  # id -> read interval
        self.seen = {}  # id -> (sent, epoch, seconds left)
        threading.Thread(target=self.run, daemon=True).start()
    def connect(self):
        # psycopg only for a row: the parent's path entries (after -I -S) find it; a file store never pays.
        sys.path.extend(p for p in sys.argv[1:] if p not in sys.path)
        import psycopg
        # Named for whoever looks at the server's sessions (pg_stat_activity): which process reads.
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5, keepalives=1, keepalives_idle=5,
                               keepalives_interval=2, keepalives_count=2,
                               application_name="jobctl guardian %d" % os.getpid())
        # A guardian never writes: the session refuses it, and no read waits on the server for long.
        conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        conn.execute("SET statement_timeout = 5000")
        return conn
    def run(self):
        conn = None
        while True:
            with self.lock:
                ids, every = list(self.want), min(self.want.values(), default=0.25)
            if ids:
                try:
                    if conn is None:
                        conn = self.connect()
                    sent = time.monotonic()
                    rows = conn.execute(self.query, {"ids": ids}).fetchall()
                except Exception:
                    rows = None
                    if conn is not None:
                        try:
                            conn.close()
                        except Exception:
                            pass
                    conn, every = None, max(every, 1.0)  # a server away: try again each second
                if rows:
                    with self.lock:
                        for job_id, epoch, left in rows:
                            self.seen[job_id] = (sent, int(epoch), None if left is None else float(left))
                    try:
                        os.write(WAKE_W, b"!")
                    except OSError:
                        pass
            time.sleep(every)
def rows_wanted():
    # Each reader reads the ids still guarded, and forgets what it read of the others.
    want = {}
    for g in live.values():
        if type(g[1]) is tuple:
            want.setdefault(g[1][0], {})[g[1][1]] = g[4]
    for url, r in ROWS.items():
        with r.lock:
            r.want = want.get(url, {})
            r.seen = {k: v for k, v in r.seen.items() if k in r.want}
# pid -> [kill time reported, record path (or (url, id) of a row), epoch held, margin, read interval, kill time
#         the record says, next read, identity of the record's file when last read (None: read it next time),
#         (epoch, expires_at) it said, when it was registered]
live = {}
def handle(line):
    op, fields = line[:1], line[1:].split()
    if op == b"E":
        # The supervisor's environment, for a database's client library (a password, a .pgpass under HOME).
        import json
        try:
            os.environ.update(json.loads(bytes.fromhex(line[1:].decode())))
        except (ValueError, TypeError):
            pass
        return
    try:
        pid = int(fields[0])
        at = float(fields[1]) if op != b"-" else 0.0
        watch = None
        if len(fields) > 5:
            where = bytes.fromhex(fields[5].decode())
            if where[:1] == b"\0":
                import json
                row = json.loads(where[1:])
                url, job_id, query = str(row["url"]), str(row["id"]), str(row["query"])
                if url not in ROWS:
                    ROWS[url] = Rows(url, query)
                where = (url, job_id)
            watch = (where, int(fields[2]), float(fields[3]), float(fields[4]))
    except (IndexError, ValueError, KeyError, TypeError):
        return
    if op == b"+":
        if watch is None:
            live[pid] = [at, None, 0, 0.0, INF, INF, INF, None, None, 0.0]
        else:
            live[pid] = [at, *watch, INF, -INF, None, None, time.monotonic()]
    elif op == b"=" and pid in live:
        live[pid][0] = at
    elif op == b"-":
        live.pop(pid, None)
rest = b""
def settle():
    # Every message that came first (a group whose "-PID" is written may be reaped, its id reused), then a
    # kill of every group whose time has come. False: end of file, the supervisor is gone.
    global rest
    while select.select([0], [], [], 0)[0]:
        chunk = os.read(0, 65536)
        if not chunk:
            return False
        *lines, rest = (rest + chunk).split(b"\n")
        for line in lines:
            handle(line)
    now = time.monotonic()
    for pid, g in list(live.items()):
        if min(g[0], g[5]) <= now:
            kill(pid)
            del live[pid]
    return True
# Each wake settles first, before any record is read: one after this process was stopped (its host, its
# container or its whole tree frozen past the lease) kills a lapsed group before that group's own wake
# has done more than it must.
while settle():
    now = time.monotonic()
    for g in live.values():
        if g[6] > now:
            continue
        if type(g[1]) is tuple:
            r = ROWS[g[1][0]]
            with r.lock:
                got = r.seen.get(g[1][1])
            # Only a read sent after the group was registered, itself after the claim its epoch comes
            # from: one sent before may show the job's previous attempt, under an epoch now stale.
            if got is not None and got[0] >= g[9]:
                # The row's lease on this clock, from the time left when the read was sent.
                sent, epoch, left = got
                g[5] = -INF if epoch != g[2] or left is None else sent + left - g[3]
            g[6] = time.monotonic() + g[4]
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
    if not settle():
        break
    if ROWS:
        rows_wanted()
    wake = min((min(g[0], g[5], g[6]) for g in live.values()), default=None)
    news = select.select([0, WAKE_R], [], [], None if wake is None else max(0.0, wake - time.monotonic()))[0]
    if WAKE_R in news:
        try:
            os.read(WAKE_R, 4096)
        except OSError:
            pass
        for g in live.values():
            if type(g[1]) is tuple:
                g[6] = 0.0  # a reader has news: look at it now
for pid in live:
    kill(pid)
"""


@dataclass(frozen=True)
class LeaseRecord:
    """A record a :class:`Guardian` reads to follow a lease itself: where it is, the epoch held, when to kill.

    ``source`` is what :meth:`~jobctl.store.base.Store.lease_source` gave: a
    record file's path, or a database row (:class:`~jobctl.store.base.RowLease`).
    The guardian kills ``margin`` seconds before the lease's end as the record
    says it, and at once when its epoch is not ``epoch``; it reads it every
    ``every`` seconds.
    """

    source: LeaseSource
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
    the same on both sides of the socket.

    What the supervisor reports is not all a stopped supervisor misses: a
    recall made meanwhile lowers the lease's end in the record [JOB-R3], and
    an adopter may claim at the recall's ``until``. So where the store has a
    :meth:`~jobctl.store.base.Store.lease_source`, the guardian also looks at
    the record itself every :func:`_read_every` and kills the group at the
    lease's end less the margin when that comes first, and at once when the
    epoch is no longer the one held (somebody claimed the job).

    A PostgreSQL row (:class:`~jobctl.store.base.RowLease`) is read by a
    thread per database: one ``SELECT`` by primary key of every guarded id's
    epoch and the seconds its lease has left by the server's clock, counted
    from when the read was sent (so never late), on a read-only session. The
    loop that kills only takes what the thread last read: a server that is
    down or slow leaves the last lease read, and the reported time, in force.
    psycopg is imported only then, found through the parent's ``sys.path``
    given on the guardian's command line.

    A record file (the file store: its times on the system clock) is read by
    the loop itself. A look is a ``stat``: the
    record is read again only when its file's identity (inode, size,
    modification and change times) moved since the last read, or when that
    read came within a second of the file's last change (a second write in the
    same tick of the file system's clock could leave its times as they were;
    every jobctl write renames a new inode over the record). It opens the
    record without following a link or blocking, reads only a regular file of at most 64 MiB,
    and reads only the lease block's epoch and ``expires_at`` (a full JSON
    parse only for a record not laid out as jobctl writes them). A record it
    cannot read leaves the last time it read, and the reported one, in force.

    Lines on its stdin (a socket): ``EHEX`` (first: the supervisor's
    environment as JSON, in hex), ``+PID AT`` (a new group, to be gone by AT),
    ``+PID AT EPOCH MARGIN EVERY WHERE`` (the same, and read the record at
    WHERE, in hex: a path, or a NUL and the row's URL, id and query as JSON,
    every EVERY seconds: the lease of EPOCH ends MARGIN seconds before its
    ``expires_at``), ``=PID AT`` (a renewal or a recall moved AT), ``-PID``
    (reaped by its supervisor; never signal that id again). The guardian
    takes in every message waiting before it kills anything, and on every
    wake it kills what is due by the times it knows before it reads any
    record: woken after a stop of its own (a frozen host or container, the
    whole tree stopped past the lease), the lapsed group goes first.

    Secrets: the guardian makes itself non-dumpable (:mod:`jobctl.prctl`)
    before it reads anything, and starts with only what a job would get of
    the environment (:func:`_guardian_env`); the whole environment (which a
    database's client library may need) follows on the socket. If the guardian
    process dies, the next message starts a new one and replays every
    registration first. The first registration starts the first one: a worker
    pass that runs nothing starts no process at all.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # pid -> (kill time, the rest of its "+" line: the record to watch, or "")
        self._live: dict[int, tuple[float, str]] = {}
        self._closed = False
        self.proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._fd = -1
        #: Why the last guardian process could not be started (None: it was, or none was needed yet).
        self.failure: str | None = None

    def _spawn(self) -> None:
        # Its stdin is a socket: a pipe could be opened through /proc/<pid>/fd/0 by a job in the moment
        # before the guardian seals itself (jobctl.prctl), and read; a socket cannot be opened so.
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                # The path entries after the script are where it finds psycopg for a lease in a database row.
                [sys.executable, "-I", "-S", "-c", _GUARDIAN, *(p for p in sys.path if p)],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env=_guardian_env(os.environ),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.proc, self._sock, self._fd = proc, ours, ours.fileno()
        # The whole environment comes now, on the socket: read only once the guardian is sealed.
        write_all(self._fd, b"E" + json.dumps(dict(os.environ)).encode().hex().encode() + b"\n")

    def _hang_up(self) -> None:
        """Close our end of the guardian's stdin: it reads end of file, kills what it guards and exits."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def _send(self, line: str) -> bool:
        """Write one message (lock held); on a dead guardian start another and replay. False: nobody guards."""
        data = line.encode()
        for _ in range(2):
            if self._fd >= 0:
                try:
                    write_all(self._fd, data)
                    return True
                except OSError:
                    self._fd = -1
                    self._hang_up()
                    if self.proc is not None:
                        self.proc.poll()  # reap it if it is gone
            if not self._live:
                return True  # nothing to guard: the next registration starts one
            try:
                self._spawn()
            except OSError as exc:
                self.failure = f"cannot start the guardian: {exc.strerror or exc}"
                return False
            self.failure = None
            data = "".join(f"+{pid} {at!r}{rest}\n" for pid, (at, rest) in self._live.items()).encode()
        return False

    def watch(self, pid: int, kill_at: float, record: LeaseRecord | None = None) -> bool:
        """Guard the group ``pid`` until :meth:`forget`; SIGKILL it at monotonic ``kill_at``. False: no guardian.

        ``record``: the lease to follow in its record as well, where the store has one.
        """
        rest = ""
        if record is not None:
            source = record.source
            if isinstance(source, str):
                where = os.fsencode(os.path.abspath(source))  # the guardian's cwd is not ours to rely on
            else:
                # A row: NUL first, which no path holds. The URL may carry a password: this socket is
                # the guardian's alone, never its command line.
                row = {"url": source.url, "id": source.job_id, "query": source.query}
                where = b"\0" + json.dumps(row).encode()
            rest = f" {record.epoch} {record.margin!r} {record.every!r} {where.hex()}"
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
            self._hang_up()
            proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


def _guardian_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What the guardian starts with: what a job would get by default, and the loader's library path.

    Nothing a job could not read anyway (until the guardian is sealed, a job
    of the same user could): the rest comes on its stdin. ``LD_LIBRARY_PATH``
    because the interpreter itself may need it to start.
    """
    env = JobEnvironment().base(environ)
    if "LD_LIBRARY_PATH" in environ:
        env["LD_LIBRARY_PATH"] = environ["LD_LIBRARY_PATH"]
    return env


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


# -- the run --------------------------------------------------------------------


class ChildWork(Work):
    """A command run as a child process: the work of a ``shell`` job and of a handler command.

    The child starts in its own process group under the :class:`Guardian`,
    blocked until the guardian has it; its output goes to the attempt log
    (and to ``tee``). Stopping it is SIGTERM to the group, SIGKILL at the
    deadline; when it exits, whatever is left in its group is killed.
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
    ) -> None:
        self._command = command
        self._env = env
        self._environment = environment or JobEnvironment()
        self._tee = tee
        self._guardian = guardian
        self._own_guardian = False
        self._log = log
        self.pid: int | None = None
        self.command: Command | None = None
        self.keeper: Keeper | None = None
        self._logfile: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tee_r: int | None = None
        self._spec_fd = -1
        self._spec_left = memoryview(b"")
        self._pidfd: int | None = None
        self._kill_at = math.inf
        self._timeout_at = math.inf
        self._sent_term = False
        self._guarded_at = math.inf
        self._ttl = 30.0
        #: Where the child may leave its result (``$JOB_RESULT``): the name, in the directory the path names.
        self.result_file: str | None = None
        # The job's log directory, opened once for the attempt (log, cut-short check, result).
        self._at: fsio.Dir | None = None

    def prepare(self, keeper: Keeper) -> None:
        rec = keeper.rec
        command = self._command(rec) if callable(self._command) else self._command
        self._environment.check(command.env, rec.id)
        self.command = command
        self.keeper = keeper
        self._ttl = keeper.ttl

    def margin(self, ttl: float) -> float:
        return _own_margin(ttl)

    # -- starting ---------------------------------------------------------------

    def _dir(self, keeper: Keeper) -> fsio.Dir:
        """The job's log directory (made as needed), opened once for the attempt without following links."""
        if self._at is None:
            at = _log_dir_open(keeper.store, keeper.job_id, create=True)
            assert at is not None  # created
            self._at = at
        return self._at

    def _open_log(self, keeper: Keeper) -> IO[bytes] | None:
        if not self._log:
            return None
        store, job_id = keeper.store, keeper.job_id
        try:
            at = self._dir(keeper)
            handle = _log_append(at, job_id, keeper.attempt)  # closed by end() once the child is gone
        except (OSError, JobError):
            # No log beats no run (the output goes where the runner's goes); a
            # link planted at the log's name is refused, never followed.
            return None
        cut = _cut_short(at, job_id, keeper.attempt)
        if cut is not None:
            handle.write(
                f"{cut}--- jobctl: cut short: its holder stopped without closing this log "
                f"(its worker was killed?); adopted at epoch {keeper.epoch} by {keeper.owner} ---\n".encode()
            )
        handle.write(
            f"--- jobctl: attempt {keeper.attempt}, epoch {keeper.epoch}, owner {keeper.owner}, "
            f"started {format_time(store.now())} ---\n".encode()
        )
        handle.flush()
        return handle

    def start(self, keeper: Keeper, out: Outcome) -> bool:
        assert self.command is not None  # prepare() ran
        command = self.command
        log = self._logfile = self._open_log(keeper)
        out.log = None if log is None else log.name
        # Before any code of the job can run: it runs as this process's user, who could otherwise read
        # this process's environment, memory and descriptors through /proc (jobctl.prctl).
        seal()
        if self._guardian is None:
            self._guardian = Guardian()  # its process starts with the child it guards
            self._own_guardian = True
        try:
            self.result_file = self._result_ready(keeper)
        except (OSError, JobError) as exc:
            # As with the log: no $JOB_RESULT beats no run. A link planted at its
            # directory is refused, never followed; the command runs without the
            # variable, and one that needs it fails on its own.
            why = exc.message if isinstance(exc, JobError) else str(exc)
            self._footer(f"no $JOB_RESULT for this attempt: {why}")
        started = self._start(keeper, command, log, out, self._guardian)
        if started is None:
            self._close()  # before the write that records it, as a child that ran
            return False
        proc, tee_r, spec, expiry = started
        self._proc, self._tee_r = proc, tee_r
        if spec is not None:
            self._spec_fd, self._spec_left = spec[0], memoryview(spec[1])
        self._guarded_at = expiry - _guard_margin(self._ttl)
        start = time.monotonic()
        self._timeout_at = start + command.timeout if command.timeout else math.inf
        return True

    def _start(
        self, keeper: Keeper, command: Command, log: IO[bytes] | None, out: Outcome, guardian: Guardian
    ) -> tuple[subprocess.Popen[bytes], int | None, tuple[int, bytes] | None, float] | None:
        """Start the child under the guardian; None (with ``out`` telling why) when it did not start.

        Returns the child, the tee pipe, the spec still to write to the child's
        stdin (fd and bytes) and the lease's monotonic expiry. The child is
        ``/bin/sh`` running :func:`_trampoline`, blocked until this method has
        registered it with the guardian and written ``go``.
        """
        store = keeper.store
        env = child_env(store, keeper.rec, self._env, self._environment)
        env.update(command.env)
        if self.result_file is not None:
            env["JOB_RESULT"] = os.path.abspath(self.result_file)
        expiry = keeper.lease_expiry()
        try:
            _check_executable(command.argv[0], env, command.cwd)
        except OSError as exc:
            self._not_started(out, command, exc)
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
            self._not_started(out, command, exc)
            return None
        finally:
            os.close(go_r)
            if tee_w is not None:
                os.close(tee_w)
        self.pid = out.pid = proc.pid
        margin = _guard_margin(self._ttl)
        # Supervised first, then go: the guardian has the group before the job
        # runs anything. A time already past (this process was stopped since
        # the claim) gets no go: the lease may be somebody else's by now.
        # Where the store allows, the guardian reads the record too: a recall
        # made while this process is stopped cannot reach it otherwise.
        source = store.lease_source(keeper.job_id)
        record = None if source is None else LeaseRecord(source, keeper.epoch, margin, _read_every(self._ttl))
        guarded = guardian.watch(proc.pid, expiry - margin, record)
        if not guarded or time.monotonic() >= expiry - _own_margin(self._ttl):
            os.close(go_w)  # end of file: the child exits without running anything
            killpg(proc.pid, signal.SIGKILL)
            guardian.forget(proc.pid)
            proc.wait()
            if tee_r is not None:
                os.close(tee_r)
            if guarded:
                out.reason = "fenced"
                late = LeaseExpired(f"job {keeper.job_id}: the lease of epoch {keeper.epoch} ran out before the start")
                late.job_id = keeper.job_id
                out.verdict = late
                self._footer(f"not started; {late.verdict}: {late.message}")
                return None
            out.exit_code = 126
            why = f" ({guardian.failure})" if guardian.failure else ""
            out.error = f"cannot start {command.argv[0]}: no guardian process to supervise it{why}"
            self._footer(out.error)
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

    # -- the result -----------------------------------------------------------------

    def _result_ready(self, keeper: Keeper) -> str:
        """Make the directory ``$JOB_RESULT`` lives in and clear its name; returns the path.

        Every directory below the store's is opened without following a link
        (:mod:`jobctl.fsio`): a link planted there is refused (the command
        then runs without ``$JOB_RESULT``) rather than send the result out of the store. Whatever is at the name
        (left by a holder of the same epoch: there is none) is removed, so the
        only result stored is one this child wrote.
        """
        at = self._dir(keeper)
        name = result_name(keeper.attempt, keeper.epoch)
        try:
            fsio.unlink(at, name)
        except OSError as exc:
            raise fsio.refusal(at.join(name), exc, keeper.job_id, "remove") from None
        return at.join(name)

    def completing(self, out: Outcome) -> Callable[[Record], None] | None:
        """The result the child left at ``$JOB_RESULT``, stored with the completion; nothing when it left none.

        The file is read without following a link and must hold one JSON
        value of at most :data:`jobctl.results.RESULT_MAX_BYTES`; anything
        else fails the attempt (``Invalid``) with an error naming the job and
        the file, counted under the retry policy like a non-zero exit.
        """
        if self.result_file is None or self.keeper is None:
            return None
        from .results import RESULT_MAX_BYTES, parse_result, set_result

        keeper = self.keeper
        job_id = keeper.job_id
        where = f"job {job_id}: $JOB_RESULT ({self.result_file})"
        at = self._at
        if at is None:
            return None
        try:
            data = fsio.read_file(at, os.path.basename(self.result_file), job_id, limit=RESULT_MAX_BYTES)
        except JobError as exc:
            raise Invalid(f"{where}: {exc.message}", job_id) from None
        if data is None:
            return None
        try:
            value = parse_result(data, job_id)
        except Invalid as exc:
            raise Invalid(f"{where}: {exc.message}", job_id) from None

        def store_result(rec: Record) -> None:
            set_result(rec, value)

        return store_result

    def _result_gone(self) -> None:
        """Remove the result file once the attempt is over: the record holds the result now."""
        at = self._at
        if self.result_file is None or at is None:
            return
        with contextlib.suppress(OSError, JobError):
            fsio.unlink(at, os.path.basename(self.result_file))

    def _not_started(self, out: Outcome, command: Command, exc: OSError) -> None:
        out.exit_code = 127 if isinstance(exc, FileNotFoundError) else 126
        out.error = f"cannot start {command.argv[0]}: {exc.strerror or exc}"
        self._footer(out.error)

    def _footer(self, text: str) -> None:
        log = self._logfile
        if log is None:
            return
        try:
            log.write(f"--- jobctl: {text} ---\n".encode())
            log.flush()
        except (OSError, ValueError):
            pass

    # -- supervision (the keeper's loop calls these) ------------------------------

    def register(self, poller: select.poll) -> float:
        assert self._proc is not None
        self._pidfd = pidfd(self._proc.pid)
        if self._pidfd is not None:
            poller.register(self._pidfd, select.POLLIN)
        if self._tee_r is not None:
            os.set_blocking(self._tee_r, False)
            poller.register(self._tee_r, select.POLLIN)
        if self._spec_fd >= 0:
            poller.register(self._spec_fd, select.POLLOUT)
        self._poller = poller
        # Without a pidfd the child's exit wakes nothing: look every 20 ms.
        return math.inf if self._pidfd is not None else 0.02

    def ready(self, fd: int) -> None:
        if fd == self._tee_r:
            self._pump(fd)
        elif fd == self._spec_fd:
            self._spec_left = feed(fd, self._spec_left)
            if not self._spec_left:
                self._poller.unregister(fd)
                os.close(fd)
                self._spec_fd = -1

    def done(self) -> bool:
        assert self._proc is not None
        return exited(self._proc.pid)

    def stop(self, when: float, now: float) -> None:
        assert self._proc is not None
        pid = self._proc.pid
        if when <= now:
            killpg(pid, signal.SIGKILL)
            self._kill_at = math.inf
            self._sent_term = True
            return
        if not self._sent_term:
            killpg(pid, signal.SIGTERM)
            self._sent_term = True
        self._kill_at = min(self._kill_at, when)

    def lease_moved(self, expiry: float) -> None:
        # The guardian follows the lease: it kills only when this loop could not.
        guarded_at = expiry - _guard_margin(self._ttl)
        if guarded_at != self._guarded_at and self._proc is not None and self._guardian is not None:
            self._guarded_at = guarded_at
            self._guardian.renew(self._proc.pid, guarded_at)

    def due(self) -> float:
        return min(self._kill_at, self._timeout_at)

    def tick(self, now: float) -> tuple[str, str] | None:
        assert self._proc is not None and self.command is not None
        stop_for = None
        if now >= self._timeout_at:
            stop_for = ("timeout", f"timed out after {self.command.timeout:g} s")
            self._timeout_at = math.inf
        if now >= self._kill_at:
            killpg(self._proc.pid, signal.SIGKILL)
            self._kill_at = math.inf
        return stop_for

    def killed_unasked(self) -> bool:
        # SIGKILLed, and not by the keeper: most likely by the guardian.
        assert self._proc is not None
        return sigkilled(self._proc.pid)

    def end(self, out: Outcome, disposition: str, detail: str, fenced: JobError | None) -> None:
        proc = self._proc
        assert proc is not None and self._guardian is not None
        pid = proc.pid
        # The leader is a zombie: its pid (the group's id) cannot be reused
        # yet. Nothing the job started outlives it.
        killpg(pid, signal.SIGKILL)
        self._guardian.forget(pid)
        code = proc.wait()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self._spec_fd >= 0:
            os.close(self._spec_fd)
            self._spec_fd = -1
        if self._tee_r is not None:
            self._pump(self._tee_r)
        out.exit_code = code
        if fenced is not None:
            self._footer(f"{describe_status(code)}; {fenced.verdict}: {fenced.message}")
        else:
            self._footer(describe_status(code) + (f" ({disposition}: {detail})" if disposition else ""))
        self.succeeded = code == 0
        if not self.succeeded:
            out.error = describe_status(code)
        self._close()  # before the final write, as ever: its latency is not the record's

    def after(self, out: Outcome) -> None:
        self._close()  # a child that never started leaves them open
        self._result_gone()
        if self._at is not None:
            self._at.close()
            self._at = None

    def _close(self) -> None:
        """Close the tee pipe, the attempt's own guardian and the log (each once)."""
        if self._tee_r is not None:
            os.close(self._tee_r)
            self._tee_r = None
        if self._own_guardian and self._guardian is not None:
            self._guardian.close()
            self._own_guardian = False
        if self._logfile is not None:
            self._logfile.close()
            self._logfile = None

    def _pump(self, fd: int) -> None:
        """Copy what the child wrote to the terminal and the log (tee mode)."""
        log = self._logfile
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
    The thread that calls ``execute()`` is the child's parent for the
    parent-death signal (armed on Python 3.10's start path), so it must be the
    one that lives as long as the child. ``guardian``: the supervisor's
    :class:`Guardian` (a worker shares one among its runs); without one the
    run starts its own for the attempt. ``lookout``: likewise, the
    :class:`jobctl.keeper.Lookout` that tells the run its record was written.
    ``successor`` and ``claimed_at``: a worker slot's, as :class:`jobctl.keeper.Keeper` takes them.
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
        self.work = ChildWork(command, env=env, tee=tee, log=log, guardian=guardian, environment=environment)
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
