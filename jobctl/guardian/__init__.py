"""The guardian: a small process that starts a supervisor's children and kills them when it is stopped or dead.

:class:`Guardian` is the supervisor's side (a worker's, ``jobctl run``'s):
it starts the process, has it start each child, and tells it each group's
deadline and each signal. The process's own
program is :mod:`jobctl.guardian.program`, which imports the standard library
only; it starts as ``python -I -S -c BOOTSTRAP``, a line that imports it from
its own directory, so its byte code is cached like any module's and the start
pays for no import of jobctl.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..children import sweep_session
from ..jobenv import JobEnvironment
from ..store.base import LeaseSource
from .program import receive

__all__ = ["Guardian", "Child", "Late", "Unguarded", "LeaseRecord", "start_message", "BOOTSTRAP", "PROGRAM_DIR"]

#: Where :mod:`jobctl.guardian.program` is: the one directory its process imports from.
PROGRAM_DIR = os.path.dirname(os.path.abspath(__file__))

#: The guardian's ``-c``: its program imported from ``sys.argv[1]`` (:data:`PROGRAM_DIR`), which leaves the path
#: again, and run with the rest of the arguments: the supervisor's ``sys.path``, where psycopg is found.
BOOTSTRAP = "import sys; sys.path.append(sys.argv[1]); import program; sys.path.pop(); program.main(sys.argv[2:])"


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


class Late(Exception):
    """The guardian did not start the command: the time to kill it had come before it could (the lease's end)."""


class Unguarded(Exception):
    """No guardian process could start the command; the message says why."""


@dataclass
class Child:
    """A command the guardian started: its pid (its group's id), and the channel its end is told on.

    ``pidfd`` refers to that very process (the guardian opened it before it
    could reap it), or is None where the kernel has none. ``chan`` carries
    one more line, ``X<wait status>``, once the guardian has killed the rest
    of its group and reaped it; end of file before that means the guardian
    is gone. ``rest``: what was read of it after the pid's line.
    """

    pid: int
    chan: socket.socket
    pidfd: int | None
    generation: int
    rest: bytes = b""

    def close(self) -> None:
        self.chan.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class Guardian:
    """The supervisor's side of the guardian: the process that starts every child and stands behind it.

    A worker (or ``jobctl run``) asks it to :meth:`start` each job's command,
    with the monotonic time by which the child's group must be gone: a little
    before the child's lease can run out. The guardian process spawns the
    command itself (``posix_spawn``: no shell, unless the file has no ``#!`` line, which
    ``/bin/sh`` runs as ``execvp`` would; its own process group, its
    stdin, stdout and stderr passed over the socket, nothing else of either
    process), so the child is registered before its first instruction: no
    window exists in which a child runs unguarded, and none needs a start
    gate. Each renewal moves that time on (:meth:`renew`); every signal
    for the group goes through the guardian (:meth:`signal`), and so does the
    group's kill when the child exits: the guardian is the child's parent,
    the one process that reaps it, so it alone knows the group's id is still
    the child's when it signals it. It tells the exit on the start's own
    channel once the rest of the group is killed and the child reaped.

    The guardian SIGKILLs a group when its time comes and no later time was
    reported, and every group still running when its stdin reaches end of
    file, which the kernel delivers when the supervisor dies however it dies
    (its descriptors close; no child holds a copy, the guardian passes each
    one only the three it is given). So a supervisor that is stopped
    (SIGSTOP, Ctrl-Z: all its threads frozen, nothing renews) cannot leave a
    child running past its lease, where an adopter would start the job a
    second time; and a killed one cannot leave one running at all. The whole
    group is killed. The guardian ignores terminal signals and lives in its
    own session, so neither a Ctrl-C nor a Ctrl-Z meant for the worker
    reaches it (its children start with every signal at its default).
    ``time.monotonic`` is ``CLOCK_MONOTONIC`` on Linux, one clock for every
    process of the machine, so the times mean the same on both sides of the
    socket.

    What the supervisor reports is not all a stopped supervisor misses: a
    recall made meanwhile lowers the lease's end in the record [JOB-R3], and
    an adopter may claim at the recall's ``until``. So where the store has a
    :meth:`~jobctl.store.base.Store.lease_source`, the guardian also looks at
    the record itself every :func:`jobctl.runner.start.read_every` and kills the group at the
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

    Messages on its stdin (a socket): ``EHEX`` (first: the supervisor's
    environment as JSON, in hex); ``SSIZE FDS`` and SIZE bytes (a start:
    ``ARGC AT [EPOCH MARGIN EVERY WHERE]``, the cwd, the executable's path,
    the argv and the environment's ``NAME=VALUE``, parted by NULs; FDS names
    the descriptors sent with it: ``c`` the start's channel, ``i`` stdin,
    ``o`` stdout, ``e`` stderr), to be gone by AT, and its record read at
    WHERE (in hex: a path, or a NUL and the row's URL, id and query as JSON)
    every EVERY seconds, where the lease of EPOCH ends MARGIN seconds before
    its ``expires_at``; ``=PID AT`` (a renewal or a recall moved AT); ``!PID
    SIG`` (signal the group). On the start's channel it answers ``PPID`` (a
    pidfd with it), ``EERRNO`` (not started: what ``exec`` said) or ``L``
    (not started: AT had come). It takes in every message waiting before it
    kills anything, and on every wake it kills what is due by the times it
    knows before it reads any record: woken after a stop of its own (a frozen
    host or container, the whole tree stopped past the lease), the lapsed
    group goes first.

    Secrets: the guardian makes itself non-dumpable (:mod:`jobctl.prctl`)
    before it reads anything, and starts with only what a job would get of
    the environment (:func:`_guardian_env`); the whole environment (which a
    database's client library may need) follows on the socket, as does each
    job's. If the guardian process dies, whatever it started dies with it: the
    supervisor, finding it gone (a message it cannot take, a start's channel
    closed unanswered), kills every process left in its session before it
    reaps it (:func:`_bury`), a command it started and died before telling
    of among them; the attempts fail (:class:`jobctl.runner.ChildWork`) and
    the next start starts a new one. The first start starts
    the first one: a worker pass that runs nothing starts no process at all.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self.proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        #: Counts the guardian processes started: a child's messages go only to the one that started it.
        self.generation = 0
        #: Why the last guardian process could not be started (None: it was, or none was needed yet).
        self.failure: str | None = None

    def _spawn(self) -> None:
        # Its stdin is a socket: a pipe could be opened through /proc/<pid>/fd/0 by a job in the moment
        # before the guardian seals itself (jobctl.prctl), and read; a socket cannot be opened so.
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                # The path entries after the program's are where it finds psycopg for a lease in a database row
                # (absolute: the guardian moves to each child's cwd to start it).
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    BOOTSTRAP,
                    PROGRAM_DIR,
                    *(os.path.abspath(p) for p in sys.path if p),
                ],
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
        self.proc, self._sock = proc, ours
        self.generation += 1
        try:
            _sealed(ours)
        except OSError:
            proc.kill()
            proc.wait()
            self._hang_up()
            raise
        # The whole environment comes now, on the socket, to a guardian that said it is sealed.
        ours.sendall(b"E" + json.dumps(dict(os.environ)).encode().hex().encode() + b"\n")

    def _hang_up(self) -> None:
        """Close our end of the guardian's stdin: it reads end of file, kills what it guards and exits."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
        if self.proc is not None and not self._closed:
            _bury(self.proc)  # found gone: nothing it started outlives it

    def _send(self, data: bytes, fds: list[int], respawn: bool) -> bool:
        """Write one message (lock held); False when it could not. ``respawn``: start a guardian if there is none."""
        for _ in range(2):
            sock = self._sock
            if sock is not None:
                try:
                    sent = socket.send_fds(sock, [data], fds) if fds else 0
                    sock.sendall(data[sent:])
                    return True
                except OSError:
                    self._hang_up()  # it is gone: its children are their supervisors' to kill now
            if not respawn or self._closed:
                return False
            try:
                self._spawn()
            except OSError as exc:
                self.failure = f"cannot start the guardian: {exc.strerror or exc}"
                return False
            self.failure = None
        return False

    def start(
        self,
        argv: Sequence[str],
        path: str,
        env: Mapping[str, str],
        *,
        cwd: str | None,
        stdout: int,
        stderr: int | None,
        stdin: int | None,
        kill_at: float,
        record: LeaseRecord | None = None,
    ) -> Child:
        """Have the guardian start ``path`` with ``argv``: guarded until it ends, SIGKILLed at monotonic ``kill_at``.

        ``stdout``, ``stderr`` (None: stdout's) and ``stdin`` (None:
        ``/dev/null``) are descriptors of this process, passed to the child;
        ``cwd`` (None: this process's when the guardian started). ``record``: the lease to follow in
        its record as well, where the store has one. Raises ``OSError`` with
        ``exec``'s errno when the command could not be started, :class:`Late`
        when ``kill_at`` came first, :class:`Unguarded` when no guardian could.
        """
        spec, fds = "c", []
        for name, fd in (("i", stdin), ("o", stdout), ("e", stderr)):
            if fd is not None:
                spec += name
                fds.append(fd)
        message = start_message(argv, path, env, cwd, kill_at, record, spec)
        ours, theirs = socket.socketpair()
        try:
            with self._lock:
                sent = self._send(message, [theirs.fileno(), *fds], True)
                generation = self.generation
            theirs.close()
            if not sent:
                raise Unguarded(self.failure or "the guardian process is gone")
            return self._started(ours, kill_at, generation)
        except BaseException:
            ours.close()
            theirs.close()
            raise

    def _started(self, chan: socket.socket, kill_at: float, generation: int) -> Child:
        """The guardian's answer to a start: the child, or the reason it was not started (raised)."""
        # Its answer comes within moments; one stopped or starved past the kill time refuses the start then.
        if not select.select([chan], [], [], max(0.0, kill_at - time.monotonic()) + SEAL_WAIT)[0]:
            self.lost(generation, kill=True)  # stopped or starved: it and all it started are killed
            raise Unguarded(f"the guardian did not answer within {SEAL_WAIT:g} s after the lease's end")
        data, fds = receive(chan, 256, 1)
        line, _, rest = data.partition(b"\n")
        if line[:1] == b"P" and line[1:].isdigit():
            return Child(int(line[1:]), chan, fds[0] if fds else None, generation, rest)
        for fd in fds:
            os.close(fd)
        if line[:1] == b"E" and line[1:].isdigit():
            code = int(line[1:])
            raise OSError(code, os.strerror(code))
        if line == b"L":
            raise Late("the lease's end came before the guardian could start it")
        # It may have started the command and died before it said so: whatever it started is killed first.
        self.lost(generation)
        raise Unguarded("the guardian ended before it said it started the command (all it started was killed)")

    def lost(self, generation: int, *, kill: bool = False) -> None:
        """The guardian of ``generation`` was found gone (a start's channel closed unanswered): bury it now.

        With ``kill``, one that does not answer is killed first. Burying it
        kills every process left in its session before it is reaped
        (:func:`_bury`); a guardian of an earlier generation was buried when
        the next one was started.
        """
        with self._lock:
            if generation != self.generation or self._closed or self.proc is None:
                return
            if kill and self.proc.returncode is None:
                self.proc.kill()  # our child, not reaped: the pid is its own
            self._hang_up()

    def renew(self, child: Child, kill_at: float) -> None:
        """Move the group's time on (a renewal) or back (a recall)."""
        self._tell(child, f"={child.pid} {kill_at!r}\n")

    def signal(self, child: Child, sig: int) -> None:
        """Signal the child's group: through its parent, which has not reaped it while it gets the message."""
        self._tell(child, f"!{child.pid} {int(sig)}\n")

    def _tell(self, child: Child, line: str) -> None:
        with self._lock:
            if child.generation == self.generation and not self._closed:
                self._send(line.encode(), [], False)

    def close(self) -> None:
        """Nothing left to guard: end the guardian (it kills only what is still running)."""
        with self._lock:
            self._closed = True
            self._hang_up()
            proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


#: Seconds a guardian found gone has to exit (its socket closes a moment before) before it is killed.
BURY_WAIT = 5.0


def _bury(proc: subprocess.Popen[bytes]) -> None:
    """A guardian process found gone: once it has exited, every process left in its session killed, then it reaped.

    Every command it started is in its session (it runs in one of its own),
    and so is all they started but what called ``setsid``: the commands of
    a guardian killed between starting one and saying so (whose pid this
    process never learnt), a group whose leader exited unreported, a child
    that moved to another group. Its pid, the session's id, stays its own
    until it is reaped here (:func:`jobctl.children.sweep_session`).
    """
    if proc.returncode is not None:
        return
    deadline = time.monotonic() + BURY_WAIT
    while True:
        try:
            exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            proc.poll()  # reaped elsewhere: its session can no longer be told apart
            return
        if exited is not None:
            break
        if time.monotonic() >= deadline:
            proc.kill()  # alive but deaf to its socket: ours to kill, not yet reaped
            deadline = math.inf
        time.sleep(0.002)
    sweep_session(proc.pid)
    proc.wait()


def start_message(
    argv: Sequence[str],
    path: str,
    env: Mapping[str, str],
    cwd: str | None,
    kill_at: float,
    record: LeaseRecord | None,
    spec: str,
) -> bytes:
    """The ``S`` message of a start (told in :class:`Guardian`); ``spec`` names the descriptors sent with it."""
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
    fields = [os.fsencode(os.path.abspath(cwd)) if cwd else b"", os.fsencode(path), *map(os.fsencode, argv)]
    fields += [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]
    if any(b"\0" in f for f in fields) or any("=" in k or not k for k in env):
        raise OSError(errno.EINVAL, "a NUL in its arguments or environment, or a name with '='")
    payload = b"\0".join([f"{len(argv)} {kill_at!r}{rest}".encode(), *fields])
    return b"S%d %s\n" % (len(payload), spec.encode()) + payload


#: Seconds a new guardian has to say it is sealed (it starts in about 15 ms).
SEAL_WAIT = 10.0


def _sealed(sock: socket.socket) -> None:
    """Wait for the guardian's ``S`` line: it is non-dumpable now, so a job may start and secrets may follow.

    Until then no start is sent, so no job's command runs: no job can open
    the guardian's memory while it could still be read.
    """
    sock.settimeout(SEAL_WAIT)
    try:
        said = b""
        while not said.endswith(b"\n"):
            chunk = sock.recv(2 - len(said))
            if not chunk:
                raise OSError(errno.EPIPE, "the guardian ended before it was sealed")
            said += chunk
    except TimeoutError:
        raise OSError(errno.ETIMEDOUT, f"the guardian did not say it was sealed within {SEAL_WAIT:g} s") from None
    finally:
        sock.settimeout(None)
    if said != b"S\n":
        raise OSError(errno.EPROTO, f"the guardian said {said!r}, not that it was sealed")


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
