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
import errno
import fcntl
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import Refused

__all__ = ["change", "read", "remove", "sweep"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CHUNK = 1 << 16
# Locks this process holds, by thread: taking one again inside its own edit
# would deadlock on flock. (_thread, not threading: this is on every start-up.)
_holding: dict[int, set[str]] = {}


def read(path: str) -> bytes | None:
    """The whole file, or None when it is missing. Empty is not missing."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, _CHUNK)
        if len(data) < _CHUNK:
            return data  # a regular file reads whole up to EOF: one call for a record
        chunks = [data]
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _held() -> set[str]:
    return _holding.setdefault(_thread.get_ident(), set())


def _fsync_dir(directory: str) -> None:
    # The rename is durable only once the directory entry is: flush the
    # directory too. Some filesystems refuse fsync on a directory; that is
    # their answer, not a failure of the write.
    fd = os.open(directory, os.O_RDONLY | _O_CLOEXEC | _O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _stage(path: str, data: bytes) -> str:
    """Write ``data`` to a fresh ``<basename>.<unique>.tmp`` beside ``path``, fsynced."""
    while True:
        tmp = f"{path}.{os.urandom(5).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        break
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    return tmp


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@contextmanager
def _locked(path: str) -> Iterator[None]:
    """Hold ``flock(LOCK_EX)`` on ``<path>.lock`` for the block; refuse re-entry."""
    held = _held()
    if path in held:
        raise Refused(f"{path}: lock taken again inside its own edit")
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o600)
    held.add(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        held.discard(path)
        os.close(fd)  # releases the flock


def change(path: str, edit: Callable[[bytes | None], bytes]) -> bytes:
    """Compare-and-set ``path``: lock, read, ``edit(current)``, replace atomically.

    ``edit`` gets the current bytes (None when missing) and returns the new
    bytes, or raises to abort with nothing written. Equal bytes write nothing.
    The replacement is staged in a unique temporary in the same directory,
    fsynced, renamed over the record, and the directory is fsynced. Taking the
    same record's lock again inside ``edit`` is refused (it would deadlock).
    """
    with _locked(path):
        current = read(path)
        new = edit(current)
        if new == current:
            return new
        tmp = _stage(path, new)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        _fsync_dir(os.path.dirname(path) or ".")
        return new


def remove(path: str, check: Callable[[bytes], bool]) -> bool:
    """Delete ``path`` under its lock if ``check(current bytes)`` agrees; True when it was removed.

    The check runs on the bytes read under the lock, so nothing written since
    the caller last looked is removed unseen. The lock file stays [JOB-L3].
    """
    with _locked(path):
        current = read(path)
        if current is None or not check(current):
            return False
        os.unlink(path)
        _fsync_dir(os.path.dirname(path) or ".")
        return True


def sweep(path: str) -> int:
    """Remove stale temporaries of ``path`` under its lock; return how many.

    A writer killed between staging and rename leaves ``<basename>.<u>.tmp``.
    Live writers stage only while holding this lock, so under it every match
    is stale. A name with a further dot in the unique part is not ours.
    """
    directory, base = os.path.split(path)
    directory = directory or "."
    pattern = re.compile(re.escape(base) + r"\.[A-Za-z0-9_]+\.tmp\Z")
    removed = 0
    with _locked(path), os.scandir(directory) as entries:
        for entry in entries:
            if pattern.match(entry.name) and entry.is_file(follow_symlinks=False):
                try:
                    os.unlink(entry.path)
                    removed += 1
                except FileNotFoundError:
                    pass
    return removed
