"""The record lock and the atomic replace (the abstraction-cas file binding).

Every write of ``<id>.json`` happens under ``flock(LOCK_EX)`` on
``<id>.json.lock``, held from before the read of the current bytes until after
the rename [JOB-L2]. ``flock`` and not ``fcntl``/``lockf``: on Linux those are a
separate lock table that the Go and C++ implementations' ``flock`` never sees.
The lock file is created 0600 and never deleted [JOB-L3] -- a new inode would
split the lockers into two groups that each think they hold the lock.
"""

from __future__ import annotations

import _thread
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from . import fsio, limits
from .errors import LockBusy, Refused

__all__ = ["change", "hold", "read", "remove", "stage", "sweep"]

# Locks this process holds, by thread: taking one again inside its own edit
# would deadlock on flock. (_thread, not threading: this is on every start-up.)
_holding: dict[int, set[str]] = {}


def read(at: fsio.Dir, name: str, job_id: str = "") -> bytes | None:
    """The whole record ``name`` in ``at``, or None when it is missing. Empty is not missing.

    A link, FIFO, directory or oversized file at the name is refused
    (:func:`jobctl.fsio.read_file`), never followed or waited on.
    """
    return fsio.read_file(at, name, job_id)


def _held() -> set[str]:
    return _holding.setdefault(_thread.get_ident(), set())


def stage(at: fsio.Dir, name: str, data: bytes, job_id: str = "") -> str:
    """Write ``data`` to a fresh ``<name>.<unique>.tmp`` (0600) beside ``name``, fsynced; return its name."""
    while True:
        tmp = f"{name}.{os.urandom(5).hex()}.tmp"
        try:
            fd = fsio.create_file(at, tmp, job_id)
        except FileExistsError:
            continue
        break
    try:
        fsio.write_all(fd, data, at.join(name), job_id)
        try:
            os.fsync(fd)
        except OSError as exc:
            raise fsio.refusal(at.join(name), exc, job_id, "write") from None
    except BaseException:
        os.close(fd)
        fsio.unlink(at, tmp)
        raise
    os.close(fd)
    return tmp


class _Hold:
    """The lock held for one edit; ``drop`` removes the lock file on the way out."""

    __slots__ = ("fd", "drop")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.drop = False


def _try(fd: int, deadline: float) -> bool:
    """Take ``flock(LOCK_EX)`` on ``fd`` if it comes free before ``deadline`` (monotonic); False if not."""
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)


@contextmanager
def _locked(at: fsio.Dir, name: str, job_id: str = "", wait: bool = True) -> Iterator[_Hold]:
    """Hold ``flock(LOCK_EX)`` on ``<name>.lock`` for the block; refuse re-entry.

    The contract's lock blocks, without a timeout, and is never broken by
    age [JOB-L2]. With ``wait`` false it is waited for :data:`jobctl.limits.LOCK_PATIENCE`
    seconds at most, long enough for any write under way: still taken then
    (a writer stopped in the middle of a write holds it for as long as it
    stays stopped), :class:`LockBusy` is raised and nothing is read or
    written. Picking a job to claim uses that, so one frozen writer cannot
    stop every claim behind it.

    The one lock file jobctl ever removes is that of a record that never came
    to be (a failed submit, see :func:`change`); a locker that waited on it
    finds it unlinked (``st_nlink`` 0) once it gets it, and locks the name's
    new file instead, so two lockers never hold two different inodes.
    """
    held = _held()
    key = at.join(name)
    if key in held:
        raise Refused(f"{key}: lock taken again inside its own edit", job_id)
    lock_name = name + ".lock"
    while True:
        fd = fsio.open_lock(at, lock_name, job_id)
        try:
            if wait:
                fcntl.flock(fd, fcntl.LOCK_EX)
            elif not _try(fd, time.monotonic() + limits.LOCK_PATIENCE):
                busy = f"{at.join(lock_name)} is locked by another writer (one stopped in the middle of a write?)"
                raise LockBusy(busy, job_id)
            if os.fstat(fd).st_nlink:
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    hold = _Hold(fd)
    held.add(key)
    try:
        yield hold
    finally:
        held.discard(key)
        try:
            if hold.drop:
                fsio.unlink(at, lock_name)  # still under the flock: nobody else holds it
        finally:
            os.close(fd)  # releases the flock


