"""The ``.list`` part: a summary of each finished record, for a whole listing, read and written."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import Any

from . import cachefile
from .cachefile import _ONLY_STR, _VERSION, Summary, _load_sealed, _private_dir, _save_file, ident, too_recent
from .scan import Summaries

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
        self._fresh = self.dir_id is not None and self.dir_id == cachefile._dir_identity(jobs_stat)
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

    def remember_made(self, pieces: Iterable[list[tuple[Any, ...]]], texts: Mapping[str, str]) -> None:
        """:meth:`remember_all` of summaries made where they were read (a piece of a shared scan).

        Each is a summary's fields; ``texts`` holds the identity of each file
        the scan's cache rows remember (:meth:`Summaries.ident_texts`), as
        :func:`ident_text` spells it. One it does not hold -- a file that
        changed within :data:`RACY_NS` of the scan's start, which is before
        this listing's -- is named among the others.
        """
        seen, others = self.seen, self._others
        for made in pieces:
            for fields in made:
                text = texts.get(fields[0])
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
            dir_id = cachefile._dir_identity(jobs_stat)
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
#: The listing parts of thousands of rows not yet written: each waits for :func:`write_aside` or :func:`settle`.
_WAITING: list[Callable[[], object]] = []


def now_or_aside(work: Callable[[], object], rows: int) -> None:
    """Run ``work`` (which writes the listing part) now, or later aside when it has ``rows`` in the thousands.

    Thousands of rows take a good part of a second to sort, marshal and
    write, and nothing this process prints needs them: such work waits
    until the listing is out, and is then done in a forked child
    (:func:`write_aside`) that this process does not wait for. Work still
    waiting when something reads the part (:func:`settle`), or when the
    process exits, is done then, here. Work is done in the order it came:
    behind work that waits, work of a few rows waits too (the listing part
    takes its identities from the rows the cache's own write makes).
    """
    if rows < _ASIDE_FROM and not _WAITING:
        work()
        return
    if not _WAITING:
        import atexit  # only a listing of thousands comes here

        atexit.register(_at_exit)
    _WAITING.append(work)


def write_aside() -> None:
    """Start the waiting listing part writes in a forked child, and go on; here when the process cannot fork.

    Called by a listing once its lines are out. The child writes atomically
    (a temporary renamed into place): another process finds the part whole
    or not at all, and this process may exit while it works.
    """
    if not _WAITING:
        return
    works = _WAITING[:]
    del _WAITING[:]

    def write_all() -> None:
        for work in works:
            work()

    from .. import fanout

    if not fanout.aside(write_all, at_exit=False):
        write_all()


def settle() -> None:
    """Finish any listing part this process still has to write: the waiting ones here, then those aside.

    Called before the part is read (:class:`Listed`), so that a process
    always reads what it wrote, and when the process exits.
    """
    while _WAITING:
        _WAITING.pop(0)()
    fanout = sys.modules.get("jobctl.fanout")
    if fanout is not None:
        fanout.settle()


def _at_exit() -> None:
    """At exit: the listing part writes still waiting, done here (those aside are fanout's to wait for, or not)."""
    while _WAITING:
        _WAITING.pop(0)()
