"""A per-user cache of what the finished records of a file store say.

A terminal record never changes state again [JOB-T1], yet a store of
100,000 records would otherwise be decoded whole by every ``claim --next``,
``orphans`` and worker start-up. This cache keeps, per store, a small
:class:`Summary` of each finished record beside that record file's
*identity* -- ``(st_ino, st_size, st_mtime_ns, st_ctime_ns)`` -- so a reader
``stat``\\ s the file instead of parsing it. Identity decides, always: the
file of a finished record can still be replaced (a renewal on a terminal
record is allowed [JOB-T6], and other implementations write the directory
knowing nothing of this cache), and a replaced file is read again.

Timestamps too coarse to see two changes in one tick are git's "racy index"
problem: a file whose change time is within :data:`RACY_NS` of the moment
the scan began is not remembered, because a second replacement in the same
tick (with a recycled inode and the same size) would look identical. The
kernel sets ``st_ctime`` on every rename and write and no caller can set it
back, so any change made after the scan began shows in it.

The store's ``jobs/`` directory has an identity too (device, inode, mtime,
ctime, link count, size). When it is unchanged, no entry was added, removed
or renamed, so the finished records are known without statting them
(:meth:`Summaries.fresh`, :meth:`Listed.fresh`). The same racy rule guards
it, with the scan's start as the cache's own write time: a directory changed
within :data:`RACY_NS` of that moment may change again within the same tick
without its identity showing it, so such a directory is not remembered and
the next call stats every file (git's racily clean index entry, re-checked).

The cache is optional and per user: ``<user cache dir>/summaries/<key>``
(platformdirs: ``~/.cache/jobctl`` on Linux), the key hashing the real path
and device/inode of the store's ``jobs/``. Directories are 0700 and files
0600, and a directory or file that is a link, not ours, or open to others
is not used -- nobody else can poison what we believe. Below the user cache
directory nothing is followed: ``jobctl/`` and ``summaries/`` are opened one
at a time with ``O_NOFOLLOW`` (:func:`_open_private`), and the files are
opened (``O_NONBLOCK``: a FIFO is never waited on), created and renamed
relative to the opened directory. A missing, unreadable, corrupt, malformed
or read-only cache costs speed, never an error or a wrong answer.
Writes are atomic (a temporary renamed into place).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import stat
import sys
import time
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress, islice
from operator import itemgetter
from typing import Any, NamedTuple

from .record import micros, moment

try:
    # The builtin BLAKE2 alone: hashlib loads OpenSSL first, milliseconds on every listing's start.
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b

__all__ = [
    "Summary",
    "Summaries",
    "States",
    "Listed",
    "RACY_NS",
    "default_dir",
    "settle",
    "micros",
    "moment",
]

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
#: A full check of at least this many rows shares its stats among processes (jobctl.fanout).
_CHECK_SHARED_FROM = 5_000
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
    return [name for name in os.listdir(fd) if name[-5:] == ".json" and name[0] != "."]


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


class States(dict[str, str]):
    """Every record's state, the finished ones' taken from the cache only when a look-up needs them.

    ``orphans`` never looks at a finished record's state, and ``claim --next``
    only at those its open jobs wait for: building a dict of 100,000 states
    would cost more than the rest of the call. The states set directly (the
    records read now) always win over the cache's. Every reading method
    fills the dict first, so it answers exactly as the filled dict would.
    """

    __slots__ = ("_fill",)

    def __init__(self, fill: Callable[[], dict[str, str]] | None = None) -> None:
        super().__init__()
        self._fill = fill

    def _load(self) -> None:
        fill = self._fill
        if fill is not None:
            self._fill = None
            read_now = dict(self.items())
            dict.update(self, fill())
            dict.update(self, read_now)

    def get(self, key: str, default: Any = None) -> Any:
        if self._fill is not None and not dict.__contains__(self, key):
            self._load()
        return dict.get(self, key, default)

    def __getitem__(self, key: str) -> str:
        if self._fill is not None and not dict.__contains__(self, key):
            self._load()
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        if self._fill is not None and not dict.__contains__(self, key):
            self._load()
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[str]:
        self._load()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._load()
        return dict.__len__(self)

    def __eq__(self, other: object) -> bool:
        self._load()
        if isinstance(other, States):
            other._load()
        return dict.__eq__(self, other)

    __hash__ = None  # a dict is unhashable; defining __eq__ says so again

    def __repr__(self) -> str:
        self._load()
        return dict.__repr__(self)

    def keys(self) -> Any:
        self._load()
        return dict.keys(self)

    def values(self) -> Any:
        self._load()
        return dict.values(self)

    def items(self) -> Any:
        if self._fill is not None:
            self._load()
        return dict.items(self)

    def copy(self) -> dict[str, str]:
        self._load()
        return dict(dict.items(self))

    def pop(self, key: str, *default: Any) -> Any:
        self._load()
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, str]:
        self._load()
        return dict.popitem(self)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._load()
        return dict.setdefault(self, key, default)

    def __delitem__(self, key: str) -> None:
        self._load()
        dict.__delitem__(self, key)

    def clear(self) -> None:
        self._fill = None
        dict.clear(self)

    def __reduce__(self) -> Any:
        self._load()
        return (dict, (dict(dict.items(self)),))


class Summaries:
    """What the last full scan of one store learnt, and what the current one learns.

    One file per store, ``<key>.open``, written by a full scan and read by
    every :meth:`jobctl.store.file.FileStore.list_open`: the length of its
    head (8 bytes, little-endian), the head marshalled, ``(version, byte
    order, real path of jobs/, identity of jobs/ or None when racy,
    others)``, then the rows marshalled, ``(names, states, codes, sizes,
    times)``. A call that finds ``jobs/`` unchanged reads the head alone;
    the rows are read (from the same open file) only when a full scan walks
    them or a look-up needs a finished record's state:

    ``others``
        the ids of the record files read on every call (open, unreadable,
        or too recent to trust), sorted -- all a call needs when ``jobs/``
        is unchanged;
    ``names``
        every record file name the scan met (``<id>.json``), joined by
        newlines, in the order ``os.scandir`` gave them: the next scan,
        walking the directory in (nearly always) the same order, compares
        each entry with the row it expects instead of looking it up;
    ``states``, ``codes``
        the state names, and one byte per row: its state's index there, or
        :data:`_OTHER` for a row that is read on every call;
    ``sizes``, ``times``
        packed arrays (``Q`` and ``q``, native byte order): each row's
        ``st_ino, st_size`` and ``st_mtime_ns, st_ctime_ns``. An other row's
        size is :data:`_NEVER`, which no file has, so it never matches.

    Loading it builds no object per record: the arrays are compared in
    place (``memoryview``), the names split only when a scan walks them,
    and the states built only when a look-up needs one (:class:`States`).
    A scan that confirms every row and meets no new name rewrites nothing
    but the directory's identity; the rows are rebuilt only when a record
    appeared, went, changed or ended.

    Nothing here raises: a cache that cannot be read is empty, one that
    cannot be written is not.
    """

    def __init__(self, directory: str | None, jobs_dir: str) -> None:
        self.directory = directory
        self.jobs_dir = jobs_dir
        self.real = ""
        self.base = ""
        self.dir_id: tuple[int, ...] | None = None
        self.others: list[str] = []
        self.dirty = False
        self._loaded = False
        self._text = ""  # the names, as stored
        self._names: list[str] | None = None
        self._table: list[str] = []
        self._codes = b""
        self._sizes_raw = self._times_raw = b""
        self._sizes: Any = memoryview(b"").cast("Q")
        self._times: Any = memoryview(b"").cast("q")
        self._n = 0
        self._finished = 0  # rows that are not _OTHER
        self._started = 0
        # What a scan (check) learns, in the order it met it: runs of confirmed rows, (start, end),
        # and the names it handed out to be read, whose rows remember() and other() make.
        self._plan: list[tuple[int, int] | str] = []
        self._jumps = self._unknown = self._met_other = 0
        self._new_at: dict[str, int] = {}
        self._new_codes = bytearray()
        self._new_sizes = array("Q")
        self._new_times = array("q")
        self._ended_other = self._remembered = 0
        self._rows_out: tuple[str, bytes, bytes, bytes] = ("", b"", b"", b"")  # what save() writes
        self._later = _Later()  # the rows of the file whose head was taken, not yet read

    @classmethod
    def load(
        cls, directory: str | None, jobs_dir: str, jobs_stat: os.stat_result | None, *, read: bool = True
    ) -> Summaries:
        """The cache for the store whose ``jobs/`` is ``jobs_dir`` (``read=False``: its name only)."""
        self = cls(directory, jobs_dir)
        if directory is None or jobs_stat is None:
            self.directory = None
            return self
        try:
            self.real = os.path.realpath(jobs_dir)
        except OSError:
            self.directory = None
            return self
        key = f"{self.real}\0{jobs_stat.st_dev}\0{jobs_stat.st_ino}".encode("utf-8", "surrogateescape")
        self.base = os.path.join(directory, blake2b(key, digest_size=16).hexdigest())
        if read:
            with _private_dir(directory, create=False) as at:
                if at >= 0:
                    self._take(*_load_head(at, os.path.basename(self.base) + ".open"))
        return self

    def _take(self, head: Any, later: _Later) -> None:
        """Believe ``head`` (of a loaded ``.open``) when it is whole and of this version; else stay empty.

        Its rows (``later``) are read when first needed (:meth:`_need_rows`):
        while ``jobs/`` is unchanged, a call needs only the head.
        """
        try:
            version, order, real, dir_id, others = head
        except (TypeError, ValueError):
            return
        if version != _VERSION or order != sys.byteorder or real != self.real:
            return
        if type(others) is not list or not all(type(job_id) is str for job_id in others):
            return
        try:
            self.dir_id = tuple(dir_id) if dir_id is not None else None
        except TypeError:
            return
        self.others, self._later = others, later

    def _need_rows(self) -> bool:
        """Read the rows of the head taken, once; True when they were whole (else the cache has none)."""
        later, self._later = self._later, _Later()
        rows = later.read()
        if rows is None:
            return self._loaded
        try:
            text, table, codes, sizes, times = rows
        except (TypeError, ValueError):
            return False
        if not (type(text) is str and type(table) is tuple):
            return False
        if not (type(codes) is bytes and type(sizes) is bytes and type(times) is bytes):
            return False
        # Split now: every use of the rows walks the names, and their count checks the rest.
        names = text.split("\n") if text else []
        n = len(names)
        if len(codes) != n or len(sizes) != 16 * n or len(times) != 16 * n or len(table) >= _OTHER:
            return False
        if not all(type(s) is str for s in table):
            return False
        if codes.translate(None, bytes([*range(len(table)), _OTHER])):
            return False  # a code naming no state
        names.append("/")  # the sentinel (see _rows)
        self._names = names
        self._text, self._table, self._codes = text, list(table), codes
        self._sizes_raw, self._times_raw = sizes, times
        self._sizes, self._times = memoryview(sizes).cast("Q"), memoryview(times).cast("q")
        self._n = n
        self._finished = n - codes.count(_OTHER)
        self._rows_out = (text, codes, sizes, times)
        self._loaded = True
        return True

    def _rows(self) -> list[str]:
        """The stored names, split once, with a sentinel after the last that no entry can equal."""
        if self._names is None:
            self._names = self._text.split("\n") if self._n else []
            self._names.append("/")
        return self._names

    def fresh(self, jobs_stat: os.stat_result) -> bool:
        """True when ``jobs/`` has not changed since the cache was written (no entry added, removed, renamed)."""
        return self.dir_id is not None and self.dir_id == _dir_identity(jobs_stat)

    def _states_where(self, mask: bytes | bytearray) -> dict[str, str]:
        """The state of every row whose byte in ``mask`` is set (never an other row's: callers mask those)."""
        names = self._rows()
        table = self._table
        return dict(
            zip(map(_ID, compress(names, mask)), map(table.__getitem__, compress(self._codes, mask)), strict=True)
        )

    def states(self) -> dict[str, str]:
        """Every finished record's state as the cache knows it (none when its rows cannot be read)."""
        self._need_rows()
        return self._states_where(self._codes.translate(_FINISHED))

    def lazy_states(self, fallback: Callable[[], dict[str, str]]) -> States:
        """:meth:`states`, built only when a look-up needs a finished record's state.

        The head vouched for them; should the rows behind it turn out
        unreadable when they are needed at last, ``fallback`` (every record
        read) answers instead -- slower, never different.
        """
        return States(lambda: self.states() if self._need_rows() else fallback())

    def confirmed_states(self) -> States:
        """After :meth:`check`: the states of the rows it confirmed, built only when a look-up needs one."""

        def fill() -> dict[str, str]:
            mask = bytearray(self._n)
            for item in self._plan:
                if type(item) is tuple:
                    a, b = item
                    mask[a:b] = b"\x01" * (b - a)
            return self._states_where(mask)

        return States(fill)

    def check(self, fd: int) -> Iterator[str]:
        """A full scan of ``jobs/`` (open as ``fd``): the id of every record file the cache cannot vouch for.

        A row is confirmed when the entry at its name is a regular file of
        the row's identity; every other record name is handed out, and the
        caller reads it and says what it was (:meth:`remember`,
        :meth:`other`, or nothing when it went away) before asking for the
        next. The entries come in the order the rows were stored in (the
        directory's own order, which a rename over an existing name or a new
        name elsewhere leaves as it was), so each is compared with the row
        expected next; one that is not there is looked up among all of them.
        """
        self._started = time.time_ns()
        self._need_rows()
        if not self._n:
            # Nothing cached: every record name is handed out, in the directory's order, unstatted.
            met = _record_names(fd)
            self._plan.extend(met)
            self._unknown += len(met)
            for name in met:
                yield name[:-5]
            return
        yield from self._check_rows(fd)

    def _check_rows(self, fd: int) -> Iterator[str]:
        """:meth:`check` against the rows: every record name statted, the stats shared among processes.

        The directory is read here (one read of it is the only order there
        is), and each record name's row found: mostly the row after the last
        one's. The names are statted in contiguous pieces, shared among
        processes (:func:`jobctl.fanout.share_out`) when there are at least
        :data:`_CHECK_SHARED_FROM` rows, in this one otherwise; a piece's
        answer is the positions whose file is not its row's, or is gone. An
        answer that is not a list of positions inside its piece is not
        believed: every name of that piece is handed out to be read. Then the
        names are walked in the directory's order, building the plan (the
        runs of rows confirmed, and the names to be read in between) and
        handing out each name to be read.
        """
        names = self._rows()
        listed = _record_names(fd)
        # Each listed name's row (-1: none), in the directory's order: mostly the row after the last.
        rows = array("q", bytes(8 * len(listed)))
        index: dict[str, int] | None = None
        k = 0
        for p, name in enumerate(listed):
            if name != names[k]:
                if index is None:
                    index = dict(zip(names, range(self._n), strict=False))  # not the sentinel
                at = index.get(name)
                if at is None:
                    rows[p] = -1
                    continue
                k = at
            rows[p] = k
            k += 1
        sizes, times = self._sizes, self._times

        def changed(piece: Sequence[int]) -> list[int]:
            """The positions in ``piece`` whose file is not its row's (``~p``: gone)."""
            out = []
            lstat = os.stat
            for p in piece:
                at = rows[p]
                if at < 0:
                    continue
                try:
                    st = lstat(listed[p], dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:  # removed since the directory was read
                    out.append(~p)
                    continue
                j = at + at
                if not (
                    st.st_ctime_ns == times[j + 1]
                    and st.st_mtime_ns == times[j]
                    and st.st_size == sizes[j + 1]
                    and st.st_ino == sizes[j]
                    and st.st_mode & _S_IFMT == _S_IFREG
                ):
                    out.append(p)
            return out

        from . import fanout

        verdict = bytearray(len(listed))  # 0: its row's, 1: another file (read it), 2: gone
        count = None if self._n >= _CHECK_SHARED_FROM else 1
        with contextlib.closing(fanout.share_out(range(len(listed)), changed, [fd], count=count)) as answers:
            for _index, piece, answer in answers:
                assert isinstance(piece, range)
                if type(answer) is list and all(type(p) is int and (p if p >= 0 else ~p) in piece for p in answer):
                    for p in answer:
                        verdict[p if p >= 0 else ~p] = 1 if p >= 0 else 2
                else:
                    verdict[piece.start : piece.stop] = b"\1" * len(piece)
        codes, plan = self._codes, self._plan
        k = start = 0
        for p, name in enumerate(listed):
            at = rows[p]
            if at != k:  # check's name != expect: a name not in the rows, or a row further off
                if start < k:
                    plan.append((start, k))
                if at < 0:
                    self._unknown += 1
                    plan.append(name)
                    start = k
                    yield name[:-5]
                    continue
                self._jumps += 1
                k = start = at
            if not verdict[p]:
                k += 1
                continue
            if start < k:
                plan.append((start, k))
            k += 1
            start = k
            if verdict[p] == 1:
                self._met_other += codes[at] == _OTHER
                plan.append(name)
                yield name[:-5]
        if start < k:
            plan.append((start, k))

    def confirmed_any(self) -> bool:
        """After :meth:`check`: True when it confirmed a row, False when it handed out every record name."""
        return any(type(item) is tuple for item in self._plan)

    def _add(self, job_id: str, code: int, sizes: tuple[int, int], times: tuple[int, int]) -> None:
        self._new_at[job_id + ".json"] = len(self._new_codes)
        self._new_codes.append(code)
        self._new_sizes.extend(sizes)
        self._new_times.extend(times)

    def remember(self, job_id: str, st: os.stat_result, state: str | None) -> None:
        """What was just read of ``job_id`` (``st`` from the open file; ``state`` None unless finished)."""
        if self.directory is None:
            return
        mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
        code = self._code(state, mtime, ctime)
        if code == _OTHER:
            self.other(job_id)
            return
        self._remembered += 1
        self._add(job_id, code, (st.st_ino, st.st_size), (mtime, ctime))

    def _code(self, state: str | None, mtime: int, ctime: int) -> int:
        """A row's code: its state's index in the table (added while there is room), else :data:`_OTHER`.

        :data:`_OTHER` (read on every call) for an open record (state None),
        a file changed too recently to trust (:func:`too_recent` of this
        scan), or a state a full table cannot take.
        """
        if state is None or too_recent(mtime, ctime, self._started):
            return _OTHER
        table = self._table
        try:
            return table.index(state)
        except ValueError:
            if len(table) >= _OTHER - 1:
                return _OTHER
            table.append(state)
            return len(table) - 1

    def rows_of(self, read: list[tuple[str, str | None, tuple[int, int, int, int]]]) -> Rows:
        """The rows :meth:`remember` makes of each of ``read``, in its order, as plain data (:data:`Rows`).

        Each is ``(job_id, state or None, (st_ino, st_size, st_mtime_ns, st_ctime_ns))``.

        Made where the records were read -- in a child of a shared scan
        (:mod:`jobctl.fanout`), which marshals them back -- and taken in the
        scanning process by :meth:`take_rows`. A state this cache's table
        lacks is added to the table here (:meth:`_code`); the table is sent
        with the rows, so that their codes can be read in a process whose
        table differs.
        """
        names: list[str] = []
        codes, sizes, times = bytearray(), array("Q"), array("q")
        code_of = self._code
        remembered = 0
        for job_id, state, (ino, size, mtime, ctime) in read:
            names.append(job_id + ".json")
            code = code_of(state, mtime, ctime)
            codes.append(code)
            if code == _OTHER:  # as other() makes it: a size no file has
                sizes.extend((0, _NEVER))
                times.extend((0, 0))
                continue
            remembered += 1
            sizes.extend((ino, size))
            times.extend((mtime, ctime))
        return names, bytes(codes), sizes.tobytes(), times.tobytes(), remembered, tuple(self._table)

    @property
    def started(self) -> int:
        """When the scan begun by :meth:`check` began (ns): what :func:`too_recent` judges a file by."""
        return self._started

    def take_rows(self, rows: Rows | None) -> bool:
        """Add rows made by :meth:`rows_of` (here or in a child); False, adding nothing, when they are malformed."""
        if self.directory is None:
            return True
        if rows is None:
            return False
        try:
            names, codes, sizes, times, remembered, table = rows
            n = len(names)
            if not (
                type(names) is list
                and type(codes) is bytes
                and type(sizes) is bytes
                and type(times) is bytes
                and type(table) is tuple
                and len(codes) == n
                and len(sizes) == len(times) == 16 * n
                and type(remembered) is int
                and 0 <= remembered <= n
                and set(map(type, names)) <= _ONLY_STR
                and set(map(type, table)) <= _ONLY_STR
            ):
                return False
        except (TypeError, ValueError):
            return False
        mine = self._table
        if list(table) != mine[: len(table)]:
            # Made with another table (a child added a state this process has not met): its codes mapped.
            mapping = bytearray(range(256))
            for code, state in enumerate(table):
                if state in mine:
                    mapping[code] = mine.index(state)
                elif len(mine) < _OTHER - 1:
                    mapping[code] = len(mine)
                    mine.append(state)
                else:
                    mapping[code] = _OTHER
            codes = codes.translate(mapping)
            if _OTHER in mapping[: len(table)]:  # the table is full: such rows are read on every call
                packed = array("Q", sizes)
                for at, code in enumerate(codes):
                    if code == _OTHER and packed[2 * at + 1] != _NEVER:
                        packed[2 * at : 2 * at + 2] = array("Q", (0, _NEVER))
                        remembered -= 1
                sizes = packed.tobytes()
        base = len(self._new_codes)
        self._new_at.update(zip(names, range(base, base + n), strict=True))
        self._new_codes += codes
        self._new_sizes.frombytes(sizes)
        self._new_times.frombytes(times)
        self._remembered += remembered
        self._ended_other += n - remembered
        return True

    def other(self, job_id: str) -> None:
        """A record file to read on every call."""
        if self.directory is None:
            return
        self._ended_other += 1
        self._add(job_id, _OTHER, (0, _NEVER), (0, 0))

    def finish(self, jobs_stat: os.stat_result) -> None:
        """End a full scan; ``jobs_stat`` is the directory as statted before it began."""
        if self.directory is None:
            return
        dir_id: tuple[int, ...] | None = _dir_identity(jobs_stat)
        if too_recent(jobs_stat.st_mtime_ns, jobs_stat.st_ctime_ns, self._started):
            dir_id = None  # changed within a tick of the scan: the next call must look
        confirmed = sum(item[1] - item[0] for item in self._plan if type(item) is tuple)
        same_rows = (
            self._loaded
            and not self._jumps
            and not self._unknown
            and not self._remembered
            and confirmed == self._finished
            # every other row met again, and each still to be read on every call:
            and self._met_other == self._n - self._finished == self._ended_other
        )
        if not same_rows:
            self._rows_out = self._rebuild()
            self.dirty = True
        elif dir_id != self.dir_id:
            self.dirty = True
        self.dir_id = dir_id

    def _rebuild(self) -> tuple[str, bytes, bytes, bytes]:
        """The rows as this scan met them: the confirmed runs, and what was read in between.

        Sets :attr:`others` from them; returns ``(names, codes, sizes, times)`` as stored.
        """
        new_at, new_codes, new_sizes, new_times = self._new_at, self._new_codes, self._new_sizes, self._new_times
        if len(new_at) == len(new_codes) == len(self._plan) and list(new_at) == self._plan:
            # Every name was handed out and read, and the rows were made in the order met (a cold
            # scan): they are the new rows as they stand.
            self.others = sorted(_ID(name) for name, code in zip(self._plan, new_codes, strict=True) if code == _OTHER)
            met: list[str] = self._plan  # type: ignore[assignment]  # names alone: it equals new_at's keys
            return "\n".join(met), bytes(new_codes), new_sizes.tobytes(), new_times.tobytes()
        names = self._rows()
        codes, sizes, times = bytearray(), array("Q"), array("q")
        out: list[str] = []
        taken = bytearray(self._n) if self._jumps else None  # a jump back must not repeat a row

        def run(a: int, b: int) -> None:
            out.extend(names[a:b])
            codes.extend(self._codes[a:b])
            sizes.frombytes(self._sizes_raw[16 * a : 16 * b])
            times.frombytes(self._times_raw[16 * a : 16 * b])

        for item in self._plan:
            if isinstance(item, str):
                i = new_at.pop(item, None)  # None: gone before it was read, or met twice
                if i is not None:
                    out.append(item)
                    codes.append(new_codes[i])
                    sizes.extend(new_sizes[2 * i : 2 * i + 2])
                    times.extend(new_times[2 * i : 2 * i + 2])
                continue
            a, b = item
            if taken is None:
                run(a, b)
            elif not any(taken[a:b]):
                taken[a:b] = b"\x01" * (b - a)
                run(a, b)
            else:
                for x in range(a, b):
                    if not taken[x]:
                        taken[x] = 1
                        run(x, x + 1)
        self.others = sorted(_ID(name) for name, code in zip(out, codes, strict=True) if code == _OTHER)
        return "\n".join(out), bytes(codes), sizes.tobytes(), times.tobytes()

    def save(self) -> None:
        """Write the cache when this scan changed it (atomically: a temporary renamed into place)."""
        if not self.dirty or self.directory is None or not self.base:
            return
        name = os.path.basename(self.base)
        with _private_dir(self.directory, create=True) as at:
            if at < 0:
                return
            text, codes, sizes, times = self._rows_out
            head = (_VERSION, sys.byteorder, self.real, self.dir_id, self.others)
            if _save_file(at, name + ".open", head, (text, tuple(self._table), codes, sizes, times)):
                self.dirty = False
                if not self._loaded:
                    try:  # the second part of the cache of jobctl 0.x before version 4: no longer read
                        os.unlink(name + ".stat", dir_fd=at)
                    except OSError:
                        pass


_new = tuple.__new__
_FIELDS = len(Summary._fields)


def _well_formed(others: Any, rows: Any, idents: Any) -> bool:
    """Whether a loaded listing part has the shape :meth:`Listed.save` gives it (its seal vouches for the rest).

    ``others`` strictly ascending strings (which the walk's merge relies on
    to name each record once), the rows and their identities lists of one
    length. What each row holds was checked when it was written: the part is
    sealed (:func:`_load_sealed`), so a part damaged since is not read at all.
    """
    if not (type(others) is list and type(rows) is list and type(idents) is list and len(rows) == len(idents)):
        return False
    return set(map(type, others)) <= _ONLY_STR and all(map(str.__lt__, others, islice(others, 1, None)))


class Listed:
    """The ``<key>.list`` part: a :class:`Summary` of each finished record, for a whole listing.

    Kept apart from the ``.open``/``.stat`` parts (which picking reads on
    every call) because it is larger. Self-contained: each summary carries
    the identity of the file it was taken from, and the part carries the
    identity of ``jobs/`` as the listing that wrote it saw it (None when
    racy) and ``others``, every other record name it met (open, unreadable,
    too recent to trust). While ``jobs/`` keeps that identity, a listing
    takes the names from here and the summaries without a ``stat``
    (:meth:`fresh`); otherwise each file's identity is compared.

    Laid out for loading: the summaries as a list of plain tuples in id
    order beside a list of identity strings -- a marshalled dict of 100,000
    entries costs twice as much to load.
    """

    def __init__(self, base: str, directory: str | None, real: str) -> None:
        settle()  # a listing part still being written aside by this process is read whole
        self.base, self.directory, self.real = base, directory, real
        #: The summaries' fields, in id order, and beside each the identity of its file (:func:`ident`).
        self.rows: list[tuple[Any, ...]] = []
        self.idents: list[str] = []
        self.others: list[str] = []
        self.dir_id: tuple[int, ...] | None = None
        self._index: dict[str, int] | None = None
        self.seen: dict[str, tuple[str, tuple[Any, ...]]] = {}  # what this listing confirmed or learnt
        self._others: list[str] = []
        self._fresh = False
        self.dirty = False
        self._started = time.time_ns()
        if directory is None or not base:
            self.directory = None
            return
        with _private_dir(directory, create=False) as at:
            if at < 0:
                return
            data = _load_sealed(at, os.path.basename(base) + ".list")
        try:
            version, real_path, dir_id, others, rows, idents = data
            if version == _VERSION and real_path == real and _well_formed(others, rows, idents):
                self.rows, self.idents, self.others = rows, idents, others
                self.dir_id = tuple(dir_id) if dir_id is not None else None
        except (TypeError, ValueError):
            self.rows, self.idents, self.others = [], [], []

    @classmethod
    def of(cls, summaries: Summaries) -> Listed:
        return cls(summaries.base, summaries.directory, summaries.real)

    def forget(self) -> None:
        """Neither believe nor write this part (a listing that needs whole records)."""
        self.directory = None
        self.rows, self.idents, self.others, self.dir_id = [], [], [], None

    def fresh(self, jobs_stat: os.stat_result) -> bool:
        """True when ``jobs/`` has not changed since this part was written: see :meth:`walk`."""
        self._fresh = self.dir_id is not None and self.dir_id == _dir_identity(jobs_stat)
        return self._fresh

    def walk(self) -> Iterator[Summary | str]:
        """Only while :meth:`fresh`: every record name as written, in id order, without a ``stat``.

        A summarised record comes as its :class:`Summary`; any other (to be
        read whole) as its id.
        """
        others = self.others  # checked when loaded (_well_formed), the rows sealed: the merge meets each name once
        k, n = 0, len(others)
        for fields in self.rows:
            job_id = fields[0]
            while k < n and others[k] < job_id:
                yield others[k]
                k += 1
            yield _new(Summary, fields)
        while k < n:
            yield others[k]
            k += 1

    def lookup(self, job_id: str, st: os.stat_result) -> Summary | None:
        """The summary of ``job_id`` when its file (``lstat``) is still the one summarised."""
        index = self._index
        if index is None:
            index = self._index = {}
            for i, fields in enumerate(self.rows):
                try:
                    index[fields[0]] = i
                except (TypeError, IndexError, KeyError):
                    pass
        at = index.get(job_id)
        if at is None:
            return None
        seen = ident(st)
        fields = self.rows[at]
        if self.idents[at] != seen or len(fields) != _FIELDS:
            return None
        self.seen[job_id] = (seen, fields)
        return _new(Summary, fields)

    def remember(self, summary: Summary, st: os.stat_result) -> None:
        """A finished record just read (``st`` from the open file); racy ones are only named."""
        self.remember_all([(summary, st)])

    def remember_all(self, read: Iterable[tuple[Summary, Any]]) -> None:
        """:meth:`remember` of each ``(summary, status)`` (a status: what has ``st_ino`` ... ``st_ctime_ns``)."""
        started = self._started
        seen, others = self.seen, self._others
        for summary, st in read:
            if too_recent(st.st_mtime_ns, st.st_ctime_ns, started):
                others.append(summary[0])
                continue
            # The summary as built (jobctl.store.file.summary_of interns the strings most records share,
            # so they are marshalled and loaded once), as a plain tuple: marshal takes no subclass.
            seen[summary[0]] = (ident(st), tuple(summary))
            self.dirty = True

    def remember_made(self, pieces: Iterable[list[tuple[tuple[Any, ...], Any, str | None]]]) -> None:
        """:meth:`remember_all` of summaries made where they were read (a piece of a shared scan).

        Each is ``(fields, identity, text)``: the text (:func:`ident_text`) is
        None for a file that changed within :data:`RACY_NS` of the scan's
        start, which is before this listing's, so it is named among the others.
        """
        seen, others = self.seen, self._others
        for made in pieces:
            for fields, _, text in made:
                if text is None:
                    others.append(fields[0])
                else:
                    seen[fields[0]] = (text, fields)
                    self.dirty = True

    def other(self, job_id: str) -> None:
        """A record name read whole on every listing (open, unreadable, odd)."""
        self._others.append(job_id)

    def save(self, jobs_stat: os.stat_result | None, *, aside: bool = True) -> None:
        """Write what this listing saw, when it differs from what was loaded.

        ``jobs_stat`` is ``jobs/`` as statted before the listing began (None:
        unknown, so never trusted as unchanged). Thousands of rows are
        written aside (:func:`now_or_aside`) unless ``aside`` is False.
        """
        if self.directory is None:
            return
        dir_id: tuple[int, ...] | None = None
        if jobs_stat is not None and not too_recent(jobs_stat.st_mtime_ns, jobs_stat.st_ctime_ns, self._started):
            dir_id = _dir_identity(jobs_stat)
        # Once each, and in order: what _well_formed asks of a part read back.
        others = self._others = sorted(set(self._others))
        if self._fresh:
            # Walked, not statted: every row still holds, and whatever was remembered joins them.
            if not self.dirty and others == self.others and dir_id == self.dir_id:
                return
            seen = {fields[0]: (known, fields) for known, fields in zip(self.idents, self.rows, strict=True)}
            seen.update(self.seen)
        else:
            if not self.dirty and len(self.seen) == len(self.rows) and others == self.others and dir_id == self.dir_id:
                return
            seen = self.seen
        directory, name, head = (
            self.directory,
            os.path.basename(self.base) + ".list",
            (_VERSION, self.real, dir_id, others),
        )

        def write() -> None:
            order = sorted(seen)
            if others and not seen.keys().isdisjoint(others):
                named = set(others)  # read whole every time (too recent to trust, say): no summary of it kept
                order = [job_id for job_id in order if job_id not in named]
            rows = [seen[job_id][1] for job_id in order]
            idents = [seen[job_id][0] for job_id in order]
            with _private_dir(directory, create=True) as at:
                if at >= 0:
                    _save_file(at, name, (*head, rows, idents), sealed=True)

        if aside:
            now_or_aside(write, len(seen))
        else:
            write()


#: A listing part of at least this many summaries is written aside (jobctl.fanout.aside).
_ASIDE_FROM = 2000


def now_or_aside(work: Callable[[], object], rows: int) -> None:
    """Run ``work`` (which writes the listing part), in a forked child when it has ``rows`` in the thousands.

    Thousands of rows take a good part of a second to sort, marshal and
    write: in a child of this process when it can fork, while this one
    prints the listing (:func:`jobctl.fanout.aside`); here otherwise.
    """
    if rows >= _ASIDE_FROM:
        from . import fanout  # only a listing of thousands loads it

        if fanout.aside(work):
            return
    work()


def settle() -> None:
    """Wait for any listing part this process is writing aside (nothing to wait for unless it started one).

    A listing of thousands calls it once its lines are out, before it lets go
    of what it read: what a process frees while a forked child still shares
    its memory is copied first, page by page.
    """
    fanout = sys.modules.get("jobctl.fanout")
    if fanout is not None:
        fanout.settle()


def ident(st: os.stat_result) -> str:
    """``"<st_ino> <st_size> <st_mtime_ns> <st_ctime_ns>"``: a record file's identity, as ``.list`` keeps it."""
    return ident_text(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def ident_text(ino: int, size: int, mtime: int, ctime: int) -> str:
    """:func:`ident` of the four numbers."""
    return f"{ino} {size} {mtime} {ctime}"
