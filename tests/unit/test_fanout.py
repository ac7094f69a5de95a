"""jobctl.fanout: shares done in forked children, and every failure of a child done again here."""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def answers(got: list[tuple[int, Sequence[int], Any]]) -> list[tuple[list[int], Any]]:
    """share_out's pieces in their order, as (piece, answer)."""
    return [(list(piece), answer) for _, piece, answer in sorted(got, key=lambda item: item[0])]


def test_pieces_are_contiguous_and_shared_among_processes() -> None:
    parent = os.getpid()
    items = list(range(40))

    def each(piece: Sequence[int]) -> list[int]:
        time.sleep(0.02)  # long enough that every process takes pieces
        return [os.getpid(), *(n * n for n in piece)]

    got = list(fanout.share_out(items, each, count=3))
    assert sorted(k for k, _, _ in got) == list(range(len(got)))  # each piece once
    pieces = answers(got)
    assert [n for piece, _ in pieces for n in piece] == items  # contiguous, in order, the whole
    assert len(pieces) == min(3 * fanout.PIECES, len(items))
    assert [answer[1:] for _, answer in pieces] == [[n * n for n in piece] for piece, _ in pieces]
    pids = {answer[0] for _, answer in pieces}
    assert parent in pids and len(pids) >= 2, "no child took a piece"
    assert no_children_left()


def test_a_childs_answers_are_taken_between_this_processs_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = os.getpid()
    monkeypatch.setattr(fanout, "PIECES", 6)

    def each(piece: Sequence[int]) -> int:
        # The child does several pieces while this process does its first, and leaves some for it.
        time.sleep(0.3 if os.getpid() == parent else 0.05)
        return os.getpid()

    order = [answer for _, _, answer in fanout.share_out(list(range(12)), each, count=2)]
    assert order[0] == parent
    assert order[1] != parent, "the child's answers waited for this process's last piece"
    assert no_children_left()


def test_one_process_or_too_little_work_forks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def each(share: Sequence[int]) -> tuple[int, int]:
        return os.getpid(), len(share)

    assert list(fanout.share_out(list(range(5)), each, count=1)) == [(0, [0, 1, 2, 3, 4], (os.getpid(), 5))]
    monkeypatch.setattr(fanout, "MIN_SHARE", 3)
    assert list(fanout.share_out(list(range(5)), each, count=4)) == [(0, [0, 1, 2, 3, 4], (os.getpid(), 5))]


@pytest.mark.parametrize("how", ["raises", "is killed", "sends what marshal cannot carry", "exits 0 silently"])
def test_a_failing_child_has_its_pieces_done_here(how: str) -> None:
    parent = os.getpid()

    def each(piece: Sequence[int]) -> object:
        if os.getpid() != parent:
            if how == "raises":
                raise RuntimeError("boom")
            if how == "is killed":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "exits 0 silently":
                os._exit(0)
            return [object()]
        time.sleep(0.02)  # the children take pieces meanwhile, and fail them
        return [os.getpid(), sum(piece)]

    got = answers(list(fanout.share_out(list(range(6)), each, count=3)))
    assert got == [([n], [parent, n]) for n in range(6)]
    assert no_children_left()


def test_only_whole_answers_of_pieces_not_yet_answered_are_believed() -> None:
    r, w = os.pipe()
    child = fanout._Child(os.getpid(), r)

    def frame(value: object) -> bytes:
        blob = marshal.dumps(value)
        return len(blob).to_bytes(8, "little") + blob

    done = bytearray(4)
    os.write(w, frame((1, "one")) + frame((2, "two"))[:-1])  # the second not whole yet
    assert child.answers(done, block=False) == [(1, "one")]
    os.write(w, frame((2, "two"))[-1:] + frame((2, "again")) + frame((3, "three")))
    assert child.answers(done, block=False) == [(2, "two")]  # a piece answered twice: nothing more believed
    assert not child.trusted and list(done) == [0, 1, 1, 0]
    for bad in ((9, "out of range"), [0, "a list"], (0,), ("0", "a string index")):
        r2, w2 = os.pipe()
        other = fanout._Child(os.getpid(), r2)
        os.write(w2, frame(bad) + frame((0, "after")))
        os.close(w2)
        assert other.answers(bytearray(4), block=True) == []
        os.close(r2)
    r3, w3 = os.pipe()
    garbled = fanout._Child(os.getpid(), r3)
    os.write(w3, (5).to_bytes(8, "little") + b"\xff" * 5 + frame((0, "after")))  # five bytes, not marshal
    os.close(w3)
    assert garbled.answers(bytearray(4), block=True) == []
    os.close(r3)
    os.close(w)
    os.close(r)


