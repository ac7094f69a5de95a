"""One long read shared among forked processes, one a core: a cold scan of a large store.

A store without a summary cache must read and decode every record file to
learn its state (:meth:`jobctl.store.file.FileStore.list_open`); at 100,000
records that is seconds of one core's work while the others idle. Here the
list of names is cut into contiguous shares, each share but the first is
handed to a forked child, and the parent does the first itself. A child
sends back one marshalled list and exits; what it sends is only ever data
(strings, numbers, bytes, tuples), never an object to believe.

Nothing depends on a child. One that fails -- killed, out of memory, a
truncated or unreadable answer, an exit status other than 0 -- has its share
done again by the parent, in the same call, the slow way; the answer is the
same, only later. Forking is declined (everything done in this process) when
the process has other threads (a fork copies none of them, and whatever lock
one held stays held in the child), when the platform has no ``fork``, or
when there is too little work to pay for one.

A child keeps none of its parent's descriptors but the one directory it
reads through and its own pipe: it cannot hold a lock of its parent's, keep
a worker's guardian pipe open past the worker's death, or write to its
parent's output. Its signal handlers are the defaults, so an interrupt that
reaches the process group ends it, and a parent that dies leaves it
writing into a pipe nobody reads, which ends it too.
"""

from __future__ import annotations

import atexit
import marshal
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

__all__ = ["MIN_SHARE", "aside", "processes", "settle", "share_out"]

T = TypeVar("T")

#: The least work a child is forked for (items of its share): below it, a fork costs more than it saves.
MIN_SHARE = 1000
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
    if given.isdigit() and 1 <= int(given) <= MAX_PROCESSES:
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
) -> list[tuple[Sequence[T], Any]]:
    """``each`` of contiguous shares of ``items``, in order: ``[(share_0, each(share_0)), ...]``.

    Each share but the first is done in a forked child, which keeps open
    only the descriptors in ``keep``; ``each`` must return what
    :mod:`marshal` can carry. ``count`` is how many processes to use
    (:func:`processes` when None); fewer are used when a share would be
    smaller than :data:`MIN_SHARE`, and one (no fork at all) when the
    process cannot fork safely. Whatever a child fails to bring back is
    done here again.
    """
    n = processes() if count is None else max(1, count)
    n = min(n, len(items) // MIN_SHARE)
    if n <= 1 or not _forkable():
        return [(items, each(items))]
    size = -(-len(items) // n)
    shares = [items[i : i + size] for i in range(0, len(items), size)]
    children: list[tuple[int, int] | None] = []
    for share in shares[1:]:
        children.append(_fork(share, each, keep))
    results: list[Any] = [None] * len(shares)
    try:
        results[0] = each(shares[0])
        for k, child in enumerate(children, 1):
            results[k] = _collect(child)
            children[k - 1] = None
    except BaseException:
        for child in children:  # an interrupt, or this share's own failure: no child outlives the call
            if child is not None:
                _end(child)
        raise
    for k, got in enumerate(results):
        if got is _FAILED:
            results[k] = each(shares[k])
    return list(zip(shares, results, strict=True))


_FAILED: Any = object()

#: The children working aside (:func:`aside`), until :func:`settle` reaps them.
_ASIDE: list[int] = []


def aside(work: Callable[[], object]) -> bool:
    """Do ``work`` in a forked child while this process goes on; False when it cannot fork (do it yourself).

    For work whose only effect is a file of the caller's (writing the
    summary cache's listing part while the listing is printed): the child
    keeps no descriptor open and its failure is no one's concern but the
    file's. :func:`settle` waits for it; it is called before anything in
    this process reads what such work writes, and when the process exits.
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
        atexit.unregister(settle)
        atexit.register(settle)
    _ASIDE.append(pid)
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


def _fork(share: Sequence[T], each: Callable[[Sequence[T]], Any], keep: Sequence[int]) -> tuple[int, int] | None:
    """Start a child doing ``share``; (its pid, the read end of its pipe), or None when it could not start."""
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:

        def send() -> None:
            view = memoryview(marshal.dumps(each(share)))
            while view:
                view = view[os.write(w, view) :]

        _child(send, sorted({*keep, w}))
    os.close(w)
    return pid, r


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


def _end(child: tuple[int, int]) -> None:
    """Kill a child whose answer is no longer wanted, and reap it."""
    pid, r = child
    try:
        os.close(r)
    except OSError:
        pass  # closed already, by a collection the interrupt cut short
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


def _collect(child: tuple[int, int] | None) -> Any:
    """What a child brought back, or :data:`_FAILED` (it did not start, exit 0, or send a whole answer)."""
    if child is None:
        return _FAILED
    pid, r = child
    chunks = []
    try:
        while True:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError:
        chunks = []
    os.close(r)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        status = -1
    if status != 0 or not chunks:
        return _FAILED
    try:
        return marshal.loads(b"".join(chunks))
    except (EOFError, ValueError, TypeError):
        return _FAILED
