"""Reading the ``.open`` part: what the last full scan of a store learnt, believed only when whole."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from itertools import compress
from typing import Any, TypeVar

from . import cachefile
from .cachefile import _FINISHED, _ID, _OTHER, _VERSION, _Later, _load_head, _private_dir
from .states import States

try:
    # The builtin BLAKE2 alone: hashlib loads OpenSSL first, milliseconds on every listing's start.
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b

#: The class :meth:`StoredRows.load` is called on (the scan's :class:`jobctl.summary.Summaries`).
_Rows = TypeVar("_Rows", bound="StoredRows")


class StoredRows:
    """What the last full scan of one store learnt: the ``.open`` part, read (:class:`Summaries` writes it).

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
        self._rows_out: tuple[str, bytes, bytes, bytes] = ("", b"", b"", b"")  # what save() writes
        self._later = _Later()  # the rows of the file whose head was taken, not yet read

    @classmethod
    def load(
        cls: type[_Rows], directory: str | None, jobs_dir: str, jobs_stat: os.stat_result | None, *, read: bool = True
    ) -> _Rows:
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
        return self.dir_id is not None and self.dir_id == cachefile._dir_identity(jobs_stat)

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
