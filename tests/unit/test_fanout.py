"""jobctl.fanout: shares done in forked children, and every failure of a child done again here."""

from __future__ import annotations

import fcntl
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from jobctl import fanout


@pytest.fixture(autouse=True)
def small_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.delenv(fanout.PROCESSES_ENV, raising=False)


def no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_shares_are_contiguous_in_order_and_done_by_children() -> None:
    parent = os.getpid()
    items = list(range(10))

    def each(share: Sequence[int]) -> list[int]:
        return [os.getpid(), *(n * n for n in share)]

    got = fanout.share_out(items, each, count=3)
    assert [list(share) for share, _ in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [answer[1:] for _, answer in got] == [[n * n for n in share] for share, _ in got]
    pids = [answer[0] for _, answer in got]
    assert pids[0] == parent
    assert parent not in pids[1:] and len(set(pids)) == 3
    assert no_children_left()


def test_one_process_or_too_little_work_forks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def each(share: Sequence[int]) -> tuple[int, int]:
        return os.getpid(), len(share)

    assert fanout.share_out(list(range(5)), each, count=1) == [([0, 1, 2, 3, 4], (os.getpid(), 5))]
    monkeypatch.setattr(fanout, "MIN_SHARE", 3)
    assert fanout.share_out(list(range(5)), each, count=4) == [([0, 1, 2, 3, 4], (os.getpid(), 5))]


@pytest.mark.parametrize("how", ["raises", "is killed", "sends what marshal cannot carry", "exits 0 silently"])
def test_a_failing_child_has_its_share_done_here(how: str) -> None:
    parent = os.getpid()

    def each(share: Sequence[int]) -> object:
        if os.getpid() != parent:
            if how == "raises":
                raise RuntimeError("boom")
            if how == "is killed":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "exits 0 silently":
                os._exit(0)
            return [object()]
        return [os.getpid(), sum(share)]

    got = fanout.share_out(list(range(6)), each, count=3)
    assert got == [([0, 1], [parent, 1]), ([2, 3], [parent, 5]), ([4, 5], [parent, 9])]
    assert no_children_left()


def test_a_child_keeps_no_descriptor_but_those_it_is_given(tmp_path: Path) -> None:
    kept = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    locked = os.open(tmp_path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(locked, fcntl.LOCK_EX)
    parent = os.getpid()

    def each(share: Sequence[int]) -> list[int]:
        if os.getpid() == parent:
            # Let the lock go here (closing the last descriptor of ours) while the child still runs:
            # had the child kept its copy of the descriptor, the lock would stay held.
            os.close(locked)
            time.sleep(0.2)
            other = os.open(tmp_path / "lock", os.O_RDWR)
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(other)
            return [-1]
        # re-taking it below must not find the parent's lock kept alive by this child
        time.sleep(0.5)
        return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))

    try:
        (_, mine), (_, theirs) = fanout.share_out([1, 2], each, (kept,), count=2)
    finally:
        os.close(kept)
    assert mine == [-1]
    assert kept in theirs and locked not in theirs
    # the kept directory, the child's pipe, and the descriptor listdir itself opened: nothing else
    assert len(theirs) == 3, theirs


def test_a_process_with_threads_does_everything_itself() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        got = fanout.share_out(list(range(4)), lambda share: [os.getpid(), len(share)], count=2)
    finally:
        stop.set()
        thread.join()
    assert got == [([0, 1, 2, 3], [os.getpid(), 4])]


def test_a_failure_here_ends_the_children_at_once() -> None:
    parent = os.getpid()

    def each(share: Sequence[int]) -> list[int]:
        if os.getpid() != parent:
            time.sleep(60)
            return []
        raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        fanout.share_out(list(range(3)), each, count=3)
    assert time.monotonic() - started < 10, "the children were waited for, not ended"
    assert no_children_left()


def test_processes_counts_cpus_and_takes_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 1 <= fanout.processes() <= fanout.MAX_PROCESSES
    assert fanout.processes() == min(len(os.sched_getaffinity(0)), fanout.MAX_PROCESSES)
    monkeypatch.setenv(fanout.PROCESSES_ENV, "3")
    assert fanout.processes() == 3
    for ignored in ("0", "-1", "many", str(fanout.MAX_PROCESSES + 1), ""):
        monkeypatch.setenv(fanout.PROCESSES_ENV, ignored)
        assert fanout.processes() == min(len(os.sched_getaffinity(0)), fanout.MAX_PROCESSES)


def test_work_aside_runs_in_a_child_and_settle_waits_for_it(tmp_path: Path) -> None:
    parent = os.getpid()
    out = tmp_path / "out"

    def work() -> None:
        time.sleep(0.3)
        out.write_text(str(os.getpid()))

    assert fanout.aside(work)
    assert not out.exists()  # this process went on
    fanout.settle()
    assert out.read_text() != str(parent)
    assert no_children_left()


def test_work_aside_is_declined_by_a_process_with_threads() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not fanout.aside(lambda: None)
    finally:
        stop.set()
        thread.join()
