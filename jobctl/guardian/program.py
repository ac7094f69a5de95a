"""The guardian's own program: the process that kills a stopped or dead supervisor's process groups.

What it is for, and the lines it reads, are told in :class:`jobctl.guardian.Guardian`,
which starts it. It runs as ``python -I -S -c BOOTSTRAP DIR PATH...`` (see
:data:`jobctl.guardian.BOOTSTRAP`): isolated, without ``site``, this file
found as a top-level module in its own directory ``DIR`` (so its byte code is
cached like any module's), and ``PATH...`` the supervisor's ``sys.path``,
where psycopg is found for a lease in a database row.

So it imports the standard library only, and nothing of jobctl: importing
``jobctl`` would import the package's ``__init__`` and what it pulls in, a
cost paid at every start, and none of it is on the path after ``-I -S``.
:func:`seal` repeats :func:`jobctl.prctl.seal` for that reason.

Importing this module does nothing but define; :func:`main` is the program.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import socket
import sys
import time

# Not typing.TYPE_CHECKING: importing typing would cost every start more than the rest of this program.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

INF = float("inf")
LIMIT = 1 << 26  # a larger file is not read: the time its supervisor reported still holds
OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
LEASE = b'\n  "lease": {\n    "owner": "'
RACY = 1.0  # seconds: a file changed this shortly before it was read may change again unseen by its times
PR_SET_DUMPABLE = 4  # as in jobctl.prctl
#: What a child starts with at their defaults: what this program ignores (a disposition ``exec`` keeps), and
#: what Python ignores at its start (SIGPIPE, SIGXFSZ), as ``subprocess`` restores them.
SIGDEF = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGPIPE,
    signal.SIGXFSZ,
)
DUP2 = os.POSIX_SPAWN_DUP2
SHELL = b"/bin/sh"  # what runs a file with no "#!" line, as execvp runs it

#: A record file's identity when last read: inode, device, size, modification and change times.
Ident = tuple[int, int, int, int, int]
#: Where a group's lease is read: a record file's path, a database row (its URL and id), or nowhere.
Where = bytes | tuple[str, str] | None


def spawned(path: bytes, argv: list[bytes], env: dict[bytes, bytes], actions: list[Any]) -> int:
    """The pid of ``path`` started in a process group of its own, with ``argv``, ``env`` and ``actions``.

    A file the kernel cannot execute (``ENOEXEC``: a script with no ``#!``
    line) is run by the shell, as ``execvp`` and every shell run it:
    ``/bin/sh path arg...``.
    """

    def start(file: bytes, args: list[bytes]) -> int:
        return os.posix_spawn(file, args, env, file_actions=actions, setpgroup=0, setsigdef=SIGDEF, setsigmask=())

    try:
        return start(path, argv)
    except OSError as exc:
        if exc.errno != errno.ENOEXEC:
            raise
    return start(SHELL, [SHELL, path, *argv[1:]])


def seal() -> None:
    """Become non-dumpable (:mod:`jobctl.prctl`): no other process of this user -- a job -- reads this one.

    Its memory, environment and descriptors. Until then there was nothing to
    read: it started with no secret in its environment (its supervisor's
    comes on stdin), and its stdin is a socket, which no process can open
    through ``/proc``.
    """
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, *(ctypes.c_ulong(0),) * 4)
    except (OSError, AttributeError):
        pass


def kill(pid: int, sig: int) -> None:
    """Signal the group ``pid`` (and the process, should it have left its group): a child not reaped yet."""
    for fn in (os.killpg, os.kill):
        try:
            fn(pid, sig)
            return
        except OSError:
            pass


def tell(chan: socket.socket, line: bytes, fd: int | None = None) -> None:
    """One line to a child's supervisor (with a descriptor); one that hung up is not told."""
    try:
        if fd is None:
            chan.send(line)
        else:
            socket.send_fds(chan, [line], [fd])
    except OSError:
        pass


