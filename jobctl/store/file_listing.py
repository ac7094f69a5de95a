"""The directory store's listings: ``list_open`` and ``scan`` over ``jobs/``, with the summary cache.

A listing reads every record file through :mod:`jobctl.fsio` (no link
followed), decoding only what the per-user summary cache
(:mod:`jobctl.summary`) cannot vouch for; a cold pass over thousands of
records shares its reads among processes (:mod:`jobctl.fanout`). The
:class:`FileListing` mixin is the part of :class:`jobctl.store.file.FileStore`
that does it; the store's writes never come through here.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

# record.decode, not decode: the decoder loads on the first decode (a piped submit reads no record)
from .. import fsio, record
from ..errors import JobError
from ..record import Record
from .base import OpenListing, Unreadable

if TYPE_CHECKING:  # the summary cache (hashlib and all) loads only when a listing asks for it
    from .. import summary

__all__ = ["FileListing", "Finished", "FileIdentity", "collector_paused", "summary_of", "summary_fields"]

#: ``list_open(finished=...)``: handed each finished record decoded, and its file's :class:`FileIdentity`.
#: With ``briefly=True`` it may be handed the record's :class:`jobctl.summary.Summary` instead, and None
#: for the identity when the listing part is made from what a shared scan's pieces made (``OpenListing.whole``).
Finished = Callable[[Any, "FileIdentity | None"], None]
#: What the pieces of a shared scan made of the finished records, for the listing part: one list a
#: piece of their summary fields (jobctl.summary.Listed.remember_made); their files' identities are the
#: summary cache's rows (jobctl.summary.Summaries.ident_texts).
_Made = list[list[tuple[Any, ...]]]
_new = tuple.__new__


class FileIdentity(NamedTuple):
    """The part of a record file's status the summary cache compares: a quarter of an ``os.stat_result``."""

    st_ino: int
    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int


_S_IFMT = 0o170000
#: A full scan with at least this many records to read shares them among processes (jobctl.fanout.MIN_SHARE x 2).
_SHARED_FROM = 2000
_S_IFREG = stat.S_IFREG