def test_a_child_keeps_no_descriptor_but_those_it_is_given(tmp_path: Path) -> None:
    kept = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    locked = os.open(tmp_path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(locked, fcntl.LOCK_EX)
    parent = os.getpid()

    released: list[int] = []

    def each(piece: Sequence[int]) -> list[int]:
        if os.getpid() == parent:
            # Let the lock go here (closing the last descriptor of ours) while the child still runs:
            # had the child kept its copy of the descriptor, the lock would stay held.
            if not released:
                released.append(1)
                os.close(locked)
                time.sleep(0.3)  # the child takes the other piece meanwhile
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
        got = answers(list(fanout.share_out([1, 2], each, (kept,), count=2)))
    finally:
        os.close(kept)
    # Which process took which piece is the queue's to say: one was this one's, the other the child's.
    mine, theirs = sorted((answer for _, answer in got), key=lambda answer: answer != [-1])
    assert mine == [-1]
    assert kept in theirs and locked not in theirs
    # the kept directory, the queue of pieces, the child's pipe, and the descriptor listdir opened: nothing else
    assert len(theirs) == 4, theirs


def test_a_process_with_threads_does_everything_itself() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        got = list(fanout.share_out(list(range(4)), lambda share: [os.getpid(), len(share)], count=2))
    finally:
        stop.set()
        thread.join()
    assert got == [(0, [0, 1, 2, 3], [os.getpid(), 4])]


def test_a_failure_here_ends_the_children_at_once() -> None:
    parent = os.getpid()

    def each(piece: Sequence[int]) -> list[int]:
        if os.getpid() != parent:
            time.sleep(60)
            return []
        time.sleep(0.05)  # the children take their pieces first
        raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        list(fanout.share_out(list(range(3)), each, count=3))
    assert time.monotonic() - started < 10, "the children were waited for, not ended"
    assert no_children_left()


def test_a_failure_in_the_callers_loop_ends_the_children_at_once() -> None:
    parent = os.getpid()

    def each(piece: Sequence[int]) -> int:
        if os.getpid() != parent:
            time.sleep(60)
        return piece[0]

    started = time.monotonic()
    with pytest.raises(RuntimeError), contextlib.closing(fanout.share_out(list(range(30)), each, count=3)) as got:
        for _ in got:
            raise RuntimeError("the caller's own")
    assert time.monotonic() - started < 10, "the children were waited for, not ended"
    assert no_children_left()


def test_processes_counts_cpus_and_takes_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 1 <= fanout.processes() <= fanout.MAX_PROCESSES
    assert fanout.processes() == min(len(os.sched_getaffinity(0)), fanout.MAX_PROCESSES)
    monkeypatch.setenv(fanout.PROCESSES_ENV, "3")
    assert fanout.processes() == 3
    # "²" and "٣" are digits to str.isdigit() (int() refuses the first, takes the second as 3): not whole numbers.
    for ignored in ("0", "-1", "many", str(fanout.MAX_PROCESSES + 1), "", "²", "٣", " 3"):
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


def test_the_exit_waits_for_work_aside_but_not_for_work_detached(tmp_path: Path) -> None:
    # aside(at_exit=False): the process may end while the child works (the listing part's writer);
    # settle() still waits for it, so that this process reads what it wrote.
    slow = tmp_path / "slow"

    def work() -> None:
        time.sleep(0.6)
        slow.write_text("done")

    assert fanout.aside(work, at_exit=False)
    began = time.monotonic()
    fanout._settle_at_exit()
    assert time.monotonic() - began < 0.4 and not slow.exists()
    fanout.settle()
    assert slow.read_text() == "done" and no_children_left()
    assert fanout.aside(work)  # the default: the exit waits for it
    slow.unlink()
    fanout._settle_at_exit()
    assert slow.read_text() == "done" and no_children_left()


def test_work_aside_is_declined_by_a_process_with_threads() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not fanout.aside(lambda: None)
    finally:
        stop.set()
        thread.join()
