"""The guardian's program (jobctl.guardian.program), in this process: its parsing, its reads, its kills.

The guardian as a process beside a stopped or dead worker is tested in
tests/worker (test_stopped_supervisor.py, test_wake.py, test_secrets.py);
here each part of its program is held to what it must do, and the program
to what it may import: the standard library only, so every start stays cheap.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobctl import FileStore, Record
from jobctl.guardian import BOOTSTRAP, PROGRAM_DIR, program
from jobctl.guardian.program import INF, Group, Guard, instant, lease, read


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


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    """A process group to guard (its own session), killed at the end whatever the test did."""
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def pipe_guard() -> tuple[Guard, int]:
    r, w = os.pipe()
    return Guard(stdin=r), w


def test_a_group_whose_time_has_come_is_killed_and_no_other(group: subprocess.Popen[bytes]) -> None:
    guard, w = pipe_guard()
    now = time.monotonic()
    os.write(w, f"+{group.pid} {now + 60!r}\n".encode())
    assert guard.settle() and group.pid in guard.live
    assert group.poll() is None
    os.write(w, f"={group.pid} {now - 1!r}\n".encode())  # a recall moved its time back
    assert guard.settle()
    assert group.wait(10) == -signal.SIGKILL and group.pid not in guard.live
    os.close(w)
    assert not guard.settle()  # end of file: the supervisor is gone


def test_a_group_forgotten_is_never_signalled(group: subprocess.Popen[bytes]) -> None:
    guard, w = pipe_guard()
    os.write(w, f"+{group.pid} {time.monotonic() - 1!r}\n-{group.pid}\n".encode())  # both before any kill
    assert guard.settle() and guard.live == {}
    with pytest.raises(subprocess.TimeoutExpired):
        group.wait(0.3)  # alive


def test_a_line_split_across_reads_and_a_malformed_one_are_handled(group: subprocess.Popen[bytes]) -> None:
    guard, w = pipe_guard()
    line = f"+{group.pid} {time.monotonic() + 60!r} 1 0.5 0.25 {os.fsencode('/nowhere').hex()}\n".encode()
    os.write(w, b"+x y\n+12\n" + line[:7])
    assert guard.settle() and guard.live == {}
    os.write(w, line[7:])
    assert guard.settle()
    g = guard.live[group.pid]
    assert (g.where, g.epoch, g.margin, g.every, g.next_read) == (b"/nowhere", 1, 0.5, 0.25, -INF)


def test_the_environment_comes_on_the_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBCTL_TEST_SECRET", raising=False)
    guard, _ = pipe_guard()
    guard.handle(b"E" + json.dumps({"JOBCTL_TEST_SECRET": "s3"}).encode().hex().encode())
    assert os.environ["JOBCTL_TEST_SECRET"] == "s3"
    guard.handle(b"Enot hex")  # ignored, not fatal


def test_when_the_supervisor_is_gone_every_group_left_is_killed(group: subprocess.Popen[bytes]) -> None:
    guard, w = pipe_guard()
    os.write(w, f"+{group.pid} {time.monotonic() + 60!r}\n".encode())
    os.close(w)
    guard.run()
    assert group.wait(10) == -signal.SIGKILL


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