class FileListing:
    """The listings of :class:`jobctl.store.file.FileStore` (a mixin): what it reads of ``jobs/`` as a whole."""

    #: ``<root>/jobs``, and the summary cache's place (see :class:`jobctl.store.file.FileStore`).
    jobs_dir: str
    summaries: bool | str
    _jobs_dir: fsio.Dir

    def _jobs(self) -> fsio.Dir:
        """``jobs/``, as opened (without following a link) when the store was; a ``with`` block keeps it open."""
        return self._jobs_dir

    @staticmethod
    def _ids(jobs: fsio.Dir) -> list[str]:
        out = []
        for entry in fsio.scan(jobs):
            name = entry.name
            if name.endswith(".json") and not name.startswith("."):
                out.append(name[:-5])
        out.sort()
        return out

    def _summaries_dir(self) -> str | None:
        if self.summaries is False:
            return None
        if self.summaries is True:
            from .. import summary

            return summary.default_dir()
        return os.fspath(self.summaries)

    def list_open(self, *, finished: Finished | None = None, briefly: bool = False) -> OpenListing:
        """The open records and every record's state, decoding only what the cache cannot vouch for.

        A record file whose identity matches its cached summary is taken as
        summarised (finished records only); every other one is read and
        decoded. When ``jobs/`` itself is unchanged since the cache was
        written, the finished records are not even statted: a conforming
        writer replaces a record by rename, which changes the directory
        [JOB-W3]. A record edited in place by hand is noticed only once the
        directory changes; open records are read on every call regardless.

        Everything in ``jobs/`` is statted and read relative to the kept
        ``jobs/`` descriptor without following links (:mod:`jobctl.fsio`):
        a link or odd file at a record's name is never cached, and is named
        unreadable on every call, as ``FileStore.list`` names it.

        ``finished`` is handed each finished record this call decodes anyway,
        with the status of the file it was read from: a listing keeps what
        it shows of them and passes them to :meth:`scan` as ``taken``, so a
        cold listing reads and decodes every record once, not twice. With
        ``briefly``, it may be handed the record's :class:`jobctl.summary.Summary`
        instead (all a plain listing line shows).

        When there are thousands of records to read (no cache, or one that
        vouches for few), the reads and decodes are shared among processes,
        one a CPU (:mod:`jobctl.fanout`; ``JOBCTL_SCAN_PROCESSES`` sets how
        many): the answer is the same, only sooner. Handed whole records
        (``finished`` without ``briefly``), the call reads them all here.
        A ``finished`` with a ``many`` method is handed the summaries such a
        scan's pieces made (none with a file's status) a piece at a time,
        as a list: ``finished.many(summaries)``.
        """
        with collector_paused():
            return self._list_open(self._summaries_dir(), finished, briefly)

    def _list_open(self, cache_dir: str | None, finished: Finished | None, briefly: bool = False) -> OpenListing:
        """:meth:`list_open` with the summary cache in ``cache_dir`` (None: every record read)."""
        from .. import summary

        jobs = self._jobs()
        try:
            jobs_stat: os.stat_result | None = os.fstat(jobs.fd)
        except OSError:
            jobs_stat = None
        summary.settle()  # what this process left to write of the cache, written before it is read
        cache = summary.Summaries.load(cache_dir, self.jobs_dir, jobs_stat)
        try:
            limit: int | None = fsio.max_record_bytes()  # once, not once a file
        except JobError:
            limit = None  # a bad setting: each read refuses its record with it, as without this pass
        out = OpenListing()
        if jobs_stat is not None and cache.fresh(jobs_stat):
            # The finished records' states come from the cache only if a look-up needs one:
            # orphans never does, claim --next only for what its open jobs wait for.
            out.states = cache.lazy_states(lambda: dict(self._list_open(None, None).states))
            for job_id in cache.others:
                self._take_open(jobs, job_id, out, None, finished, limit)
        else:
            # Every record file statted (summary.Summaries.check: compared in place, nothing built
            # per record); what the cache cannot vouch for is read (a name the cache does not know
            # is read without a stat first: the read's fstat says what it is). The confirmed
            # finished records' states, again, only if a look-up needs one.
            out.states = cache.confirmed_states()
            batches = cache.check(jobs.fd)
            todo: list[str] = []
            for batch in batches:  # nothing cached, the names as the directory is read: the first thousands
                todo += batch
                if len(todo) >= _SHARED_FROM:
                    break
            made, count = None, 0
            # Known already: a check against rows hands out its names as one batch; a cold one confirms none.
            whole = finished is not None and not cache.confirmed_any() and jobs_stat is not None
            if len(todo) < _SHARED_FROM or (finished is not None and not briefly):
                for job_id in itertools.chain(todo, itertools.chain.from_iterable(batches)):
                    self._take_open(jobs, job_id, out, cache, finished, limit)
            else:
                made, count = self._take_shared(jobs, todo, batches, out, cache, finished, limit, whole)
            if whole:
                # Every record read: scan(opened=out) need list none again (and the pieces made the
                # listing part's rows, when they were shared, with their identities in the cache's).
                out.whole = (jobs_stat, made, cache)
            if made is not None and jobs_stat is not None:
                # A listing's cold pass, shared: the cache is written with its listing part, once the
                # listing is out (summary.now_or_aside; a later pass in this process settles it first).
                summary.now_or_aside(lambda: _finish(cache, jobs_stat), count)
            elif jobs_stat is not None:
                _finish(cache, jobs_stat)
        out.sort(key=_by_id)
        out.unreadable.sort(key=lambda pair: pair[0])
        return out

    def scan(
        self,
        unreadable: Unreadable,
        *,
        summaries: bool = True,
        taken: Mapping[str, tuple[summary.Summary, FileIdentity]] | None = None,
        opened: OpenListing | None = None,
    ) -> Iterator[Record | summary.Summary]:
        """Every record in id order, one at a time, for a listing that prints as it reads.

        A finished record the summary cache vouches for (same file identity)
        comes as its :class:`jobctl.summary.Summary` (unless ``summaries`` is
        False); every other one is read (through :mod:`jobctl.fsio`, no link
        followed) and decoded. The unreadable ones are appended to
        ``unreadable`` as they are met. Memory holds the ids and the
        summaries, never the records. When ``jobs/`` is unchanged since the
        listing that wrote the cache's ``.list`` part (and was not racy
        then), the names and summaries come from it without a ``stat``, as
        :meth:`list_open` takes the finished records' states; the records
        it could not summarise are read as always.

        ``taken``: the finished records the caller has already read in this
        process (from :meth:`list_open`'s ``finished``), each with its summary
        and the status of its file. They are neither statted, read nor
        yielded again; their summaries go to the cache as if read now.

        ``opened``: that :meth:`list_open` call's answer. When it read every
        record file (a cold cache: :attr:`OpenListing.whole` holds ``jobs/``
        as statted before it began, and what a shared scan's pieces made of
        the finished records), the directory is not listed again and nothing
        is yielded: the finished records are all in ``taken`` (and in what the
        pieces made), the open and unreadable ones in ``opened``, and the
        ``.list`` part is written from them, with the directory's identity of then.
        """
        from .. import summary

        if opened is not None and opened.whole is not None:
            if summaries:
                self._listed_from(opened, taken or {})
            return
        jobs = self._jobs()
        try:
            jobs_stat: os.stat_result | None = os.fstat(jobs.fd)
        except OSError:
            jobs_stat = None
        listed = summary.Listed.of(summary.Summaries.load(self._summaries_dir(), self.jobs_dir, jobs_stat, read=False))
        if not summaries:
            listed.forget()
        if jobs_stat is not None and listed.fresh(jobs_stat):
            # jobs/ unchanged since the listing that wrote .list: its names are the names, and
            # its summaries the files' (no rename since, so no file replaced) [JOB-W3].
            names: Iterable[summary.Summary | str] = listed.walk()
            lookup = None  # the names it gives were not summarised when it was written
        else:
            names = self._ids(jobs)
            lookup = listed.lookup
        fd = jobs.fd
        if not taken:
            taken = {}
        elif listed.directory is not None:
            with collector_paused():
                listed.remember_all(taken.values())
        for job_id in names:
            if not isinstance(job_id, str):
                if job_id.id not in taken:
                    yield job_id  # a summary, vouched for by the unchanged directory
                continue
            if job_id in taken:
                continue
            name = job_id + ".json"
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                listed.other(job_id)
                unreadable.append((job_id, fsio.refusal(jobs.join(name), exc, job_id)))
                continue
            if lookup is not None and st.st_mode & _S_IFMT == _S_IFREG:
                got_summary = lookup(job_id, st)
                if got_summary is not None:
                    yield got_summary
                    continue
            try:
                got = fsio.read_file_stat(jobs, name, job_id)
                if got is None:
                    continue  # removed since the directory was read
                data, fst = got
                rec = record.decode(data, job_id, named=True)
            except JobError as exc:
                listed.other(job_id)
                unreadable.append((job_id, exc))
                continue
            if rec.terminal:
                listed.remember(summary_of(rec), fst)  # or named among the others, when racy
            else:
                listed.other(job_id)
            yield rec
        with collector_paused():
            listed.save(jobs_stat)

    def _listed_from(self, opened: OpenListing, taken: Mapping[str, tuple[summary.Summary, FileIdentity]]) -> None:
        """Write the ``.list`` part from a :meth:`list_open` call that read every record (see :meth:`scan`)."""
        from .. import summary

        jobs_stat: os.stat_result = opened.whole[0]
        made: _Made | None = opened.whole[1]
        rows: summary.Summaries = opened.whole[2]
        summaries = summary.Summaries.load(self._summaries_dir(), self.jobs_dir, jobs_stat, read=False)
        if summaries.directory is None:
            return

        def write() -> None:
            listed = summary.Listed.of(summaries)
            if listed.directory is None:
                return
            with collector_paused():
                if made is not None:
                    listed.remember_made(made, rows.ident_texts())
                # Those read here (every one, without made); one handed over without its identity is in made.
                listed.remember_all(pair for pair in taken.values() if pair[1] is not None)
                for rec in opened:
                    listed.other(rec.id)
                for job_id, _ in opened.unreadable:
                    listed.other(job_id)
                listed.save(jobs_stat, aside=False)

        # The whole part is made where it is written: aside, for thousands of summaries.
        summary.now_or_aside(write, len(taken) + (0 if made is None else sum(map(len, made))))

    def _take_open(
        self,
        jobs: fsio.Dir,
        job_id: str,
        out: OpenListing,
        cache: summary.Summaries | None,
        finished: Finished | None = None,
        limit: int | None = None,
    ) -> None:
        """Read and decode one record into ``out``; tell ``cache`` what it was, and ``finished`` a finished one."""
        try:
            got = fsio.read_file_stat(jobs, job_id + ".json", job_id, limit)
            if got is None:
                return  # removed since the directory was read
            data, st = got
            rec = record.decode(data, job_id, named=True)
        except JobError as exc:
            out.unreadable.append((job_id, exc))
            if cache is not None:
                cache.other(job_id)
            return
        out.states[job_id] = rec.state
        if not rec.terminal:
            out.append(rec)
        elif finished is not None:
            finished(rec, _new(FileIdentity, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)))
        if cache is not None:
            cache.remember(job_id, st, rec.state if rec.terminal else None)

    def _take_shared(
        self,
        jobs: fsio.Dir,
        todo: list[str],
        more: Iterator[list[str]],
        out: OpenListing,
        cache: summary.Summaries,
        finished: Finished | None,
        limit: int | None,
        whole: bool = False,
    ) -> tuple[_Made | None, int]:
        """:meth:`_take_open` for each of ``todo`` and of the batches ``more`` brings, shared among processes.

        ``todo`` is cut into pieces that the processes (this one too) take
        in turn (:mod:`jobctl.fanout`); when ``more`` brings more batches
        (the rest of a directory being read), the children are started
        first and the pieces cut as the batches come. Each piece is read
        through the same ``jobs/`` descriptor (:func:`_read_share`), and its
        answer gives: the state of each finished record (and its summary
        and file identity when ``finished`` takes one), the bytes of each
        open one (decoded again here, so that the records this call answers
        with are this process's own), the ids it could not read, which are
        read here again, so that their refusals are this process's own too,
        and the cache's rows for it, which are taken in the order of the
        ids: each piece's as soon as those before it are in. The answer is the one :meth:`_take_open` gives id by id.

        Handed summaries (``finished``) with ``whole`` (every record is read:
        the listing part is made from them), the pieces' summaries are
        returned, one list a piece, for :meth:`_listed_from`
        (:meth:`jobctl.summary.Listed.remember_made`, their files' identities
        taken from the cache's rows); None otherwise. ``finished`` is then
        handed None for the identity of what the pieces made; the records read
        again here come with theirs, and the part takes them from the
        listing's ``taken``. Returned with it: how many ids there were.
        """
        from .. import fanout

        brief = finished is not None

        def each(share: Sequence[str]) -> list[Any]:
            return _read_share(jobs, share, limit, brief, cache, not whole)

        summary_type: Any = _load_summary().Summary if brief else None
        new_summary = functools.partial(_new, summary_type)
        many = getattr(finished, "many", None)  # the summaries of a piece handed over at once (list_open)
        states = out.states
        rows: dict[int, Any] = {}  # each piece's cache rows, taken in the order of todo: the order met
        next_rows = 0  # the piece whose rows are taken next, as soon as it is in (while the others are read)
        made: _Made = []
        count = 0
        following = next(more, None)  # none after a check against rows: its names are all in todo
        if following is None:
            shared = fanout.share_out(todo, each, (jobs.fd,))
        else:
            shared = fanout.share_stream(itertools.chain((todo, following), more), each, (jobs.fd,))
        with contextlib.closing(shared) as pieces:
            for k, piece, answer in pieces:
                count += len(piece)
                if not _well_formed(answer, brief, whole):
                    answer = each(piece)  # not what a child of ours sends: do its piece here
                fin_ids, fin_states, briefs, opened, bad, rows[k] = answer
                while next_rows in rows:
                    cache.take_rows(rows.pop(next_rows))  # malformed rows are left out: read again next time
                    next_rows += 1
                if finished is None:
                    states.update(zip(fin_ids, fin_states, strict=True))
                elif whole:
                    # Each summary's fields alone: the listing part takes the identities from the cache's rows.
                    made.append(briefs)  # their states too: filled in from them if a look-up needs one
                    if many is not None:
                        many(list(map(new_summary, briefs)))
                    else:
                        for fields in briefs:
                            finished(_new(summary_type, fields), None)
                else:
                    for fields, ident in briefs:
                        states[fields[0]] = fields[2]
                        finished(_new(summary_type, fields), _new(FileIdentity, ident))
                for job_id, _, data in opened:
                    try:
                        rec = record.decode(data, job_id, named=True)
                    except JobError:  # not what the child read: read it here, and say why (its row: read again)
                        self._take_open(jobs, job_id, out, None, finished, limit)
                        continue
                    states[job_id] = rec.state
                    out.append(rec)
                for job_id in bad:  # unreadable there: read here, and say why
                    self._take_open(jobs, job_id, out, cache, finished, limit)
        for k in sorted(rows):  # none, when every piece came in
            cache.take_rows(rows[k])
        if whole:
            _states_later(out, made)
        return (made if whole else None), count


