"""Every open, create, rename, unlink, mkdir and scan jobctl does under a store root.

A store is a shared directory: whoever can write it can plant a symbolic link,
a FIFO, a directory or a sparse 3 GB file at any name jobctl uses. So nothing
under the root is opened by path. The root is opened once (it may itself be a
link: the user named it), and every name below it is resolved one component at
a time relative to an opened directory (``openat``), with ``O_NOFOLLOW``, so a
link anywhere inside the store -- ``jobs/``, ``work/``, ``work/.jobctl``, a
record, a lock, a log -- is refused instead of followed. What is opened is then
checked with ``fstat``: a record, lock or log must be a regular file, a
directory a directory; an open that fails on what is not a regular file
(``ELOOP``, ``EISDIR``, ``ENXIO``, ...) names what is there too. Files open
with ``O_NONBLOCK`` (a FIFO at a record's or lock's name must not hang a
reader) and ``O_NOCTTY`` (a terminal there must not become ours), and reads
refuse records over :func:`max_record_bytes`.
New files are created with ``O_EXCL``.

A refusal is a verdict naming the path: ``Invalid`` for something at a
record's or lock's name that is not what the format puts there, ``Refused``
for one this user may not read or write, :class:`WriteFailed` when the disk
refuses a write.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from .errors import Invalid, JobError, Refused, WriteFailed

__all__ = [
    "Dir",
    "DEFAULT_MAX_RECORD_BYTES",
    "MAX_RECORD_ENV",
    "within_limit",
    "max_record_bytes",
    "open_dir",
    "open_below",
    "opened_dir",
    "read_file",
    "read_file_stat",
    "read_plain",
    "open_lock",
    "create_file",
    "open_append",
    "open_read",
    "write_all",
    "replace",
    "unlink",
    "exists",
    "read_regular",
    "fsync_dir",
    "scan",
    "refusal",
    "odd_at",
]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
# O_NONBLOCK: a FIFO at the name must not make the open wait; O_NOCTTY: a terminal there must not become ours.
_FILE_FLAGS = _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | _FILE_FLAGS
_S_IFMT = 0o170000
_S_IFREG = stat.S_IFREG
_CHUNK = 1 << 16

#: Records larger than this are refused unread. The largest legitimate record
#: is a spec or checkpoint of a few megabytes; 64 MiB is far above that and
#: far below what a reader can hold in memory.
DEFAULT_MAX_RECORD_BYTES = 64 << 20
MAX_RECORD_ENV = "JOBCTL_MAX_RECORD_BYTES"
_limit_cache: tuple[str, int] = ("", DEFAULT_MAX_RECORD_BYTES)

# What the disk says when a write cannot complete: the record is kept as it was.
_DISK_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EFBIG", "EDQUOT", "EIO") if hasattr(errno, name))


def max_record_bytes() -> int:
    """The size limit on a record: ``$JOBCTL_MAX_RECORD_BYTES``, else 64 MiB."""
    global _limit_cache
    raw = os.environ.get(MAX_RECORD_ENV, "")
    if not raw:
        return DEFAULT_MAX_RECORD_BYTES
    if raw == _limit_cache[0]:
        return _limit_cache[1]
    value = raw.strip()
    # ASCII digits only: str.isdigit() also takes "²" and other digits int() refuses.
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise Invalid(f"{MAX_RECORD_ENV} must be a whole number of bytes of at least 1, not {raw!r}")
    _limit_cache = (raw, int(value))
    return _limit_cache[1]


def within_limit(data: bytes, job_id: str) -> bytes:
    """``data``, a record about to be written, if a reader takes it back (:func:`max_record_bytes`); else ``Invalid``.

    A record written over the limit could be read by no reader after it: its
    job could be neither claimed nor finished, its holder's next write refused.
    """
    limit = max_record_bytes()
    if len(data) > limit:
        raise Invalid(
            f"job {job_id}: the record would be {len(data)} bytes, over the {limit}-byte limit on a record"
            f" ({MAX_RECORD_ENV}); nothing written",
            job_id,
        )
    return data


class Dir:
    """A directory opened without following links; names below it resolve against ``fd``.

    A ``with`` block closes it, unless it is ``kept`` (held open for the life
    of its owner, as a store keeps its ``jobs/``); it is closed when dropped.
    """

    __slots__ = ("fd", "path", "kept")

    def __init__(self, fd: int, path: str, kept: bool = False) -> None:
        self.fd = fd
        self.path = path
        self.kept = kept

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.kept:
            self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


def _what(at: int, name: str) -> str:
    """What is at ``name`` (without following it), in words, for a refusal."""
    try:
        mode = os.stat(name, dir_fd=at, follow_symlinks=False).st_mode
    except OSError:
        return "not what was expected"
    return _kind(mode)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


def refusal(path: str, exc: OSError, job_id: str = "", doing: str = "read") -> JobError:
    """The verdict for an OS error on ``path``: the path, what failed, and why."""
    reason = exc.strerror or str(exc)
    if exc.errno in _DISK_ERRNOS and doing != "read":
        job = f"job {job_id}: " if job_id else ""
        return WriteFailed(f"{job}cannot {doing} {path}: {reason}; nothing was changed", job_id)
    return Refused(f"cannot {doing} {path}: {reason}", job_id)


def _odd_there(at: int, name: str, exc: OSError) -> str | None:
    """What is at ``name`` when an open of it failed because it is not a regular file there; else None.

    ``ELOOP`` (``O_NOFOLLOW`` met a link), ``EISDIR`` (a directory opened for
    writing), ``ENXIO`` (a socket, or a FIFO with no reader opened for
    writing), ``ENODEV`` and the like (a device): the ``lstat`` names it. An
    error on what *is* a regular file (``EACCES``, a full disk) is None: the
    caller's refusal says why.
    """
    if exc.errno == errno.ELOOP:
        return "a symbolic link"
    try:
        mode = os.stat(name, dir_fd=at, follow_symlinks=False).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def _odd(path: str, found: str, wanted: str, job_id: str = "") -> JobError:
    follow = "; jobctl does not follow links in a store" if found == "a symbolic link" else ""
    return Invalid(f"{path} is {found}, not {wanted}{follow}", job_id)


def odd_at(at: Dir, name: str, wanted: str) -> JobError | None:
    """The refusal for what is at ``name`` when it is something other than a regular file (not followed).

    None when nothing is there or a regular file is: what a writer checks
    before it renames its own file over ``name``, since a rename replaces a
    link or a FIFO without a word.
    """
    try:
        mode = os.stat(name, dir_fd=at.fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return refusal(at.join(name), exc, doing="read")
    return None if stat.S_ISREG(mode) else _odd(at.join(name), _kind(mode), wanted)


def _open_below(at: int, name: str, path: str, create: bool, mode: int) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=at)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _odd(path, _what(at, name), "a directory") from None
        raise refusal(path, exc, doing="open") from None
    try:
        os.mkdir(name, mode, dir_fd=at)
    except FileExistsError:
        pass  # made by somebody else meanwhile; the open below judges what it is
    except OSError as exc:
        raise refusal(path, exc, doing="create") from None
    return _open_below(at, name, path, False, mode)


def open_dir(root: str, *parts: str, create: bool = False, mode: int = 0o755, kept: bool = False) -> Dir:
    """Open ``root`` and then each of ``parts`` below it, none of them followed if a link.

    ``root`` itself is followed: it is the directory the user named. With
    ``create``, a missing part is made (``mkdir`` relative to its parent,
    then opened without following, so a link swapped in between is refused).
    A missing root or part raises ``FileNotFoundError`` unless created.
    """
    fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    path = root
    try:
        for part in parts:
            path = os.path.join(path, part)
            below = _open_below(fd, part, path, create, mode)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return Dir(fd, path, kept)


def open_below(at: Dir, name: str, *, create: bool = False, mode: int = 0o755) -> Dir:
    """Open the directory ``name`` in ``at`` (made first with ``create``), not followed if a link.

    :func:`open_dir` for one part below a directory already open: no walk
    from a root again.
    """
    path = at.join(name)
    return Dir(_open_below(at.fd, name, path, create, mode), path)


@contextmanager
def opened_dir(root: str, *parts: str, create: bool = False) -> Iterator[Dir]:
    """:func:`open_dir` for a ``with`` block."""
    d = open_dir(root, *parts, create=create)
    try:
        yield d
    finally:
        d.close()


def read_file(at: Dir, name: str, job_id: str = "", limit: int | None = None) -> bytes | None:
    """The whole regular file ``name``, or None when it is missing. Empty is not missing.

    Opened ``O_NOFOLLOW|O_NONBLOCK`` and checked with ``fstat``: a link, a
    FIFO, a directory or a device is refused (``Invalid``) without reading or
    waiting, and so is a file over ``limit`` bytes (default
    :func:`max_record_bytes`) -- before a byte of it is read.
    """
    got = read_file_stat(at, name, job_id, limit)
    return None if got is None else got[0]


def read_file_stat(
    at: Dir, name: str, job_id: str = "", limit: int | None = None
) -> tuple[bytes, os.stat_result] | None:
    """:func:`read_file`, with the ``fstat`` of the very descriptor read.

    The summary cache (:mod:`jobctl.summary`) keys a record by its file's
    identity: a ``stat`` of the name after the read could pair new bytes with
    the identity of a replacement.
    """
    limit = max_record_bytes() if limit is None else limit
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=at.fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        found = _odd_there(at.fd, name, exc)
        if found == "a symbolic link":
            raise _odd(at.join(name), found, "a record", job_id) from None
        if found is not None:  # a socket (ENXIO), say
            raise _odd(at.join(name), found, "a record (a regular file)", job_id) from None
        raise refusal(at.join(name), exc, job_id) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _odd(at.join(name), _kind(st.st_mode), "a record (a regular file)", job_id)
        if st.st_size > limit:
            raise Invalid(
                f"{at.join(name)} is {st.st_size} bytes, over the {limit}-byte limit on a record ({MAX_RECORD_ENV})",
                job_id,
            )
        try:
            data = os.read(fd, _CHUNK)
            if len(data) < _CHUNK:
                return data, st  # a regular file reads whole up to EOF: one call for a record
            chunks = [data]
            size = len(data)
            while True:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:  # grew while read
                    raise Invalid(f"{at.join(name)} is over the {limit}-byte limit on a record", job_id)
                chunks.append(chunk)
            return b"".join(chunks), st
        except OSError as exc:
            raise refusal(at.join(name), exc, job_id) from None
    finally:
        os.close(fd)


def read_plain(at_fd: int, name: str, limit: int) -> tuple[bytes, os.stat_result] | bool:
    """:func:`read_file_stat` of a record that is what it should be, at the least cost: else a plain answer.

    The bytes and the ``fstat`` of the very descriptor read, when ``name``
    (below the directory ``at_fd``, no link followed: the same open as
    :func:`read_file_stat`) is a regular file of at most ``limit`` bytes
    read whole in one call; False when it is gone; True for everything else
    (a link, a FIFO, a directory, a file over ``limit`` or too large for one
    read, any error): the caller reads it with :func:`read_file_stat`, which
    says what it is. No exception, no message, no path joined: a cold scan
    of 100,000 records calls it once a record.
    """
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=at_fd)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        st = os.fstat(fd)
        if st.st_mode & _S_IFMT != _S_IFREG or st.st_size > limit:
            return True
        data = os.read(fd, _CHUNK)
        if len(data) < _CHUNK:  # a regular file reads whole up to EOF: as read_file_stat takes it
            return data, st
        return True
    except OSError:
        return True
    finally:
        os.close(fd)


def _regular(fd: int, at: Dir, name: str, wanted: str, job_id: str, single: bool = False) -> None:
    """Close ``fd`` and refuse unless it is a regular file (with ``single``, one with no second name)."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _odd(at.join(name), _kind(st.st_mode), wanted, job_id)
        if single and st.st_nlink > 1:
            # A hard link planted at a log's name would make the appends land in a file elsewhere.
            # (A lock is never written to, so a hard-linked backup of the store may keep its locks.)
            raise Invalid(f"{at.join(name)} has {st.st_nlink} names (a hard link); jobctl appends to its own", job_id)
    except BaseException:
        os.close(fd)
        raise


