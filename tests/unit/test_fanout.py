"""jobctl.fanout: shares done in forked children, and every failure of a child done again here.

share_stream (its tests last): items that come in batches, the children at work before the last one comes.
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jobctl import fanout


@pytest.fixture(autouse=True)
def small_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.setattr(fanout, "STREAM_PIECE", 5)
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


def failing(how: str) -> object:
    """A piece failing ``how`` in a child: it raises, is killed, exits 0 silently, or answers what marshal refuses."""
    if how == "raises":
        raise RuntimeError("boom")
    if how == "is killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exits 0 silently":
        os._exit(0)
    return [object()]  # marshal refuses it: nothing sent


@pytest.mark.parametrize("how", ["raises", "is killed", "sends what marshal cannot carry", "exits 0 silently"])
def test_a_failing_child_has_its_pieces_done_here(how: str) -> None:
    parent = os.getpid()

    def each(piece: Sequence[int]) -> object:
        if os.getpid() != parent:
            return failing(how)
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


# -- share_stream -------------------------------------------------------------------------------


def batches(n: int, size: int, pause: float = 0.0) -> Iterator[list[int]]:
    for start in range(0, n, size):
        if pause:
            time.sleep(pause)
        yield list(range(start, min(start + size, n)))


def in_order(got: list[tuple[int, Sequence[int], Any]]) -> list[tuple[list[int], Any]]:
    assert sorted(k for k, _, _ in got) == list(range(len(got)))  # each piece once
    return [(list(piece), answer) for _, piece, answer in sorted(got, key=lambda item: item[0])]


@pytest.mark.timeout(60)
def test_streamed_pieces_are_whole_contiguous_and_shared_among_processes() -> None:
    parent = os.getpid()

    def each(piece: Sequence[int]) -> list[int]:
        time.sleep(0.02)  # long enough that every process takes pieces
        return [os.getpid(), *(n * n for n in piece)]

    pieces = in_order(list(fanout.share_stream(batches(63, 7), each, count=3)))
    assert [n for piece, _ in pieces for n in piece] == list(range(63))  # in order, the whole
    assert [len(piece) for piece, _ in pieces] == [5] * 12 + [3]  # cut as they come, the last fewer
    assert [answer[1:] for _, answer in pieces] == [[n * n for n in piece] for piece, _ in pieces]
    pids = {answer[0] for _, answer in pieces}
    assert parent in pids and len(pids) >= 2, "no child took a piece"
    assert no_children_left()


@pytest.mark.timeout(60)
def test_the_children_answer_while_the_batches_still_come() -> None:
    parent = os.getpid()
    events: list[str] = []

    def slow_batches() -> Iterator[list[int]]:
        for batch in batches(100, 10):
            yield batch
            time.sleep(0.05)  # a directory read slowly: the children are at work meanwhile
        events.append("last batch")

    def each(piece: Sequence[int]) -> int:
        return os.getpid()

    for _, _, pid in fanout.share_stream(slow_batches(), each, count=2):
        events.append("parent" if pid == parent else "child")
    assert "child" in events[: events.index("last batch")], events
    assert no_children_left()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["raises", "is killed", "exits 0 silently", "answers garbage"])
def test_a_failing_streamed_child_has_its_pieces_done_here(how: str) -> None:
    parent = os.getpid()

    def each(piece: Sequence[int]) -> object:
        if os.getpid() != parent:
            return failing(how)
        time.sleep(0.02)  # the children take pieces meanwhile, and fail them
        return [os.getpid(), sum(piece)]

    got = in_order(list(fanout.share_stream(batches(30, 4, 0.01), each, count=3)))
    assert got == [(list(range(k, k + 5)), [parent, sum(range(k, k + 5))]) for k in range(0, 30, 5)]
    assert no_children_left()


@pytest.mark.timeout(60)
def test_pieces_the_queue_cannot_take_are_done_here(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = os.getpid()

    def each(piece: Sequence[str]) -> list[Any]:
        if os.getpid() != parent:
            time.sleep(0.3)  # far behind: the queue fills
        return [os.getpid(), "".join(piece)]

    # Pieces of 40 KB each, a queue of the least buffer the system gives: most find no room and are
    # done here at once rather than waited for.
    monkeypatch.setattr(fanout, "_QUEUE_BUFFER", 1)
    words = [f"{n:08d}" * 1000 for n in range(40)]
    got = in_order(list(fanout.share_stream(([w] for w in words), each, count=2)))
    assert [answer[1] for _, answer in got] == ["".join(words[k : k + 5]) for k in range(0, 40, 5)]
    assert sum(answer[0] == parent for _, answer in got) >= 4
    assert no_children_left()


@pytest.mark.timeout(60)
def test_a_piece_too_large_for_one_message_is_done_here_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = os.getpid()
    events: list[Any] = []

    def one_by_one() -> Iterator[list[str]]:
        for n in range(20):
            yield [f"{n:08d}" * 100]
        events.append("last batch")

    def each(piece: Sequence[str]) -> list[Any]:
        return [os.getpid(), "".join(piece)]

    monkeypatch.setattr(fanout, "_MAX_MESSAGE", 1000)  # pieces of 4 KB: none fits
    for _, _, answer in fanout.share_stream(one_by_one(), each, count=2):
        events.append(answer)
    # Never sent (a child would read it cut short, fail, and have it done here only at the end).
    assert events[-1] == "last batch"
    assert [answer[1] for answer in events[:-1]] == [
        "".join(f"{n:08d}" * 100 for n in range(k, k + 5)) for k in (0, 5, 10, 15)
    ]
    assert {answer[0] for answer in events[:-1]} == {parent}
    assert no_children_left()


def test_one_process_does_each_piece_as_it_is_cut() -> None:
    cut: list[int] = []

    def each(piece: Sequence[int]) -> tuple[int, int]:
        cut.append(len(piece))
        return os.getpid(), sum(piece)

    seen = []
    for k, piece, answer in fanout.share_stream(batches(12, 12), each, count=1):
        seen.append((k, list(piece), answer))
    assert seen == [
        (0, [0, 1, 2, 3, 4], (os.getpid(), 10)),
        (1, [5, 6, 7, 8, 9], (os.getpid(), 35)),
        (2, [10, 11], (os.getpid(), 21)),
    ]
    assert list(fanout.share_stream(iter([]), each, count=2)) == [(0, [], (os.getpid(), 0))]


@pytest.mark.timeout(60)
def test_a_streamed_child_keeps_no_descriptor_but_those_it_is_given(tmp_path: Path) -> None:
    kept = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    parent = os.getpid()

    def each(piece: Sequence[int]) -> list[int]:
        if os.getpid() == parent:
            time.sleep(0.2)  # the child takes the other piece meanwhile
            return [-1]
        return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))

    try:
        got = in_order(list(fanout.share_stream(batches(10, 10), each, (kept,), count=2)))
    finally:
        os.close(kept)
    theirs = [answer for _, answer in got if answer != [-1]]
    assert theirs, "the child took no piece"
    # the kept directory, the queue (never the end that feeds it), the child's pipe, and listdir's own
    assert all(kept in fds and len(fds) == 4 for fds in theirs), theirs


@pytest.mark.timeout(60)
def test_a_failure_in_the_callers_loop_ends_the_streamed_children_at_once() -> None:
    parent = os.getpid()

    def each(piece: Sequence[int]) -> int:
        if os.getpid() != parent:
            time.sleep(60)
        return piece[0]

    started = time.monotonic()
    stream = fanout.share_stream(batches(100, 10), each, count=3)
    with pytest.raises(RuntimeError), contextlib.closing(stream) as got:
        for _ in got:
            raise RuntimeError("the caller's own")
    assert time.monotonic() - started < 10, "the children were waited for, not ended"
    assert no_children_left()