def _states_later(out: OpenListing, made: _Made) -> None:
    """``out.states`` of the finished records in ``made`` (their summaries' fields), filled in when first asked.

    A piped listing never asks (its lines show each record's own state):
    the 100,000 entries of a large store would cost its busiest process
    tens of milliseconds for nothing.
    """

    def more() -> dict[str, str]:
        every = list(itertools.chain.from_iterable(made))
        return dict(zip(map(_ID, every), map(_STATE, every), strict=True))

    states = out.states
    if isinstance(states, _load_summary().States):
        states.later(more)
    else:
        states.update(more())


def _finish(cache: summary.Summaries, jobs_stat: os.stat_result) -> None:
    """End a full scan of the cache (``jobs_stat``: ``jobs/`` before it began) and write what it learnt."""
    cache.finish(jobs_stat)
    cache.save()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (the collector's state as before after it).

    A pass over 100,000 records allocates tens of objects per record and
    keeps some of each (states, summaries, the cache's lines), none of them
    in a reference cycle: refcounting frees what is dropped, and each of the
    collector's passes, triggered by the allocations alone, would walk
    everything kept so far -- a tenth of a cold listing's time, for nothing.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def summary_of(rec: Record) -> summary.Summary:
    """What a listing line shows of a finished record, as the summary cache keeps it."""
    mod = _summary_module or _load_summary()  # not an import statement run once a record
    # tuple.__new__: a NamedTuple's own __new__ is a Python function, a fifth of this call's cost.
    made: summary.Summary = _new(mod.Summary, summary_fields(rec))
    return made


def summary_fields(rec: Record) -> tuple[Any, ...]:
    """:func:`summary_of` as a plain tuple (what :mod:`marshal` carries): :func:`jobctl.record.summary_tuple`."""
    lease, progress = rec.lease, rec.progress
    return record.summary_tuple(
        rec.id, rec.kind, rec.state, progress.done, progress.total, lease.owner, lease.epoch, rec.error,
        None if rec.checkpoint is None else rec.checkpoint_text(),  # most have none: spare two calls
        rec.created_at, lease.expires_at,
    )  # fmt: skip


_summary_module: Any = None


def _load_summary() -> Any:
    """:mod:`jobctl.summary`, imported on first use (start-up does without it) and kept for :func:`summary_of`."""
    global _summary_module
    from .. import summary

    _summary_module = summary
    return summary


def _read_share(
    jobs: fsio.Dir, share: Sequence[str], limit: int | None, brief: bool, cache: summary.Summaries, idents: bool = True
) -> list[Any]:
    """What :meth:`FileListing._take_shared` needs of the records of ``share``, as :mod:`marshal` carries it.

    ``[finished ids, their states, their summaries, open records, unreadable
    ids, cache rows]``. With ``brief`` the finished records come as their
    summaries' fields (:func:`summary_fields`), which hold their ids and
    states (the first two None), in id order: each with its file's identity
    (``(fields, identity)``), or without ``idents`` the fields alone (the
    listing part takes the identities from the cache's rows). Each open
    record as ``(id, identity, bytes)``; the ids this process could not read
    or decode (the caller reads them again); the cache's rows of every
    record read, in share order (:meth:`jobctl.summary.Summaries.rows_of`;
    None without a cache). A file gone since the directory was read is in
    none of them. As few objects a record as that allows: the caller takes
    each one a child made out of a pipe.
    """
    fin_ids: list[str] = []
    fin_states: list[str] = []
    briefs: list[Any] = []
    opened: list[tuple[str, tuple[int, int, int, int], bytes]] = []
    bad: list[str] = []
    read: list[tuple[str, str | None, tuple[int, int, int, int]]] = []
    rows = cache.directory is not None
    at, plain = jobs.fd, fsio.read_plain
    if limit is None:
        limit = -1  # a bad setting: read_plain refuses every record, read again (and refused) by the caller
    for job_id in share:
        got = plain(at, job_id + ".json", limit)
        if got is True:  # not a plain record: the caller reads it again, and says why
            bad.append(job_id)
            continue
        if got is False:
            continue  # removed since the directory was read
        data, st = got
        try:
            # A finished record's line (or without brief its state alone), without the record.
            got_one = record.summary_or_record(data, job_id, brief)
        except JobError:
            bad.append(job_id)
            continue
        ident = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if type(got_one) is tuple:
            state = got_one[2]
            briefs.append((got_one, ident) if idents else got_one)
        elif type(got_one) is str:
            state = got_one
            fin_ids.append(job_id)
            fin_states.append(state)
        else:
            rec = cast(Record, got_one)
            if not rec.terminal:
                opened.append((job_id, ident, data))
                if rows:
                    read.append((job_id, None, ident))
                continue
            state = rec.state
            if brief:
                fields = summary_fields(rec)
                briefs.append((fields, ident) if idents else fields)
            else:
                fin_ids.append(job_id)
                fin_states.append(state)
        if rows:
            read.append((job_id, state, ident))
    if brief:
        # By id, which for ids minted by time is creation order too: the sorts of a listing (by
        # creation) and of the cache's listing part (by id) then merge runs.
        briefs.sort(key=_fields_id if idents else _ID)
    return [None if brief else fin_ids, None if brief else fin_states, briefs if brief else None, opened, bad,
            cache.rows_of(read) if rows else None]  # fmt: skip


_ID = operator.itemgetter(0)
_ONLY_TUPLE = {tuple}
_STATE = operator.itemgetter(2)


def _fields_id(brief: tuple[tuple[Any, ...], Any]) -> str:
    """The id in a finished record's summary fields (with its identity)."""
    id_: str = brief[0][0]
    return id_


def _well_formed(answer: Any, brief: bool, whole: bool) -> bool:
    """True when ``answer`` has the shape :func:`_read_share` gives (its rows are checked as they are taken)."""
    if type(answer) is not list or len(answer) != 6:
        return False
    fin_ids, fin_states, briefs, opened, bad, _ = answer
    if type(opened) is not list or type(bad) is not list:
        return False
    if not brief:
        return type(fin_ids) is list and type(fin_states) is list and len(fin_ids) == len(fin_states)
    if fin_ids is not None or fin_states is not None or type(briefs) is not list:
        return False
    # Each summary's fields a tuple of a Summary's length (with identities, a pair of them): looked at
    # by C loops, tens of thousands a piece.
    fields = briefs if whole else [pair[0] for pair in briefs if type(pair) is tuple and len(pair) == 2]
    if len(fields) != len(briefs) or not set(map(type, fields)) <= _ONLY_TUPLE:
        return False
    return set(map(len, fields)) <= {len((_summary_module or _load_summary()).Summary._fields)}


def _by_id(rec: Record) -> str:
    return rec.id
