"""One long read shared among forked processes, one a core: a cold scan of a large store.

A store without a summary cache must read and decode every record file to
learn its state (:meth:`jobctl.store.file.FileStore.list_open`); at 100,000
records that is seconds of one core's work while the others idle. (With the
cache, a changed directory still costs a ``stat`` of every record file, and
:meth:`jobctl.summary.Summaries.check` shares those the same way.) Here the
list of names is cut into contiguous pieces, :data:`PIECES` a process, and
every process -- this one and the children it forks -- takes the next piece
from a shared queue as it finishes one: a process that runs slower does
fewer, and none waits long for another. A child sends each piece's answer
as it finishes it, one marshalled value after its length; what it sends is
only ever data (strings, numbers, bytes, tuples), never an object to
believe. This process takes the answers that are in between its own pieces.
Items that come a batch at a time (a directory being read) go to
:func:`share_stream`: the children start first, and each piece is sent to
them whole as it is cut.

Nothing depends on a child. One that fails -- killed, out of memory, a
truncated or unreadable answer, an answer to a piece answered already --
has every piece it did not answer whole done again by this process, in the
same call, the slow way; the answer is the same, only later. Forking is
declined (everything done in this process) when the process has other
threads (a fork copies none of them, and whatever lock one held stays held
in the child), when the platform has no ``fork``, or when there is too
little work to pay for one.

A child keeps none of its parent's descriptors but the one directory it
reads through, the queue and its own pipe: it cannot hold a lock of its
parent's, keep a worker's guardian pipe open past the worker's death, or
write to its parent's output. Its signal handlers are the defaults, so an
interrupt that reaches the process group ends it, and a parent that dies
leaves it writing into a pipe nobody reads, which ends it too.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import marshal
import os
import signal
import sys
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

__all__ = ["MIN_SHARE", "PIECES", "STREAM_PIECE", "aside", "processes", "settle", "share_out", "share_stream"]

T = TypeVar("T")

#: The least work a child is forked for (items a process): below it, a fork costs more than it saves.
MIN_SHARE = 1000
#: The pieces a share_out is cut into, a process: each process takes the next as it finishes one. (At the
#: end, one waits for the piece another is still doing: smaller pieces, a shorter wait; 16 waited longer.)
PIECES = 32
#: The most processes a scan uses, this one included.
MAX_PROCESSES = 8
#: ``JOBCTL_SCAN_PROCESSES``: how many processes a cold scan uses (1: this one alone).
PROCESSES_ENV = "JOBCTL_SCAN_PROCESSES"


def processes() -> int:
    """How many processes a scan may use: the CPUs this process may run on, at most :data:`MAX_PROCESSES`.

    ``JOBCTL_SCAN_PROCESSES`` overrides it (a whole number from 1 to
    :data:`MAX_PROCESSES`; anything else is ignored).
    """
    given = os.environ.get(PROCESSES_ENV, "")
    if given.isascii() and given.isdigit() and 1 <= int(given) <= MAX_PROCESSES:  # "²".isdigit() too
        return int(given)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_PROCESSES))


def _forkable() -> bool:
    """True when a fork copies this whole process: it has ``fork`` and runs no thread but the main one."""
    if not hasattr(os, "fork"):
        return False
    threading = sys.modules.get("threading")  # not imported: no thread was started from Python
    return threading is None or threading.active_count() == 1


def share_out(
    items: Sequence[T],
    each: Callable[[Sequence[T]], Any],
    keep: Sequence[int] = (),
    *,
    count: int | None = None,
) -> Generator[tuple[int, Sequence[T], Any], None, None]:
    """``each`` of contiguous pieces of ``items``, as ``(index, piece, each(piece))``, yielded as they are done.

    The pieces are numbered in the order of ``items``; they come in no
    particular order. There are :data:`PIECES` a process, and each process
    (this one among them) takes the next piece from a queue as it finishes
    one, so a process that runs slower (a busier CPU, colder pages) does
    fewer, and none waits long for another. This process's own come as soon
    as each is done, and the children's as they come in, taken between this
    process's pieces and after its last: what the caller does with one
    overlaps the children's work. Each child keeps open only the descriptors
    in ``keep`` (and its pipes); ``each`` must return what :mod:`marshal`
    can carry.

    ``count`` is how many processes to use (:func:`processes` when None);
    fewer when a process would have fewer than :data:`MIN_SHARE` items, and
    one (no fork at all: one piece, the whole) when the process cannot fork
    safely. Whatever a child fails to bring back is done here again. A
    caller that may leave its loop early closes the iterator
    (``contextlib.closing``): that kills and reaps the children at once, as
    an exception raised here does.
    """
    n = processes() if count is None else max(1, count)
    n = min(n, len(items) // MIN_SHARE)
    if n <= 1 or not _forkable():
        yield 0, items, each(items)
        return
    size = -(-len(items) // min(n * PIECES, 255))
    pieces = [items[i : i + size] for i in range(0, len(items), size)]
    try:
        queue, w = os.pipe()
    except OSError:
        yield 0, items, each(items)
        return
    try:
        os.write(w, bytes(range(len(pieces))))  # at most 255 bytes, under PIPE_BUF: at once, never blocking
    finally:
        os.close(w)  # drained, the queue reads as its end
    children: list[_Child] = []
    done = bytearray(len(pieces))
    try:
        for _ in range(n - 1):
            child = _fork(pieces, each, [*keep, queue])
            if child is not None:
                children.append(child)
        for k in _taken(queue):
            done[k] = 1
            yield k, pieces[k], each(pieces[k])
            yield from _between(children, pieces, done)  # what the children finished meanwhile
        yield from _rest(children, pieces, done, each)
    finally:
        os.close(queue)
        for child in children:  # an interrupt, or a failure here or in the caller: no child outlives the call
            child.end()


#: The items a piece of :func:`share_stream` holds (the last one fewer): the whole is not known ahead.
STREAM_PIECE = 1024
#: The most bytes a piece of :func:`share_stream` is sent in: a larger one (long names) is done here.
_MAX_MESSAGE = 1 << 18
#: The send buffer asked for the queue of :func:`share_stream` (the system may give less).
_QUEUE_BUFFER = 4 << 20


def share_stream(
    batches: Iterable[Sequence[T]],
    each: Callable[[Sequence[T]], Any],
    keep: Sequence[int] = (),
    *,
    count: int | None = None,
) -> Generator[tuple[int, Sequence[T], Any], None, None]:
    """:func:`share_out` of items that come in ``batches`` (a directory as it is read): the children start first.

    The children are forked before the first batch is asked for, so they
    work while this process makes the rest (the reading of a directory of
    200,000 names is a tenth of a second no child would otherwise share).
    The items are cut into pieces of :data:`STREAM_PIECE` as they come,
    numbered in their order, and each piece is sent whole, as one message
    of a ``SOCK_SEQPACKET`` socket that every process reads (one message a
    read: a piece goes to one process), the children taking the next as
    they finish one. A piece the queue has no room for (the children are
    behind) or too large for one message is done here at once; the
    children's answers are taken between batches and between this
    process's pieces. Once the batches are all in, this process takes
    pieces too, then what the children still owe; whatever a child fails
    to bring back is done here, as with :func:`share_out`. Without a fork
    (one process, no ``fork``, other threads, no socket), every piece is
    done here as it is cut. A caller that may leave its loop early closes
    the iterator.
    """
    n = processes() if count is None else max(1, count)
    queue = feed = -1
    children: list[_Child] = []
    if n > 1 and _forkable():
        queue, feed = _stream_queue()
        if queue >= 0:
            for _ in range(n - 1):
                child = _fork_streamed(each, [*keep, queue])
                if child is not None:
                    children.append(child)
            if not children:
                os.close(feed)
                os.close(queue)
                queue = feed = -1
    pieces: list[Sequence[T]] = []
    done = bytearray()
    try:
        pending: list[T] = []
        for batch in batches:
            pending.extend(batch)
            at = 0
            while len(pending) - at >= STREAM_PIECE:
                yield from _dealt(pending[at : at + STREAM_PIECE], pieces, done, each, feed)
                at += STREAM_PIECE
            del pending[:at]
            yield from _between(children, pieces, done)
        if pending or not pieces:
            yield from _dealt(pending, pieces, done, each, feed)
        if queue < 0:
            return
        os.close(feed)  # every piece is sent: the queue reads as its end once drained
        feed = -1
        for k in _taken_streamed(queue):
            done[k] = 1
            yield k, pieces[k], each(pieces[k])
            yield from _between(children, pieces, done)
        yield from _rest(children, pieces, done, each)
    finally:
        if queue >= 0:
            os.close(queue)
            if feed >= 0:
                os.close(feed)
        for child in children:  # an interrupt, or a failure here or in the caller: no child outlives the call
            child.end()


def _stream_queue() -> tuple[int, int]:
    """The queue of :func:`share_stream`: ``(read end, write end)``, the write end not blocking; -1s without one."""
    import socket  # only a cold scan of thousands of records pays for it

    try:
        feed_sock, queue_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except (AttributeError, OSError):
        return -1, -1
    with contextlib.suppress(OSError):
        feed_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _QUEUE_BUFFER)
    feed_sock.shutdown(socket.SHUT_RD)
    queue_sock.shutdown(socket.SHUT_WR)
    feed, queue = feed_sock.detach(), queue_sock.detach()
    os.set_blocking(feed, False)
    return queue, feed


def _dealt(
    piece: Sequence[T], pieces: list[Sequence[T]], done: bytearray, each: Callable[[Sequence[T]], Any], feed: int
) -> Iterator[tuple[int, Sequence[T], Any]]:
    """Number ``piece`` and send it to the queue ``feed``; done here when it cannot be (no queue, no room)."""
    k = len(pieces)
    pieces.append(piece)
    done.append(0)
    if feed >= 0:
        message = k.to_bytes(4, "little") + marshal.dumps(piece)  # type: ignore[arg-type]  # items marshal carries
        if len(message) <= _MAX_MESSAGE:
            try:
                os.write(feed, message)  # one message, whole or not at all
                return
            except OSError:
                pass  # BlockingIOError: the children are behind; or the queue is broken: done here
    done[k] = 1
    yield k, piece, each(piece)


def _between(
    children: list[_Child], pieces: list[Sequence[T]], done: bytearray
) -> Iterator[tuple[int, Sequence[T], Any]]:
    """What the children have finished meanwhile (without waiting)."""
    for child in children:
        for got, answer in child.answers(done, block=False):
            yield got, pieces[got], answer


def _rest(
    children: list[_Child], pieces: Sequence[Sequence[T]], done: bytearray, each: Callable[[Sequence[T]], Any]
) -> Iterator[tuple[int, Sequence[T], Any]]:
    """What the children still owe, waited for; then each piece a child took and failed to bring back, done here."""
    for child in children:
        for got, answer in child.answers(done, block=True):
            yield got, pieces[got], answer
        child.end()
    for k, piece in enumerate(pieces):
        if not done[k]:
            done[k] = 1
            yield k, piece, each(piece)


def _taken_streamed(queue: int) -> Iterator[int]:
    """The number of each piece this process takes from the queue of :func:`share_stream`, until it is drained."""
    while True:
        got = os.read(queue, _MAX_MESSAGE)
        if len(got) < 4:
            return
        yield int.from_bytes(got[:4], "little")


def _fork_streamed(each: Callable[[Sequence[T]], Any], keep: Sequence[int]) -> _Child | None:
    """:func:`_fork` for :func:`share_stream`: each piece comes with its items, in a message of the queue."""
    queue = keep[-1]

    def pieces() -> Iterator[tuple[int, Any]]:
        while True:
            got = os.read(queue, _MAX_MESSAGE)
            if len(got) < 4:
                return
            yield int.from_bytes(got[:4], "little"), marshal.loads(got[4:])

    return _start(pieces, each, keep)


def _taken(queue: int) -> Iterator[int]:
    """The index of each piece this process takes from ``queue``, one byte a read, until it is drained."""
    while True:
        got = os.read(queue, 1)
        if not got:
            return
        yield got[0]


#: The size a child's pipe is given, when the system allows it: room for a few pieces' answers, so
#: that a child seldom waits for this process to take one.
PIPE_SIZE = 1 << 20
_FRAME = 8  # the length of each answer, little-endian, before it


class _Child:
    """A forked child doing pieces: its pid, the read end of its pipe, and what it sent not yet taken.

    It sends each piece's answer as it finishes it: ``marshal.dumps((index,
    answer))`` after its length. Answers are taken whole, checked, and each
    piece once; a child that sends what is not such an answer is believed no
    further (what it did not answer is done again by the caller).
    """

    __slots__ = ("pid", "fd", "buffer", "trusted")

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        self.buffer = bytearray()
        self.trusted = True

    def answers(self, done: bytearray, block: bool) -> list[tuple[int, Any]]:
        """The whole answers sent since last asked (with ``block``, all of them: until the child ends).

        Each piece answered is marked in ``done``.
        """
        if self.fd < 0:
            return []
        try:
            os.set_blocking(self.fd, block)
            while True:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    break
                self.buffer += chunk
        except BlockingIOError:
            pass  # nothing more for now
        except OSError:
            self.trusted = False
        out: list[tuple[int, Any]] = []
        buffer, at = self.buffer, 0
        while self.trusted and len(buffer) - at >= _FRAME:
            size = int.from_bytes(buffer[at : at + _FRAME], "little")
            if len(buffer) - at - _FRAME < size:
                break
            try:
                got = marshal.loads(buffer[at + _FRAME : at + _FRAME + size])
            except (EOFError, ValueError, TypeError):
                got = None
            at += _FRAME + size
            if type(got) is not tuple or len(got) != 2 or type(got[0]) is not int or not 0 <= got[0] < len(done):
                self.trusted = False
            elif done[got[0]]:
                self.trusted = False  # a piece answered twice: not a child of ours
            else:
                done[got[0]] = 1
                out.append(got)
        del buffer[:at]
        return out

    def end(self) -> None:
        """Close the pipe, and reap the child (killed first, unless its pipe was read to its end)."""
        if self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        try:
            os.close(fd)
        except OSError:
            pass
        try:
            os.kill(self.pid, signal.SIGKILL)  # gone already when its answers were all read: harmless
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass


#: The children working aside (:func:`aside`), until :func:`settle` reaps them.
_ASIDE: list[int] = []
#: Those of them the process need not wait for when it exits (``aside(..., at_exit=False)``).
_DETACHED: set[int] = set()


def aside(work: Callable[[], object], *, at_exit: bool = True) -> bool:
    """Do ``work`` in a forked child while this process goes on; False when it cannot fork (do it yourself).

    For work whose only effect is a file of the caller's (writing the
    summary cache's listing part once the listing is printed): the child
    keeps no descriptor open and its failure is no one's concern but the
    file's. :func:`settle` waits for it; it is called before anything in
    this process reads what such work writes. The process waits for it when
    it exits too, unless ``at_exit`` is False: then it may exit while the
    child still works (work whose file is replaced atomically, which a reader
    of another process finds written whole or not at all).
    """
    settle(block=False)
    if not _forkable():
        return False
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:
        _child(work, [])
    if not _ASIDE:
        atexit.unregister(_settle_at_exit)
        atexit.register(_settle_at_exit)
    _ASIDE.append(pid)
    if not at_exit:
        _DETACHED.add(pid)
    return True


def settle(block: bool = True) -> None:
    """Wait for the children working aside (without ``block``, reap those that are done)."""
    for pid in list(_ASIDE):
        try:
            done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _ASIDE.remove(pid)
            _DETACHED.discard(pid)


def _settle_at_exit() -> None:
    """At exit: wait for the children working aside, but those started with ``at_exit=False``."""
    for pid in list(_ASIDE):
        if pid not in _DETACHED:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            _ASIDE.remove(pid)


def _fork(pieces: Sequence[Sequence[T]], each: Callable[[Sequence[T]], Any], keep: Sequence[int]) -> _Child | None:
    """Start a child doing the pieces it takes from the queue (the last of ``keep``); None when it could not start."""
    queue = keep[-1]
    return _start(lambda: ((k, pieces[k]) for k in _taken(queue)), each, keep)


def _start(
    taken: Callable[[], Iterator[tuple[int, Sequence[T]]]], each: Callable[[Sequence[T]], Any], keep: Sequence[int]
) -> _Child | None:
    """Fork a child sending ``each`` of every piece it takes (``taken()``, in the child); None when it could not."""
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except (AttributeError, OSError):
        pass  # the system's size: the child waits for this process to take its answers more often
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:

        def send() -> None:
            for k, piece in taken():
                blob = marshal.dumps((k, each(piece)))
                view = memoryview(len(blob).to_bytes(_FRAME, "little") + blob)
                while view:
                    view = view[os.write(w, view) :]

        _child(send, sorted({*keep, w}))
    os.close(w)
    return _Child(pid, r)


def _child(work: Callable[[], object], keep: list[int]) -> NoReturn:
    """The life of a forked child: default signal handlers, only ``keep`` open, ``work``, and exit (0 if it ran)."""
    status = 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        _close_all_but(keep)
        work()
        status = 0
    except BaseException:
        pass
    finally:
        os._exit(status)


def _close_all_but(keep: list[int]) -> None:
    """Close every descriptor from 0 up but those in ``keep`` (sorted)."""
    low = 0
    for fd in keep:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
