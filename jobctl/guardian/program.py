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
import os
import select
import signal
import sys
import time

# Not typing.TYPE_CHECKING: importing typing would cost every start more than the rest of this program.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

INF = float("inf")
LIMIT = 1 << 26  # a larger file is not read: the time its supervisor reported still holds
OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
LEASE = b'\n  "lease": {\n    "owner": "'
RACY = 1.0  # seconds: a file changed this shortly before it was read may change again unseen by its times
PR_SET_DUMPABLE = 4  # as in jobctl.prctl

#: A record file's identity when last read: inode, device, size, modification and change times.
Ident = tuple[int, int, int, int, int]
#: Where a group's lease is read: a record file's path, a database row (its URL and id), or nowhere.
Where = bytes | tuple[str, str] | None


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


def kill(pid: int) -> None:
    """SIGKILL the group ``pid`` (and the process, should the group be gone)."""
    for fn in (os.killpg, os.kill):
        try:
            fn(pid, signal.SIGKILL)
        except OSError:
            pass


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

    Never a link, never a FIFO or a device, never more than LIMIT bytes.
    """
    try:
        fd = os.open(path, OPEN)
    except OSError:
        return None
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
    """One process group guarded: the times that kill it, and where its lease is read."""

    __slots__ = ("kill_at", "where", "epoch", "margin", "every", "lease_at", "next_read", "ident", "seen", "since")

    def __init__(
        self,
        kill_at: float,
        where: Where = None,
        epoch: int = 0,
        margin: float = 0.0,
        every: float = INF,
        since: float = 0.0,
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
        self.since = since  # when it was registered


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
    """The program's state: the groups guarded, the database readers, what is left of the last line read.

    ``stdin``: the supervisor's end (a socket); ``paths``: where psycopg is found.
    """

    def __init__(self, stdin: int = 0, paths: list[str] | None = None) -> None:
        self.stdin = stdin
        self.paths = paths or []
        self.live: dict[int, Group] = {}  # pid -> its group
        self.rows: dict[str, Rows] = {}  # url -> its reader
        self.rest = b""
        self.wake_r, self.wake_w = os.pipe()  # a reader's news wakes the loop
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def handle(self, line: bytes) -> None:
        """One message of the supervisor (the lines are told in :class:`jobctl.guardian.Guardian`)."""
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
                path = bytes.fromhex(fields[5].decode())
                where: Where = path
                if path[:1] == b"\0":
                    import json

                    row = json.loads(path[1:])
                    url, job_id, query = str(row["url"]), str(row["id"]), str(row["query"])
                    if url not in self.rows:
                        self.rows[url] = Rows(url, query, self.wake_w, self.paths)
                    where = (url, job_id)
                watch = (where, int(fields[2]), float(fields[3]), float(fields[4]))
        except (IndexError, ValueError, KeyError, TypeError):
            return
        if op == b"+":
            if watch is None:
                self.live[pid] = Group(at)
            else:
                self.live[pid] = Group(at, *watch, since=time.monotonic())
        elif op == b"=" and pid in self.live:
            self.live[pid].kill_at = at
        elif op == b"-":
            self.live.pop(pid, None)

    def settle(self) -> bool:
        """Every message that came first, then a kill of every group whose time has come.

        A group whose ``-PID`` is written may be reaped and its id reused: so
        the messages first. False: end of file, the supervisor is gone.
        """
        while select.select([self.stdin], [], [], 0)[0]:
            chunk = os.read(self.stdin, 65536)
            if not chunk:
                return False
            *lines, self.rest = (self.rest + chunk).split(b"\n")
            for line in lines:
                self.handle(line)
        now = time.monotonic()
        for pid, g in list(self.live.items()):
            if min(g.kill_at, g.lease_at) <= now:
                kill(pid)
                del self.live[pid]
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
        wake = min((min(g.kill_at, g.lease_at, g.next_read) for g in self.live.values()), default=None)
        timeout = None if wake is None else max(0.0, wake - time.monotonic())
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
        """Until the supervisor is gone; then every group still registered is killed.

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
        for pid in self.live:
            kill(pid)


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
        signal.signal(sig, signal.SIG_IGN)
    Guard(0, paths).run()
