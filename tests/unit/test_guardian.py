"""The guardian's program (jobctl.guardian.program), in this process: its parsing, its reads, its kills.

The guardian as a process beside a stopped or dead worker is tested in
tests/worker (test_stopped_supervisor.py, test_wake.py, test_secrets.py);
here each part of its program is held to what it must do, and the program
to what it may import: the standard library only, so every start stays cheap.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobctl import FileStore, Record
from jobctl.guardian import BOOTSTRAP, PROGRAM_DIR, program, start_message
from jobctl.guardian.program import INF, Group, Guard, instant, lease, read


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_until(check: Callable[[], bool], limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"waited {limit} s for {what}"
        time.sleep(0.01)


def test_the_program_imports_the_standard_library_only() -> None:
    tree = ast.parse(Path(program.__file__).read_text())
    names = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    names.discard("psycopg")  # a lease in a database row: found through the supervisor's path, imported then only
    assert names and names <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))  # nothing of jobctl


def test_its_start_imports_neither_jobctl_nor_typing() -> None:
    """What every start pays for: the bootstrap's line, without site, imports no module it could do without."""
    show = BOOTSTRAP.replace("program.main(sys.argv[2:])", "print(' '.join(sorted(sys.modules)), sys.path)")
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", show, PROGRAM_DIR], capture_output=True, text=True, check=True
    ).stdout
    modules, _, path = out.partition(" [")
    loaded = set(modules.split())
    assert "program" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("jobctl", "typing", "json", "threading", "dataclasses")}
    assert PROGRAM_DIR not in path  # the program's directory leaves the path once it is imported


_UTC = timezone.utc


@pytest.mark.parametrize(
    ("text", "when"),
    [
        ("2024-02-29T23:59:59Z", datetime(2024, 2, 29, 23, 59, 59, tzinfo=_UTC)),
        ("1970-01-01T00:00:00Z", datetime(1970, 1, 1, tzinfo=_UTC)),
        ("2031-07-04T12:30:05.25z", datetime(2031, 7, 4, 12, 30, 5, 250000, tzinfo=_UTC)),
        ("2000-03-01T00:00:00.000001+05:30", datetime(2000, 3, 1, 0, 0, 0, 1, tzinfo=timezone(timedelta(hours=5.5)))),
        ("1999-12-31T23:00:00-01:00", datetime(1999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-1)))),
        ("2100-02-28T08:00:00.5Z", datetime(2100, 2, 28, 8, 0, 0, 500000, tzinfo=_UTC)),
        ("2024-02-29 23:59:59Z", datetime(2024, 2, 29, 23, 59, 59, tzinfo=_UTC)),  # RFC 3339: a space may part them
    ],
)
def test_an_rfc_3339_time_is_read_as_the_instant_it_names(text: str, when: datetime) -> None:
    # The instants written out, not datetime.fromisoformat: before 3.11 it refuses a fraction of 1 or 2 digits.
    assert instant(text) == pytest.approx(when.timestamp(), abs=1e-6)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2024-02-29",
        "2024-02-29T23:59:59",
        "2024-02-29T23:59:59+0530",
        "\uff12\uff1024-02-29T23:59:59Z",  # digits, but not ASCII ones
    ],
)
def test_anything_else_is_no_time(text: str) -> None:
    assert instant(text) is None


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "store")


def claimed(store: FileStore, ttl: float = 30) -> tuple[Record, bytes]:
    job_id = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    rec = store.claim(job_id, "tester", ttl)
    path = store.lease_source(job_id)
    assert isinstance(path, str)
    return rec, os.fsencode(path)


def test_the_lease_is_read_from_a_record_as_jobctl_writes_it_and_from_any_other_layout(store: FileStore) -> None:
    rec, path = claimed(store)
    data = Path(os.fsdecode(path)).read_bytes()
    assert rec.lease.expires_at is not None
    expected = (rec.lease.epoch, rec.lease.expires_at.timestamp())
    assert lease(data) == pytest.approx(expected)
    compact = json.dumps(json.loads(data), separators=(",", ":")).encode()  # not laid out as jobctl writes it
    assert compact.find(program.LEASE) < 0 and lease(compact) == pytest.approx(expected)


def test_a_lease_never_held_without_an_end_or_unreadable_is_told_apart(store: FileStore) -> None:
    pending = Path(store.path(store.submit(Record(kind="shell", spec={"argv": ["true"]})))).read_bytes()
    assert lease(pending) == (0, 0.0)  # never held: its end is 1970
    for unset in (None, ""):
        assert lease(json.dumps({"lease": {"epoch": 3, "expires_at": unset}}).encode()) == (3, -INF)
    for bad in (b"", b"{", b'{"lease": {"epoch": "1"}}', b'{"lease": {"epoch": 1, "expires_at": "soon"}}'):
        assert lease(bad) is None