def _open_file(at: Dir, name: str, flags: int, wanted: str, job_id: str, doing: str) -> int:
    """``openat`` without following a link; ``FileExistsError``/``FileNotFoundError`` are the caller's."""
    try:
        return os.open(name, flags | _FILE_FLAGS, 0o600, dir_fd=at.fd)
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError as exc:
        found = _odd_there(at.fd, name, exc)
        if found is not None:  # a link (ELOOP), a directory (EISDIR), a socket (ENXIO), ...
            raise _odd(at.join(name), found, wanted, job_id) from None
        raise refusal(at.join(name), exc, job_id, doing) from None


def open_lock(at: Dir, name: str, job_id: str = "") -> int:
    """Open (creating 0600 if missing) the lock file ``name``; a link or odd file there is refused.

    ``O_CREAT`` with ``O_NOFOLLOW`` fails on a link instead of creating its
    target; a directory or a socket there fails the open, and is named.
    ``O_NONBLOCK|O_NOCTTY``: a FIFO or a device planted there is neither
    waited on nor made this process's terminal, and ``fstat`` refuses it
    before the descriptor is used.
    """
    try:
        fd = _open_file(at, name, os.O_RDWR | os.O_CREAT, "a lock (a regular file)", job_id, "create")
    except FileNotFoundError as exc:  # the directory went away under us
        raise refusal(at.join(name), exc, job_id, "create") from None
    _regular(fd, at, name, "a lock (a regular file)", job_id)
    return fd


