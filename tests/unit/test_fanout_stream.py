"""jobctl.fanout.share_stream: items that come in batches, the children at work before the last one comes."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jobctl import fanout


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "STREAM_PIECE", 5)
    monkeypatch.delenv(fanout.PROCESSES_ENV, raising=False)


def no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


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
            if how == "raises":
                raise RuntimeError("boom")
            if how == "is killed":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "exits 0 silently":
                os._exit(0)
            return [object()]  # marshal refuses it: nothing sent
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
