"""The cache's files: their layout, where they live, and how they are opened, read, written and sealed.

Every file is opened relative to a private directory opened without
following links (:func:`_open_private`), believed only when it is ours alone,
and replaced atomically (:func:`_save_file`). The racy rule
(:func:`too_recent`) and the identities of files and of ``jobs/`` are the
format's too: every row, listing summary and directory identity kept obeys them.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from operator import itemgetter
from typing import Any, NamedTuple

from .. import fsio

#: A change this close to the start of a scan may share a timestamp tick with a
#: later one; such a file is read every time until it is older. Two seconds
#: covers FAT's granularity and modest clock skew on a network filesystem.
RACY_NS = 2_000_000_000

#: The layout of the cache files; one of another version is ignored, and replaced when written.
#: 5: ``.open`` as a head (what an unchanged directory needs) and its rows after it, read only when needed;
#: 4: ``.open`` alone, rows packed (see :class:`Summaries`); 3 had ``.open`` and ``.stat``, one string per record.
_VERSION = 5
#: A cache file with a head starts with the head's marshalled length in this many bytes (little-endian).
_SEAL = 4  # bytes of a sealed file's CRC-32 (_save_file)
_HEAD_LENGTH = 8
#: The code of a row read on every call, and its size: st_size is a signed 64-bit off_t, so no file has it.
_OTHER = 255
_NEVER = (1 << 64) - 1
#: Rows of the cache as :meth:`Summaries.rows_of` makes them, marshallable: ``(names, codes, sizes, times,
#: how many are not other rows, the state table the codes index)``, the last three as stored.
Rows = tuple[list[str], bytes, bytes, bytes, int, tuple[str, ...]]
_ONLY_STR = frozenset((str,))
_FINISHED = bytes([1] * _OTHER + [0])  # codes -> 1 for a finished record's row, 0 for an other row
_ID = itemgetter(slice(None, -5))  # "<id>.json" -> "<id>"
_S_IFMT = 0o170000
_S_IFREG = stat.S_IFREG
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: The user cache directory, opened as named; each directory below it, never through a link.
_DIR_OPEN = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC
_DIR_BELOW = _DIR_OPEN | _O_NOFOLLOW
#: A cache file: never through a link, never waiting (a FIFO planted there opens at once, and fstat refuses it).
_FILE_OPEN = os.O_RDONLY | _O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | _O_CLOEXEC


class Summary(NamedTuple):
    """What ``jobctl list`` shows of a finished record, without its spec or scheduling data."""

    id: str
    kind: str
    state: str
    done: int
    total: int
    owner: str
    epoch: int
    error: str
    checkpoint: str | None  # the compact text as read; None when absent
    created: int  # created_at in microseconds since 1970 (1970 itself when absent): list orders by it
    expires: int  # lease.expires_at likewise (0 when unset): list names a lease run too far ahead


def too_recent(mtime: int, ctime: int, started: int) -> bool:
    """Whether a file (or ``jobs/``) with these times changed within :data:`RACY_NS` of ``started`` or later.

    ``started`` is the scan's start (``time.time_ns()``). Such a change may
    share a timestamp tick with one still to come, so the identity read
    now cannot stand for the contents: what has it is read again next time.
    The one rule for every row, listing summary and directory identity kept.
    """
    recent = started - RACY_NS
    return mtime >= recent or ctime >= recent


def _dir_identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_nlink, st.st_size)


def _record_names(fd: int) -> list[str]:
    """The record files' names in the directory open as ``fd`` (``<id>.json``), in the directory's order."""
    return [name for name in fsio.names(fd) if name[-5:] == ".json" and name[0] != "."]


#: The names a batch of :func:`_record_batches` holds (the last one fewer).
_BATCH = 1024


def _record_batches(fd: int) -> Iterator[list[str]]:
    """:func:`_record_names`, a batch at a time as the directory is read: what comes first is at work sooner."""
    batch: list[str] = []
    for entry in fsio.entries(fd):
        name = entry.name
        if name[-5:] == ".json" and name[0] != ".":
            batch.append(name)
            if len(batch) >= _BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


def default_dir() -> str:
    """``<user cache dir>/jobctl/summaries``: per user, never shared.

    On Linux and the BSDs the XDG rule platformdirs follows, spelt out here:
    platformdirs costs a cron job tens of milliseconds to import, more than
    the cache saves on a small store. Elsewhere, platformdirs decides.
    """
    if sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.expanduser("~/.cache")
        return os.path.join(base, "jobctl", "summaries")
    import platformdirs

    return os.path.join(platformdirs.user_cache_dir("jobctl", appauthor=False), "summaries")


def _open_private(directory: str, create: bool) -> int:
    """A descriptor of the cache directory ``directory`` when it is ours alone; -1 when it is not (or is missing).

    The user cache directory above ``jobctl/`` (``$XDG_CACHE_HOME``, or the
    directory above a ``summaries=`` path) is opened as named: the user chose
    it. Every component below it is opened relative to its parent with
    ``O_NOFOLLOW`` (and, with ``create``, made 0700 when missing), so a link
    planted at ``jobctl`` or ``summaries`` is never followed, and each must be
    a directory of ours that nobody else may write (``summaries`` itself:
    nobody else may even enter). The caller then opens, creates and renames
    its files relative to the descriptor, so nothing is resolved by path.
    """
    root, last = os.path.split(os.path.normpath(directory))
    parts = [last]
    above, name = os.path.split(root)
    if name == "jobctl":  # <user cache dir>/jobctl/summaries: jobctl/ is ours too
        root, parts = above, ["jobctl", last]
    root = root or "."
    if not last or last in (".", ".."):
        return -1
    try:
        fd = os.open(root, _DIR_OPEN)
    except FileNotFoundError:
        if not create:
            return -1
        try:  # the user cache directory itself is the user's path: made as named
            os.makedirs(root, mode=0o700, exist_ok=True)
            fd = os.open(root, _DIR_OPEN)
        except OSError:
            return -1
    except OSError:
        return -1
    uid = os.geteuid()
    try:
        for i, part in enumerate(parts, 1 - len(parts)):  # i == 0: the last, summaries/ itself
            try:
                below = os.open(part, _DIR_BELOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return -1
                with contextlib.suppress(FileExistsError):  # made meanwhile: the open below judges it
                    os.mkdir(part, 0o700, dir_fd=fd)
                below = os.open(part, _DIR_BELOW, dir_fd=fd)
            os.close(fd)
            fd = below
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & (0o022 if i else 0o077):
                return -1  # not ours alone: neither believed nor written
        found, fd = fd, -1
        return found
    except OSError:  # a link (ELOOP), not a directory (ENOTDIR), unreadable, ...
        return -1
    finally:
        if fd >= 0:
            os.close(fd)


@contextlib.contextmanager
def _private_dir(directory: str, create: bool) -> Iterator[int]:
    """:func:`_open_private` for a ``with`` block (closed at its end); -1 when the cache is not to be used."""
    fd = _open_private(directory, create)
    try:
        yield fd
    finally:
        if fd >= 0:
            os.close(fd)


def _load_sealed(at: int, name: str) -> Any:
    """The unmarshalled content of the sealed cache file ``name`` in ``at`` (:func:`_save_file`), or None.

    None for a file that is not ours alone, and for one whose content is
    not what its seal says was written (damaged since, or written by
    anything but :func:`_save_file`).
    """
    try:
        fd = os.open(name, _FILE_OPEN, dir_fd=at)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None  # not ours alone: never believed
        # One read of the whole file (a byte more, to see the end): megabytes at 100,000 records,
        # which read in chunks and joined cost several times as much.
        chunks = [os.read(fd, st.st_size + 1)]
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = memoryview(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if len(data) < _SEAL or zlib.crc32(data[_SEAL:]) != int.from_bytes(data[:_SEAL], "little"):
            return None
        return marshal.loads(data[_SEAL:])
    except (OSError, ValueError, EOFError, TypeError):
        return None
    finally:
        os.close(fd)


class _Later:
    """The rows of a cache file whose head was read: read from that very file, the first time they are needed.

    The file stays open until then (and is closed when this is dropped), so
    the rows are those written with the head even if the cache has been
    replaced since.
    """

    __slots__ = ("_fd", "_offset")

    def __init__(self, fd: int = -1, offset: int = 0) -> None:
        self._fd = fd
        self._offset = offset

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def read(self) -> Any:
        """The unmarshalled rows; None when they cannot be read (or were read already)."""
        fd, offset = self._fd, self._offset
        if fd < 0:
            return None
        try:
            size = os.fstat(fd).st_size - offset
            data = os.pread(fd, size, offset) if size > 0 else b""
            while 0 < len(data) < size:
                more = os.pread(fd, size - len(data), offset + len(data))
                if not more:
                    return None
                data += more
            return marshal.loads(data)
        except (OSError, ValueError, EOFError, TypeError):
            return None
        finally:
            self.close()


def _load_head(at: int, name: str) -> tuple[Any, _Later]:
    """The head of the cache file ``name`` in ``at`` when it is ours alone, and its rows to read later.

    ``(None, nothing)`` for anything else.
    """
    nothing = _Later()
    try:
        fd = os.open(name, _FILE_OPEN, dir_fd=at)
    except OSError:
        return None, nothing
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None, nothing  # not ours alone: never believed
        first = os.read(fd, 1 << 16)
        end = _HEAD_LENGTH + int.from_bytes(first[:_HEAD_LENGTH], "little")
        if len(first) < _HEAD_LENGTH or end > st.st_size:
            return None, nothing
        while len(first) < end:
            more = os.read(fd, end - len(first))
            if not more:
                return None, nothing
            first += more
        head = marshal.loads(memoryview(first)[_HEAD_LENGTH:end])
        later = _Later(fd, end)
        fd = -1  # the rows' now
        return head, later
    except (OSError, ValueError, EOFError, TypeError):
        return None, nothing
    finally:
        if fd >= 0:
            os.close(fd)


def _save_file(at: int, name: str, value: Any, rows: Any = None, *, sealed: bool = False) -> bool:
    """Replace ``name`` in ``at`` atomically with ``value`` marshalled, 0600; False when that failed.

    With ``rows``: ``value`` is a head, written after its length and before
    the rows, so that a reader can take the head alone (:func:`_load_head`).
    ``sealed``: the marshalled bytes follow their CRC-32, so that a reader
    of the whole file (:func:`_load_sealed`) believes only what was written
    -- checked in a few milliseconds at 100,000 rows, where checking every
    row's fields cost tens.
    """
    tmp = f"{name}.{os.urandom(5).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_NOFOLLOW, 0o600, dir_fd=at)
    except OSError:
        return False
    try:
        try:
            data = marshal.dumps(value)
            if rows is not None:
                data = len(data).to_bytes(_HEAD_LENGTH, "little") + data + marshal.dumps(rows)
            if sealed:
                data = zlib.crc32(data).to_bytes(_SEAL, "little") + data
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=at, dst_dir_fd=at)
        return True
    except (OSError, ValueError):
        try:
            os.unlink(tmp, dir_fd=at)
        except OSError:
            pass
        return False


def ident(st: os.stat_result) -> str:
    """``"<st_ino> <st_size> <st_mtime_ns> <st_ctime_ns>"``: a record file's identity, as ``.list`` keeps it."""
    return ident_text(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def ident_text(ino: int, size: int, mtime: int, ctime: int) -> str:
    """:func:`ident` of the four numbers."""
    return f"{ino} {size} {mtime} {ctime}"