def create_file(at: Dir, name: str, job_id: str = "") -> int:
    """Create ``name`` new (``O_EXCL``, 0600) for writing; ``FileExistsError`` if anything is there."""
    return _open_file(at, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, "a new file", job_id, "create")


def open_append(at: Dir, name: str, job_id: str = "") -> int:
    """Open ``name`` for appending, created 0600 if missing; a link or odd file there is refused."""
    try:
        fd = _open_file(at, name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "a log (a regular file)", job_id, "create")
    except FileNotFoundError as exc:
        raise refusal(at.join(name), exc, job_id, "create") from None
    _regular(fd, at, name, "a log (a regular file)", job_id, single=True)
    return fd


def open_read(at: Dir, name: str, job_id: str = "") -> int | None:
    """Open the regular file ``name`` for reading (a log); None when missing; a link or odd file refused."""
    try:
        fd = _open_file(at, name, os.O_RDONLY, "a log (a regular file)", job_id, "read")
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _odd(at.join(name), _kind(st.st_mode), "a log (a regular file)", job_id)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_all(fd: int, data: bytes, path: str, job_id: str = "") -> None:
    """Write all of ``data``; a disk that refuses is :class:`WriteFailed` naming ``path``."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise refusal(path, exc, job_id, "write") from None


def replace(at: Dir, src: str, dst: str) -> None:
    """Rename ``src`` over ``dst``, both names in ``at`` (a link at ``dst`` is replaced, not followed)."""
    os.replace(src, dst, src_dir_fd=at.fd, dst_dir_fd=at.fd)


def unlink(at: Dir, name: str) -> bool:
    """Remove ``name`` from ``at`` (a link itself, never its target); False when it was not there."""
    try:
        os.unlink(name, dir_fd=at.fd)
    except FileNotFoundError:
        return False
    return True


def exists(at: Dir, name: str) -> bool:
    """Whether anything is at ``name`` in ``at`` (a link counts, and is never followed)."""
    try:
        os.stat(name, dir_fd=at.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def read_regular(path: str) -> bytes:
    """The bytes of the regular file ``path`` (a config file: a link to it is followed); ``OSError`` else.

    Opened ``O_NONBLOCK``: a FIFO at the name must not hang every command
    that reads it (it is refused, as a directory is).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _O_CLOEXEC)
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return fh.read()


