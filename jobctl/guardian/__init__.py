"""The guardian: a small process that kills a stopped or dead supervisor's process groups.

:class:`Guardian` is the supervisor's side (a worker's, ``jobctl run``'s):
it starts the process and tells it each group's deadline. The process's own
program is :mod:`jobctl.guardian.program`, which imports the standard library
only; it starts as ``python -I -S -c BOOTSTRAP``, a line that imports it from
its own directory, so its byte code is cached like any module's and the start
pays for no import of jobctl.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from ..children import write_all
from ..jobenv import JobEnvironment
from ..store.base import LeaseSource

__all__ = ["Guardian", "LeaseRecord", "BOOTSTRAP", "PROGRAM_DIR"]

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


class Guardian:
    """The supervisor that is never frozen with the party it stands behind: a small process of its own.

    A worker (or ``jobctl run``) registers each child's process group here
    before the child may run any code of the job (see :func:`jobctl.runner.start.trampoline`), with
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
                # The path entries after the program's are where it finds psycopg for a lease in a database row.
                [sys.executable, "-I", "-S", "-c", BOOTSTRAP, PROGRAM_DIR, *(p for p in sys.path if p)],
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
        try:
            _sealed(ours)
        except OSError:
            proc.kill()
            proc.wait()
            self._hang_up()
            self._fd = -1
            raise
        # The whole environment comes now, on the socket, to a guardian that said it is sealed.
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


#: Seconds a new guardian has to say it is sealed (it starts in about 15 ms).
SEAL_WAIT = 10.0


def _sealed(sock: socket.socket) -> None:
    """Wait for the guardian's ``S`` line: it is non-dumpable now, so a job may start and secrets may follow.

    Until then the registration does not return, so the start gate keeps the
    job's command from running: no job can open the guardian's memory while
    it could still be read.
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