def test_only_a_regular_file_within_the_limit_is_read(
    store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, path = claimed(store)
    got = read(path)
    assert got is not None and got[0] == Path(os.fsdecode(path)).read_bytes()
    link = tmp_path / "link"
    link.symlink_to(os.fsdecode(path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for other in (link, fifo, tmp_path, tmp_path / "missing"):
        assert read(os.fsencode(other)) is None, other  # a FIFO is not even waited on
    monkeypatch.setattr(program, "LIMIT", 64)
    assert read(path) is None


def test_a_link_swapped_in_for_jobs_is_not_followed(store: FileStore, tmp_path: Path) -> None:
    # Whoever may rename in the store's root moves jobs/ aside and links a directory of their own
    # there, holding a record of another epoch: read through the link, it got the job killed.
    _, path = claimed(store)
    jobs = Path(store.jobs_dir)
    forged = tmp_path / "forged"
    forged.mkdir()
    name = os.path.basename(os.fsdecode(path))
    (forged / name).write_bytes((jobs / name).read_bytes().replace(b'"epoch": 1,', b'"epoch": 9,'))
    jobs.rename(tmp_path / "moved")
    jobs.symlink_to(forged)
    assert read(path) is None
    os.rename(tmp_path / "moved" / name, tmp_path / "moved" / "x")  # the store's root itself is followed:
    assert read(os.fsencode(tmp_path / "moved" / "x")) is not None  # a path through no link below it is read


def test_a_file_read_just_after_its_change_is_read_again(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    _, path = claimed(store)
    fresh = read(path)
    assert fresh is not None and fresh[1] is None  # written just now: its times cannot stand for its bytes
    monkeypatch.setattr(program, "RACY", -1.0)  # as if the last change were long past
    settled = read(path)
    assert settled is not None and settled[1] == program.ident(os.stat(path))


def test_a_look_at_the_record_sets_the_kill_time_and_rereads_only_a_changed_file(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, path = claimed(store, ttl=30)
    monkeypatch.setattr(program, "RACY", -1.0)  # as if the last change were long past: its identity stands
    reads: list[bytes] = []

    def counted(where: bytes) -> tuple[bytes, tuple[int, int, int, int, int] | None] | None:
        reads.append(where)
        return read(where)

    monkeypatch.setattr(program, "read", counted)
    guard = Guard(stdin=-1)
    g = Group(INF, path, rec.lease.epoch, 0.5, 0.25, time.monotonic())
    guard.look(g)
    assert rec.lease.expires_at is not None
    left = rec.lease.expires_at.timestamp() - time.time()
    assert g.lease_at - time.monotonic() == pytest.approx(left - 0.5, abs=0.5)
    assert g.next_read > time.monotonic()
    guard.look(g)
    assert len(reads) == 1  # the same file: a stat, no read
    store.renew(rec.id, rec.lease.epoch, 30)  # a new inode renamed over the record
    guard.look(g)
    assert len(reads) == 2
    other = Group(INF, path, rec.lease.epoch + 1, 0.5, 0.25, time.monotonic())
    guard.look(other)
    assert other.lease_at == -INF  # another epoch: somebody claimed the job


class Supervisor:
    """A :class:`Guard` in this process, and the supervisor's end of its socket: starts sent as a worker sends them."""

    def __init__(self) -> None:
        self.ours, theirs = socket.socketpair()
        self.guard = Guard(stdin=theirs.detach())
        self.chans: list[socket.socket] = []

    def send(self, data: bytes, fds: list[int] | None = None) -> None:
        if fds:
            socket.send_fds(self.ours, [data], fds)
        else:
            self.ours.sendall(data)

    def start(self, argv: list[str], at: float, *, split: int = 0) -> socket.socket:
        """Send a start of ``argv`` (its output to /dev/null), to be gone by ``at``; returns its channel."""
        chan, theirs = socket.socketpair()
        out = os.open(os.devnull, os.O_WRONLY)
        message = start_message(argv, shutil.which(argv[0]) or argv[0], {"PATH": os.defpath}, None, at, None, "co")
        try:
            self.send(message[: split or len(message)], [theirs.fileno(), out])
            if split:
                assert self.guard.settle()  # half a message: nothing started yet
                assert self.guard.live == {}
                self.send(message[split:])
        finally:
            theirs.close()
            os.close(out)
        assert self.guard.settle()
        self.chans.append(chan)
        return chan

    def close(self) -> None:
        self.ours.close()
        guard = self.guard
        for pid, g in guard.live.items():
            program.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            if g.chan is not None:
                g.chan.close()
        for chan in self.chans:
            chan.close()
        if guard.sock is not None:
            guard.sock.close()
        for fd in (guard.wake_r, guard.wake_w, guard.null, guard.home):
            os.close(fd)


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    sup = Supervisor()
    yield sup
    sup.close()


def answer(chan: socket.socket) -> tuple[bytes, list[int]]:
    """The guard's first line on a start's channel, and the descriptors with it."""
    chan.settimeout(10)
    data, fds = program.receive(chan, 256, 1)
    return data.split(b"\n")[0], fds


def pid_of(chan: socket.socket) -> int:
    line, fds = answer(chan)
    assert line[:1] == b"P" and len(fds) == 1, line  # the pid, and a pidfd of that child
    os.close(fds[0])
    return int(line[1:])


def status_on(chan: socket.socket, sup: Supervisor) -> int:
    """The wait status the guard tells once the child ended and was reaped (it settles until then)."""
    deadline = time.monotonic() + 10
    while not select.select([chan], [], [], 0.02)[0]:
        assert time.monotonic() < deadline, "no status"
        assert sup.guard.settle()
    line = chan.recv(64).split(b"\n")[0]
    assert line[:1] == b"X", line
    return int(line[1:])


def test_a_child_is_started_in_its_own_group_and_its_end_told_after_its_group_is_killed(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    left = tmp_path / "left"
    # The leader leaves a process of its group behind: it must not outlive the leader's end.
    script = f"sleep 30 & echo $! > {left}; exit 3"
    chan = supervisor.start(["sh", "-c", script], time.monotonic() + 60)
    pid = pid_of(chan)
    status = status_on(chan, supervisor)
    assert os.waitstatus_to_exitcode(status) == 3
    assert pid not in supervisor.guard.live  # reaped: never signalled again
    straggler = int(left.read_text())
    wait_until(lambda: not alive(straggler), 5, "the rest of the group to be killed")
    assert chan.recv(64) == b""  # the channel is closed once told


def test_a_group_whose_time_has_come_is_killed_and_no_other(supervisor: Supervisor) -> None:
    now = time.monotonic()
    doomed = supervisor.start(["sleep", "30"], now + 60)
    spared = supervisor.start(["sleep", "30"], now + 60)
    pid, other = pid_of(doomed), pid_of(spared)
    supervisor.send(f"={pid} {now - 1!r}\n".encode())  # a recall moved its time back
    assert status_on(doomed, supervisor) == signal.SIGKILL  # killed by the signal, no exit code
    assert other in supervisor.guard.live and alive(other)
    supervisor.send(f"!{other} {int(signal.SIGTERM)}\n".encode())  # a stop, through the parent
    assert os.waitstatus_to_exitcode(status_on(spared, supervisor)) == -signal.SIGTERM


def test_a_start_whose_time_has_come_starts_nothing(supervisor: Supervisor) -> None:
    chan = supervisor.start(["sleep", "30"], time.monotonic() - 0.001)
    assert answer(chan) == (b"L", [])
    assert supervisor.guard.live == {}


def test_a_command_that_cannot_start_is_told_with_its_errno(supervisor: Supervisor, tmp_path: Path) -> None:
    chan = supervisor.start([str(tmp_path / "nonexistent")], time.monotonic() + 60)
    assert answer(chan) == (b"E%d" % errno.ENOENT, [])
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    chan = supervisor.start([str(plain)], time.monotonic() + 60)
    assert answer(chan) == (b"E%d" % errno.EACCES, [])
    assert supervisor.guard.live == {}


def test_a_signal_for_a_child_already_reaped_is_never_sent(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    chan = supervisor.start(["true"], time.monotonic() + 60)
    pid = pid_of(chan)
    status_on(chan, supervisor)
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(program, "kill", lambda pid, sig: sent.append((pid, sig)))
    supervisor.send(f"!{pid} 9\n={pid} {time.monotonic() - 1!r}\n".encode())  # its id may be another's now
    assert supervisor.guard.settle()
    assert sent == []


def test_a_message_split_across_reads_and_a_malformed_line_are_handled(supervisor: Supervisor) -> None:
    supervisor.send(b"=x y\n=12\n!\nS12\n")  # and a start whose size runs past what came: waits for the rest
    assert supervisor.guard.settle() and supervisor.guard.live == {}
    supervisor.guard.rest = b""  # (that start would eat the next message: drop it as a reader would)
    chan = supervisor.start(["sleep", "30"], time.monotonic() + 60, split=9)
    assert pid_of(chan) in supervisor.guard.live


def test_the_environment_comes_on_the_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBCTL_TEST_SECRET", raising=False)
    guard = Guard(stdin=-1)
    for fd in (guard.wake_r, guard.wake_w, guard.null, guard.home):
        os.close(fd)
    guard.handle(b"E" + json.dumps({"JOBCTL_TEST_SECRET": "s3"}).encode().hex().encode())
    assert os.environ["JOBCTL_TEST_SECRET"] == "s3"
    guard.handle(b"Enot hex")  # ignored, not fatal


def test_when_the_supervisor_is_gone_every_group_left_is_killed(supervisor: Supervisor) -> None:
    chan = supervisor.start(["sleep", "30"], time.monotonic() + 60)
    pid = pid_of(chan)
    supervisor.ours.close()
    supervisor.guard.run()  # returns at end of file
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGKILL
    supervisor.guard.live.pop(pid).chan.close()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("said", "why"),
    [(b"S\n", None), (b"X\n", "not that it was sealed"), (b"", "ended before it was sealed")],
)
def test_a_supervisor_waits_for_the_guardian_to_say_it_is_sealed(said: bytes, why: str | None) -> None:
    """No job may start, and no secret go out, before the guardian is non-dumpable: it says so first."""
    import socket

    from jobctl.guardian import _sealed

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(said)
        theirs.shutdown(socket.SHUT_WR)
        if why is None:
            _sealed(ours)
        else:
            with pytest.raises(OSError, match=why):
                _sealed(ours)