def fsync_dir(at: Dir) -> None:
    """Flush the directory, so a rename in it is durable.

    Some filesystems refuse fsync on a directory; that is their answer, not a
    failure of the write.
    """
    try:
        os.fsync(at.fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise


def scan(at: Dir) -> Iterator[os.DirEntry[str]]:
    """The entries of ``at`` (``os.scandir`` on its fd: names only, nothing followed)."""
    return entries(at.fd)


def entries(fd: int) -> Iterator[os.DirEntry[str]]:
    """The entries of the directory open as ``fd``, read through a descriptor of their own (:func:`names`)."""
    own = _own(fd)
    try:
        with os.scandir(own) as found:
            yield from found
    finally:
        os.close(own)


def names(fd: int) -> list[str]:
    """The names in the directory open as ``fd``, read through a descriptor of their own.

    A directory is read from the position of its open file description, and
    ``os.scandir``/``os.listdir`` of a descriptor read through a copy of it
    (``dup``), which shares that position, after rewinding it: two threads
    reading one directory through one kept descriptor (a store's ``jobs/``)
    would each miss what the other read, or start again half-way. ``"."``
    opened below it is the same directory with a position of its own.
    """
    own = _own(fd)
    try:
        return os.listdir(own)
    finally:
        os.close(own)


def _own(fd: int) -> int:
    """The directory open as ``fd`` opened again, as ``"."`` below it: the same directory, its own read position."""
    return os.open(".", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC, dir_fd=fd)


#: How many directories :func:`remove_tree` holds open at once, however deep the tree: past it the
#: shallowest is closed and opened again (walked to from the top, nothing followed) when the walk comes back.
TREE_HELD = 32


class _Level:
    """One directory on :func:`remove_tree`'s path: its name, its descriptor (None: closed), what is left in it."""

    __slots__ = ("name", "dir", "left")

    def __init__(self, name: str, below: Dir | None) -> None:
        self.name = name
        self.dir = below
        self.left: list[str] | None = None  # the subdirectories still to empty; None: not listed yet


def _reopen(at: Dir, levels: list[_Level]) -> None:
    """Open again each closed directory on the path, from the deepest one still open (or ``at``), none followed."""
    i = len(levels)
    while i and levels[i - 1].dir is None:
        i -= 1
    parent = at if i == 0 else levels[i - 1].dir
    assert parent is not None
    for j in range(i, len(levels)):
        below = open_below(parent, levels[j].name)
        if parent is not at and j <= len(levels) - TREE_HELD:  # only the path's deepest TREE_HELD stay open
            parent.close()
            levels[j - 1].dir = None
        levels[j].dir = below
        parent = below


def _hold(levels: list[_Level]) -> None:
    """Close the shallowest directory held once more than :data:`TREE_HELD` are open."""
    start = len(levels) - TREE_HELD - 1
    shallowest = levels[start].dir if start >= 0 else None
    if shallowest is not None:
        shallowest.close()
        levels[start].dir = None


def remove_tree(at: Dir, name: str) -> None:
    """Remove ``name`` in ``at`` and, when it is a directory, all below it; nothing missing is an error.

    Walked by descriptor with nothing followed: a link anywhere in the tree
    is removed itself, never its target, and a directory swapped for a link
    while the walk runs is refused by ``O_NOFOLLOW`` rather than entered.
    The walk is a loop, not a recursion, and holds at most :data:`TREE_HELD`
    directories open: a tree of any depth (a job's, or one planted in the
    store) is removed without running out of stack or of descriptors.
    """
    try:
        info = os.stat(name, dir_fd=at.fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        unlink(at, name)
        return
    levels = [_Level(name, None)]
    try:
        while levels:
            level = levels[-1]
            if level.dir is None:
                try:
                    _reopen(at, levels)
                except FileNotFoundError:  # gone meanwhile: nothing left to remove there
                    levels.pop().dir = None
                    continue
            here = level.dir
            assert here is not None
            if level.left is None:
                level.left = []
                for entry in list(scan(here)):
                    if entry.is_dir(follow_symlinks=False):
                        level.left.append(entry.name)
                    else:
                        unlink(here, entry.name)
            if level.left:
                sub = level.left.pop()
                try:
                    below = open_below(here, sub)
                except FileNotFoundError:
                    continue
                except JobError:  # no longer a directory (a link swapped in): removed itself, never followed
                    with suppress(OSError):
                        unlink(here, sub)
                    continue
                levels.append(_Level(sub, below))
                _hold(levels)
                continue
            levels.pop()
            here.close()
            if levels and levels[-1].dir is None:
                try:
                    _reopen(at, levels)
                except FileNotFoundError:  # its parent is gone, and it with it
                    continue
            parent = levels[-1].dir if levels else at
            assert parent is not None
            try:
                os.rmdir(level.name, dir_fd=parent.fd)
            except FileNotFoundError:
                pass
    finally:
        for level in levels:
            if level.dir is not None:
                level.dir.close()


def remove_below(root: str, path: str) -> None:
    """Remove ``path`` under ``root`` with :func:`remove_tree`, following no part below ``root``."""
    parts = os.path.relpath(path, root).split(os.sep)
    if ".." in parts or parts == ["."]:
        raise ValueError(f"{path} is not below {root}")
    try:
        at = open_dir(root, *parts[:-1])
    except FileNotFoundError:
        return
    with at:
        remove_tree(at, parts[-1])