def hold(at: fsio.Dir, name: str, job_id: str = "", wait: bool = True) -> AbstractContextManager[object]:
    """Hold ``flock(LOCK_EX)`` on ``<name>.lock`` for a block (as :func:`change` does), for a caller that writes more.

    An exclusive key's claim holds its key's lock over the claim's own
    record write (:mod:`jobctl.store.keys`). ``wait`` as for :func:`change`.
    """
    return _locked(at, name, job_id, wait)


def change(
    at: fsio.Dir, name: str, edit: Callable[[bytes | None], bytes], job_id: str = "", *, wait: bool = True
) -> bytes:
    """Compare-and-set record ``name`` in ``at``: lock, read, ``edit(current)``, replace atomically.

    ``edit`` gets the current bytes (None when missing) and returns the new
    bytes, or raises to abort with nothing written. Equal bytes write nothing.
    The replacement is staged in a unique temporary in the same directory,
    fsynced, renamed over the record, and the directory is fsynced. Taking the
    same record's lock again inside ``edit`` is refused (it would deadlock).
    With ``wait`` false, a lock somebody else holds is waited for only
    :data:`jobctl.limits.LOCK_PATIENCE` seconds (then :class:`jobctl.errors.LockBusy`, nothing
    read or written). A disk
    that refuses the write raises :class:`jobctl.errors.WriteFailed`
    with the record as it was and no temporary left; when there was no
    record, the lock file made for it is removed as well.
    """
    with _locked(at, name, job_id, wait) as hold:
        current = read(at, name, job_id)
        try:
            new = edit(current)
            if new == current:
                return new
            tmp = stage(at, name, new, job_id)
            try:
                fsio.replace(at, tmp, name)
            except BaseException:
                fsio.unlink(at, tmp)
                raise
        except BaseException:
            # No record was there and none was written: the lock guards
            # nothing, so it goes too (a failed submit leaves no stray lock).
            hold.drop = current is None
            raise
        fsio.fsync_dir(at)
        return new


def remove(at: fsio.Dir, name: str, check: Callable[[bytes], bool], job_id: str = "") -> bool:
    """Delete record ``name`` in ``at`` under its lock if ``check(current bytes)`` agrees; True when removed.

    The check runs on the bytes read under the lock, so nothing written since
    the caller last looked is removed unseen. The lock file stays [JOB-L3]:
    an upstream writer waiting on it knows nothing of a new inode.
    """
    with _locked(at, name, job_id):
        current = read(at, name, job_id)
        if current is None or not check(current):
            return False
        fsio.unlink(at, name)
        fsio.fsync_dir(at)
        return True


def sweep(at: fsio.Dir, name: str, job_id: str = "") -> int:
    """Remove stale temporaries of record ``name`` in ``at`` under its lock; return how many.

    A writer killed between staging and rename leaves ``<name>.<u>.tmp``.
    Live writers stage only while holding this lock, so under it every match
    is stale. A name with a further dot in the unique part is not ours, nor
    is anything but a regular file. The names are unlinked relative to
    ``at``, and the directory is fsynced after, so the removal is durable.

    A lock file this sweep made for a record that is not there (an id
    nobody submitted, or a submit killed before its first rename) is
    removed again, as a failed submit's is (:func:`change`); a lock file
    that was there before stays [JOB-L3].
    """
    pattern = re.compile(re.escape(name) + r"\.[A-Za-z0-9_]+\.tmp\Z")
    removed = 0
    made = not fsio.exists(at, name + ".lock")
    with _locked(at, name, job_id) as hold:
        hold.drop = made and not fsio.exists(at, name)
        stale = [
            entry.name for entry in fsio.scan(at) if pattern.match(entry.name) and entry.is_file(follow_symlinks=False)
        ]
        for tmp in stale:
            if fsio.unlink(at, tmp):
                removed += 1
        if removed:
            fsio.fsync_dir(at)
    return removed