def receive(sock: socket.socket, size: int, most: int) -> tuple[bytes, list[int]]:
    """What came on ``sock``, and the descriptors with it: close-on-exec from the start, so no child inherits one.

    (``socket.recv_fds`` drops the flags it is given: MSG_CMSG_CLOEXEC would not reach the kernel.)
    """
    data, anc, _flags, _addr = sock.recvmsg(size, socket.CMSG_LEN(most * 4), socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [int.from_bytes(raw[i : i + 4], sys.byteorder, signed=True) for i in range(0, len(raw) - 3, 4)]
    return data, fds


def open_pidfd(pid: int) -> int | None:
    """A pidfd of the child ``pid`` (not reaped yet: it is that child); None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def instant(t: str) -> float | None:
    """An RFC 3339 time in seconds since 1970 (days from the civil date: no datetime to import); None if not one."""
    try:
        digits = t[:4] + t[5:7] + t[8:10] + t[11:13] + t[14:16] + t[17:19]
        if not (digits.isascii() and digits.isdigit() and len(digits) == 14 and t[4] + t[7] + t[13] + t[16] == "--::"):
            return None
        y, mo, d, h, mi = int(t[:4]), int(t[5:7]), int(t[8:10]), int(t[11:13]), int(t[14:16])
        s: float = int(t[17:19])
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


def ident(st: os.stat_result) -> Ident:
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def read(path: bytes) -> tuple[bytes, Ident | None] | None:
    """(bytes, the identity of the file read, or None when too fresh to stand for it); None when unread.

    Never a link, never a FIFO or a device, never more than LIMIT bytes. The directory it is in (a file
    store's ``jobs/``) is not followed either, as jobctl.fsio opens it: a link swapped in there must not
    send this read to a record of somebody else's making, whose other epoch would kill the job.
    """
    try:
        at = os.open(os.path.dirname(path) or b".", OPEN_DIR)
    except OSError:
        return None
    try:
        fd = os.open(os.path.basename(path), OPEN, dir_fd=at)
    except OSError:
        return None
    finally:
        os.close(at)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000:
            return None
        parts: list[bytes] = []
        size = 0
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


def lease(data: bytes) -> tuple[int, float] | None:
    """(epoch, expires_at in seconds since 1970; -INF when unset) as the record says; None when unknown."""
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
        epoch, expires = doc["lease"]["epoch"], doc["lease"].get("expires_at")
    except Exception:
        return None
    if type(epoch) is not int:
        return None
    if expires is None or expires == "":
        return epoch, -INF
    t = instant(expires) if isinstance(expires, str) else None
    return None if t is None else (epoch, t)


class Group:
    """One child's process group: the times that kill it, where its lease is read, and where its end is told."""

    __slots__ = (
        "kill_at",
        "where",
        "epoch",
        "margin",
        "every",
        "lease_at",
        "next_read",
        "ident",
        "seen",
        "since",
        "chan",
        "gone",
    )

    def __init__(
        self,
        kill_at: float,
        where: Where = None,
        epoch: int = 0,
        margin: float = 0.0,
        every: float = INF,
        since: float = 0.0,
        chan: socket.socket | None = None,
    ) -> None:
        self.kill_at = kill_at  # the time its supervisor reported
        self.where = where  # the record's path, or (url, id) of a row; None: none is read
        self.epoch = epoch  # the epoch held
        self.margin = margin  # killed this long before the lease's end
        self.every = every  # read interval
        self.lease_at = INF  # the kill time the record says
        self.next_read = INF if where is None else -INF
        self.ident: Ident | None = None  # identity of the record's file when last read (None: read it next time)
        self.seen: tuple[int, float] | None = None  # (epoch, expires_at) it said
        self.since = since  # when it was started
        self.chan = chan  # the supervisor's channel for this child: its pid went there, its wait status goes there
        self.gone = False  # SIGKILLed for its time: only its end is still awaited

    def killed(self) -> None:
        """Its time came and its group was SIGKILLed: nothing more to wait for but the leader's end."""
        self.kill_at = self.lease_at = self.next_read = INF
        self.where = None
        self.gone = True


class Rows:
    """The reader of one database's lease rows: a thread, never the loop that kills.

    A server that is down, slow or unreachable leaves the last lease read
    (and the supervisor's time) in force. Every ``every`` seconds one read
    of every id guarded in this database (the store's named query, by primary
    key): (monotonic time it was sent, epoch, seconds left by the server's
    clock or None). The time left is counted from the statement's start,
    after the time taken here: never late.
    """

    def __init__(self, url: str, query: str, wake: int, paths: list[str]) -> None:
        import threading

        self.url, self.query, self.lock = url, query, threading.Lock()
        self.wake, self.paths = wake, paths
        self.want: dict[str, float] = {}  # id -> read interval
        self.seen: dict[str, tuple[float, int, float | None]] = {}  # id -> (sent, epoch, seconds left)
        threading.Thread(target=self.run, daemon=True).start()

    def connect(self) -> Any:
        # psycopg only for a row: the parent's path entries (after -I -S) find it; a file store never pays.
        sys.path.extend(p for p in self.paths if p not in sys.path)
        import psycopg

        # Named for whoever looks at the server's sessions (pg_stat_activity): which process reads.
        conn = psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=5,
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=2,
            application_name=f"jobctl guardian {os.getpid()}",
        )
        # A guardian never writes: the session refuses it, and no read waits on the server for long.
        conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        conn.execute("SET statement_timeout = 5000")
        return conn

    def run(self) -> None:
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
                        os.write(self.wake, b"!")
                    except OSError:
                        pass
            time.sleep(every)


class Guard:
    """The program's state: the children started, the database readers, what is left of the stream read.

    ``stdin``: the supervisor's end (a socket); ``paths``: where psycopg is found.
    """

    def __init__(self, stdin: int = 0, paths: list[str] | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, stdin) if stdin >= 0 else None
        self.stdin = stdin
        self.paths = paths or []
        self.live: dict[int, Group] = {}  # pid -> its group (the child not yet reaped)
        self.rows: dict[str, Rows] = {}  # url -> its reader
        self.rest = b""
        self.fds: list[int] = []  # descriptors received whose start message is not read whole yet
        self.wake_r, self.wake_w = os.pipe()  # a reader's news, or a child's end (SIGCHLD), wakes the loop
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # a child's stdin when it is given none
        self.home = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # where a child's cwd is from

    def handle(self, line: bytes) -> None:
        """One line of the supervisor (the lines are told in :class:`jobctl.guardian.Guardian`)."""
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
            pid, value = int(fields[0]), fields[1]
            g = self.live.get(pid)
            if op == b"=" and g is not None and not g.gone:
                g.kill_at = float(value)
            elif op == b"!" and g is not None:
                # Never a reaped child's id: only this process reaps, and it reaps only after every message came.
                kill(pid, int(value))
        except (IndexError, ValueError):
            return

    def watch(self, meta: list[bytes]) -> tuple[float, tuple[Where, int, float, float] | None]:
        """A start's kill time and the record to read, from its fields ``AT [EPOCH MARGIN EVERY WHERE]``."""
        at = float(meta[0])
        if len(meta) < 5:
            return at, None
        path = bytes.fromhex(meta[4].decode())
        where: Where = path
        if path[:1] == b"\0":
            import json

            row = json.loads(path[1:])
            url, job_id, query = str(row["url"]), str(row["id"]), str(row["query"])
            if url not in self.rows:
                self.rows[url] = Rows(url, query, self.wake_w, self.paths)
            where = (url, job_id)
        return at, (where, int(meta[1]), float(meta[2]), float(meta[3]))

    def start(self, payload: bytes, spec: bytes) -> None:
        """Start a child (a ``S`` message): spawned in its own group, guarded from before its first instruction.

        ``spec`` names the descriptors that came with it, in order: ``c`` the
        channel its pid (and a pidfd), or the ``errno`` of a failed start, or
        ``L`` (its time had come: not started) goes to, then ``i`` its stdin,
        ``o`` its stdout, ``e`` its stderr (else its stdout's).
        """
        fds = dict(zip(spec.decode("ascii", "replace"), self.fds[: len(spec)], strict=False))
        del self.fds[: len(spec)]
        chan_fd = fds.pop("c", -1)
        chan = None if chan_fd < 0 else socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, chan_fd)
        try:
            reply = self.spawn(payload, fds, chan)
        finally:
            for fd in set(fds.values()):
                os.close(fd)
        if chan is None:
            return
        if reply is not None:
            tell(chan, reply)
            chan.close()

    def spawn(self, payload: bytes, fds: dict[str, int], chan: socket.socket | None) -> bytes | None:
        """Spawn what ``payload`` says; what to answer when it was not started (None: it was, and said so)."""
        try:
            fields = payload.split(b"\0")
            meta = fields[0].split()
            argc = int(meta[0])
            at, watch = self.watch(meta[1:])
            cwd, path, argv = fields[1], fields[2], fields[3 : 3 + argc]
            env = dict(kv.split(b"=", 1) for kv in fields[3 + argc :])
        except (IndexError, ValueError, KeyError, TypeError):
            return b"E%d\n" % errno.EINVAL  # a message this program cannot read
        if chan is None:
            return None  # nobody to tell its pid, nor to stop it: not started
        if at <= time.monotonic():
            return b"L\n"  # its lease may be somebody else's by now: no code of it runs
        out = fds.get("o", 1)
        actions = [(DUP2, fds.get("i", self.null), 0), (DUP2, out, 1), (DUP2, fds.get("e", out), 2)]
        try:
            if cwd:
                os.chdir(cwd)  # posix_spawn has no cwd of its own; this process's is its home again at once
            try:
                pid = spawned(path, argv, env, actions)
            finally:
                if cwd:
                    os.fchdir(self.home)
        except OSError as exc:
            return b"E%d\n" % (exc.errno or errno.EIO)
        # Registered before anything else can happen: a stop, a kill or its lease's end all find it here.
        self.live[pid] = Group(at, *(watch or ()), since=time.monotonic(), chan=chan)  # type: ignore[misc]
        pidfd = open_pidfd(pid)
        try:
            tell(chan, b"P%d\n" % pid, pidfd)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return None

    def read(self) -> bool:
        """Every message waiting (descriptors with them); False at end of file: the supervisor is gone."""
        assert self.sock is not None
        while select.select([self.stdin], [], [], 0)[0]:
            try:
                chunk, fds = receive(self.sock, 1 << 16, 16)
            except InterruptedError:
                continue
            self.fds.extend(fds)
            if not chunk:
                return False
            buf = self.rest + chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                if buf[:1] != b"S":
                    self.handle(buf[:nl])
                    buf = buf[nl + 1 :]
                    continue
                # S SIZE SPEC: a start, its SIZE bytes following the line.
                head = buf[1:nl].split()
                try:
                    end = nl + 1 + int(head[0])
                except (IndexError, ValueError):
                    buf = buf[nl + 1 :]
                    continue
                if len(buf) < end:
                    break
                self.start(buf[nl + 1 : end], head[1] if len(head) > 1 else b"")
                buf = buf[end:]
            self.rest = buf
        return True

    def reap(self) -> None:
        """Each child that ended: the rest of its group killed while its id is still its own, then reaped, told."""
        for pid in list(self.live):
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
                status = -1
            else:
                if info is None:
                    continue
                # The leader is a zombie: its pid (the group's id) cannot be reused yet.
                kill(pid, signal.SIGKILL)
                status = os.waitpid(pid, 0)[1]
            g = self.live.pop(pid)
            if g.chan is not None:
                if status >= 0:
                    tell(g.chan, b"X%d\n" % status)
                g.chan.close()

    def settle(self) -> bool:
        """Every message that came first, then a kill of every group whose time has come, then the ends.

        False: end of file, the supervisor is gone.
        """
        if not self.read():
            return False
        now = time.monotonic()
        for pid, g in self.live.items():
            if min(g.kill_at, g.lease_at) <= now:
                kill(pid, signal.SIGKILL)
                g.killed()
        self.reap()
        return True

    def look(self, g: Group) -> None:
        """Read the group's lease where it is (its time has come): a row as its reader last read it, or the file."""
        where = g.where
        if isinstance(where, tuple):
            r = self.rows[where[0]]
            with r.lock:
                got = r.seen.get(where[1])
            # Only a read sent after the group was registered, itself after the claim its epoch comes
            # from: one sent before may show the job's previous attempt, under an epoch now stale.
            if got is not None and got[0] >= g.since:
                # The row's lease on this clock, from the time left when the read was sent.
                sent, epoch, left = got
                g.lease_at = -INF if epoch != g.epoch or left is None else sent + left - g.margin
            g.next_read = time.monotonic() + g.every
            return
        assert where is not None  # a group with nowhere to read is never due
        seen = g.seen if self.same(g) else None  # an unchanged record says what it said when last read
        if seen is None:
            got_file = read(where)
            seen = None if got_file is None else lease(got_file[0])
            if got_file is not None and seen is not None:
                g.ident, g.seen = got_file[1], seen
        now, wall = time.monotonic(), time.time()
        if seen is not None:
            # Another epoch: somebody claimed the job. Else its lease's end, now on the record, moved to
            # this clock (the file store's clock is the system clock, so this is done at every look: a step
            # of that clock moves it too): a recall made behind a stopped supervisor's back shortens it here too.
            g.lease_at = -INF if seen[0] != g.epoch else now + (seen[1] - wall) - g.margin
        g.next_read = now + g.every

    @staticmethod
    def same(g: Group) -> bool:
        """Whether the record's file is still the one last read (a stat: no open, no read, no parse)."""
        if g.ident is None or not isinstance(g.where, bytes):
            return False
        try:
            return ident(os.stat(g.where, follow_symlinks=False)) == g.ident
        except OSError:
            return False

    def rows_wanted(self) -> None:
        """Each reader reads the ids still guarded, and forgets what it read of the others."""
        want: dict[str, dict[str, float]] = {}
        for g in self.live.values():
            if isinstance(g.where, tuple):
                want.setdefault(g.where[0], {})[g.where[1]] = g.every
        for url, r in self.rows.items():
            with r.lock:
                r.want = want.get(url, {})
                r.seen = {k: v for k, v in r.seen.items() if k in r.want}

    def wait(self) -> None:
        """Sleep until the next time due, a message, or a reader's news (which makes every row due now)."""
        wake = min((min(g.kill_at, g.lease_at, g.next_read) for g in self.live.values()), default=INF)
        timeout = None if wake == INF else max(0.0, wake - time.monotonic())  # a child's end wakes it too
        news = select.select([self.stdin, self.wake_r], [], [], timeout)[0]
        if self.wake_r in news:
            try:
                os.read(self.wake_r, 4096)
            except OSError:
                pass
            for g in self.live.values():
                if isinstance(g.where, tuple):
                    g.next_read = 0.0  # a reader has news: look at it now

    def run(self) -> None:
        """Until the supervisor is gone; then every group not reaped yet is killed.

        Each wake settles first, before any record is read: one after this
        process was stopped (its host, its container or its whole tree
        frozen past the lease) kills a lapsed group before that group's own
        wake has done more than it must.
        """
        while self.settle():
            now = time.monotonic()
            for g in self.live.values():
                if g.next_read <= now:
                    self.look(g)
            if not self.settle():
                break
            if self.rows:
                self.rows_wanted()
            self.wait()
        # Its children's ends are told to nobody now: what ended is reaped, what runs is killed and left
        # to whoever adopts it.
        self.reap()
        for pid in self.live:
            kill(pid, signal.SIGKILL)


def main(paths: list[str]) -> None:
    """The guardian process: sealed first, deaf to terminal signals, then guarding until its stdin ends."""
    seal()
    # Said once sealed: the supervisor lets no job start, and sends no secret, before it reads this
    # (a job that opened /proc/<pid>/mem before the seal could read whatever came after it).
    try:
        os.write(0, b"S\n")
    except OSError:
        return  # nobody listens: there is nothing to guard
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)  # its children start with these at their defaults again (SIGDEF)
    guard = Guard(0, paths)
    # A child's end wakes the loop: the signal's byte lands on the same pipe as a reader's news.
    signal.set_wakeup_fd(guard.wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    guard.run()
