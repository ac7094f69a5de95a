"""The file store: one directory, one JSON file per job, ``flock`` per record.

Layout [JOB-W1] [JOB-W3]::

    <root>/jobs/<id>.json          the record
    <root>/jobs/<id>.json.lock     its lock (never removed)
    <root>/jobs/<id>.json.<u>.tmp  a replacement being staged
    <root>/work/<id>               a name reserved for the job; never created here

Every write is a compare-and-set under the record's lock (:func:`jobctl.lock.change`):
the current record is decoded, the preconditions run on it *as read*, the
change is applied, and the record is re-encoded with ``content``/``critical``
derived afresh. ``load`` and ``list`` never lock.

Every name under the root is opened through :mod:`jobctl.fsio`, relative to
an opened ``jobs/`` and without following links: a link, FIFO, directory or
oversized file at a record's name is that record's refusal, never a path out
of the store or a hung reader.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import fsio, ids, limits, lock
from ..errors import Exists, JobError, NoStore, NotFound, Untrusted
from ..record import (
    Record,
    decode,
    encode,
    is_orphan,
    summary_or_record,
    summary_tuple,
)
from ..wire import lazy_pattern
from .base import Listing, Notices, OpenListing, Records, Refusals, Skipped, Unreadable
from .contract import ContractStore
from .workers import WorkerFiles

if TYPE_CHECKING:  # the summary cache (hashlib and all) loads only when a listing asks for it
    from .. import summary

# is_orphan is the record's rule (jobctl.record); named here for callers that import it from here.
__all__ = ["FileStore", "Clock", "Finished", "FileIdentity", "summary_of", "is_orphan"]

Clock = Callable[[], datetime]
#: ``list_open(finished=...)``: handed each finished record decoded, and its file's :class:`FileIdentity`.
#: With ``briefly=True`` it may be handed the record's :class:`jobctl.summary.Summary` instead.
Finished = Callable[[Any, "FileIdentity"], None]
#: What the pieces of a shared scan made of the finished records, for the listing part: one list a
#: piece of ``(summary fields, file identity, identity text or None)`` (jobctl.summary.Listed.remember_made).
_Made = list[list[tuple[tuple[Any, ...], Any, "str | None"]]]
_new = tuple.__new__


class FileIdentity(NamedTuple):
    """The part of a record file's status the summary cache compares: a quarter of an ``os.stat_result``."""

    st_ino: int
    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int


def _system_clock() -> datetime:
    return datetime.now(timezone.utc)


# The lease block as every conforming writer lays it out; "\n  " anchors it
# at the record's top level (a raw newline cannot occur inside a JSON string).
_EPOCH: re.Pattern[bytes] = lazy_pattern(
    globals(),
    "_EPOCH",
    rb'\n  "lease": \{\n    "owner": "[^"\\\n]*(?:\\.[^"\\\n]*)*",\n    "epoch": (\d+),\n',
)
_TEMP: re.Pattern[str] = lazy_pattern(globals(), "_TEMP", r"(.+\.json)\.[A-Za-z0-9_]+\.tmp\Z")
_S_IFMT = 0o170000
#: A full scan with at least this many records to read shares them among processes (jobctl.fanout.MIN_SHARE x 2).
_SHARED_FROM = 2000
_S_IFREG = stat.S_IFREG


class FileStore(ContractStore, WorkerFiles):
    """A store rooted at a directory; opening it creates ``jobs/`` and ``work/``.

    ``create=False`` opens only a store that is already there: a root that
    does not exist, is not a directory or has no ``jobs/`` directory raises
    :class:`~jobctl.errors.NoStore` and nothing is created, so a mistyped
    path is reported rather than becoming an empty store that hides every job.

    ``max_ttl`` is the longest lease ``claim`` and ``renew`` grant (seconds;
    the ``max_ttl`` setting, default one day): a longer TTL is refused
    ``Invalid``, so that no lease jobctl writes can keep a job ``running`` for
    years with nobody working on it (:func:`jobctl.limits.lease_too_long`).

    ``summaries`` is where the per-user cache of finished records' summaries
    lives (:mod:`jobctl.summary`): True for the user's cache directory, a
    path for another one, False for none (every scan then decodes every record).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        clock: Clock | None = None,
        max_ttl: float = limits.DEFAULT_MAX_TTL,
        *,
        create: bool = True,
        summaries: bool | str = True,
    ) -> None:
        self.root = os.fspath(root)
        self.summaries = summaries
        self.max_ttl = float(max_ttl)
        #: When set, ``claim`` (and every other write) takes only records whose file this uid owns
        #: (``Untrusted`` otherwise): ``jobctl worker --owned-only``, on by default for root (docs/security.md).
        self.owned_by: int | None = None
        self.jobs_dir = os.path.join(self.root, "jobs")
        self.work_dir = os.path.join(self.root, "work")
        if create:
            os.makedirs(self.root, mode=0o755, exist_ok=True)
        else:
            self._check_exists()
        # jobs/ stays open for the store's life: every name in it resolves
        # against this one directory, opened without following a link, and
        # a write costs no path walk. (A jobs/ swapped for a link later is
        # not followed either: this descriptor is still the real directory.)
        try:
            self._jobs_dir = fsio.open_dir(self.root, "jobs", create=create, kept=True)
        except FileNotFoundError:  # removed between the check and the open
            raise NoStore(f"{self.root} has no jobs/ directory, so it is not a store") from None
        if create:
            fsio.open_dir(self.root, "work", create=True).close()
        else:
            # work/ belongs to an existing store [JOB-W3]; a read-only one may
            # lack it and still be read, so failing to make it is not a refusal,
            # nor is a link or odd file there: what uses work/ refuses it then.
            with contextlib.suppress(OSError, JobError):
                fsio.open_dir(self.root, "work", create=True).close()
        self._clock: Clock = clock or _system_clock

    def _check_exists(self) -> None:
        if not os.path.exists(self.root):
            raise NoStore(f"{self.root} does not exist")
        if not os.path.isdir(self.root):
            raise NoStore(f"{self.root} is not a directory")
        if not os.path.lexists(self.jobs_dir):
            raise NoStore(f"{self.root} has no jobs/ directory, so it is not a store")

    def __repr__(self) -> str:
        return f"FileStore({self.root!r})"

    def now(self) -> datetime:
        return self._clock()

    def path(self, job_id: str) -> str:
        """``<root>/jobs/<id>.json`` for a safe id."""
        return os.path.join(self.jobs_dir, ids.check(job_id) + ".json")

    def _jobs(self) -> fsio.Dir:
        """``jobs/``, as opened (without following a link) when the store was; a ``with`` block keeps it open."""
        return self._jobs_dir

    def work_path(self, job_id: str) -> str:
        """``<root>/work/<id>``: the job's scratch name. Never created by the store [JOB-W1]."""
        return os.path.join(self.work_dir, ids.check(job_id))

    def lease_source(self, job_id: str) -> str | None:
        """The record itself, when this store reads the system clock (see ``Store.lease_source``)."""
        return self.path(job_id) if self._clock is _system_clock else None

    def notices(self, *, news_only: bool = False) -> Notices | None:
        """inotify on ``jobs/`` (Linux): every write is a rename onto ``<id>.json`` [JOB-W3]; None elsewhere.

        An event names no revision, so ``news_only`` changes nothing here: a
        writer hears its own writes too.
        """
        from ..notices import notices_for

        return notices_for(self.jobs_dir)

    # -- reads ---------------------------------------------------------------

    def load(self, job_id: str) -> Record:
        return decode(self.load_bytes(job_id), job_id, named=True)

    def load_bytes(self, job_id: str) -> bytes:
        name = ids.check(job_id) + ".json"
        with self._jobs() as jobs:
            data = lock.read(jobs, name, job_id)
        if data is None:
            raise NotFound(f"no job {job_id}", job_id)
        return data

    def _read_epoch(self, job_id: str) -> tuple[int, bytes, bool]:
        """The lease epoch as read now, without the lock [JOB-L4]: (epoch, bytes, exact).

        A canonical record gives it up to one regular expression; anything
        else is decoded in full (which also raises its refusal). A pattern
        match is not proof -- a hand-laid spec could mimic the lease block --
        so the claim re-decodes these bytes before it refuses on a mismatch.
        """
        name = ids.check(job_id) + ".json"
        with self._jobs() as jobs:
            data = lock.read(jobs, name, job_id)
        if data is None:
            raise NotFound(f"no job {job_id}", job_id)
        m = _EPOCH.search(data)
        if m is not None:
            return int(m.group(1)), data, False
        return decode(data, job_id, named=True).lease.epoch, data, True

    def ids(self) -> list[str]:
        """Ids of every record name, sorted by byte order.

        Whatever is at the name -- a link, a FIFO, a directory -- counts: it
        is that record's to answer for, as unreadable, when it is read.
        """
        with self._jobs() as jobs:
            return self._ids(jobs)

    @staticmethod
    def _ids(jobs: fsio.Dir) -> list[str]:
        out = []
        for entry in fsio.scan(jobs):
            name = entry.name
            if name.endswith(".json") and not name.startswith("."):
                out.append(name[:-5])
        out.sort()
        return out

    def list(self) -> Listing:
        listing = Listing()
        with self._jobs() as jobs:
            for job_id in self._ids(jobs):
                try:
                    data = lock.read(jobs, job_id + ".json", job_id)
                    if data is None:
                        continue  # removed by hand since the directory was read
                    listing.append(decode(data, job_id, named=True))
                except JobError as exc:
                    listing.unreadable.append((job_id, exc))
        return listing

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
        unreadable on every call, as :meth:`list` names it.

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
            todo = list(cache.check(jobs.fd))
            made = None
            if len(todo) < _SHARED_FROM or (finished is not None and not briefly):
                for job_id in todo:
                    self._take_open(jobs, job_id, out, cache, finished, limit)
            else:
                made = self._take_shared(jobs, todo, out, cache, finished, limit)
            if finished is not None and not cache.confirmed_any() and jobs_stat is not None:
                # Every record read: scan(opened=out) need list none again (and the pieces made the
                # listing part's rows, when they were shared).
                out.whole = (jobs_stat, made)
            if jobs_stat is not None:
                cache.finish(jobs_stat)
                cache.save()
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
                rec = decode(data, job_id, named=True)
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
        summaries = summary.Summaries.load(self._summaries_dir(), self.jobs_dir, jobs_stat, read=False)
        if summaries.directory is None:
            return

        def write() -> None:
            listed = summary.Listed.of(summaries)
            if listed.directory is None:
                return
            with collector_paused():
                if made is not None:
                    listed.remember_made(made)
                else:
                    listed.remember_all(taken.values())
                for rec in opened:
                    listed.other(rec.id)
                for job_id, _ in opened.unreadable:
                    listed.other(job_id)
                listed.save(jobs_stat, aside=False)

        # The whole part is made where it is written: aside, for thousands of summaries.
        summary.now_or_aside(write, len(taken) if made is None else sum(map(len, made)))

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
            rec = decode(data, job_id, named=True)
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
        todo: Sequence[str],
        out: OpenListing,
        cache: summary.Summaries,
        finished: Finished | None,
        limit: int | None,
    ) -> _Made | None:
        """:meth:`_take_open` for each of ``todo``, the reads and decodes shared among processes (:mod:`jobctl.fanout`).

        ``todo`` is cut into pieces that the processes (this one too) take
        in turn. Each piece is read through the same ``jobs/`` descriptor
        (:func:`_read_share`), and its answer gives: the state of each
        finished record (and its summary and file identity when ``finished``
        takes one), the bytes of each open one (decoded again here, so that
        the records this call answers with are this process's own), the ids
        it could not read, which are read here again, so that their refusals
        are this process's own too, and the cache's rows for it, which are
        taken in the order of ``todo`` once every piece is in. The answer is
        the one :meth:`_take_open` gives id by id.

        Handed summaries (``finished``), the pieces also made the listing
        part's rows (:meth:`jobctl.summary.Listed.remember_made`): they are
        returned, one list a piece, for :meth:`_listed_from`; None otherwise,
        and None when a record was read again here (what ``finished`` was
        handed is then the whole of it).
        """
        from .. import fanout

        brief = finished is not None

        def each(share: Sequence[str]) -> list[Any]:
            return _read_share(jobs, share, limit, brief, cache)

        summary_type: Any = _load_summary().Summary if brief else None
        states = out.states
        rows: dict[int, Any] = {}  # each piece's cache rows, taken in the order of todo: the order met
        made: _Made = []
        again = 0  # records read again here: finished ones among them are in no piece's made
        with contextlib.closing(fanout.share_out(todo, each, (jobs.fd,))) as pieces:
            for k, piece, answer in pieces:
                if not _well_formed(answer, brief):
                    answer = each(piece)  # not what a child of ours sends: do its piece here
                fin_ids, fin_states, briefs, opened, bad, rows[k] = answer
                states.update(zip(fin_ids, fin_states, strict=True))
                if finished is not None:
                    made.append(briefs)
                    for fields, ident, _ in briefs:
                        finished(_new(summary_type, fields), _new(FileIdentity, ident))
                for job_id, _, data in opened:
                    try:
                        rec = decode(data, job_id, named=True)
                    except JobError:  # not what the child read: read it here, and say why (its row: read again)
                        again += 1
                        self._take_open(jobs, job_id, out, None, finished, limit)
                        continue
                    states[job_id] = rec.state
                    out.append(rec)
                again += len(bad)
                for job_id in bad:  # unreadable there: read here, and say why
                    self._take_open(jobs, job_id, out, cache, finished, limit)
        for k in sorted(rows):
            cache.take_rows(rows[k])  # malformed rows are left out: their records are read again next time
        # What the pieces made is the listing part's rows only when every finished record is in it.
        return made if finished is not None and not again else None

    def orphans(self) -> Listing:
        """Records a sweep may adopt: not terminal, not held, and stranded.

        Stranded means not ``transferred`` (the bytes are delivered; the
        external system finishes it) [JOB-T2], and not paused unless still
        ``running`` under a dead owner [JOB-I11] [JOB-I12]. Freshly submitted
        records are orphans. Records this reader cannot read are reported in
        ``unreadable``, never offered.
        """
        listing = self.list_open()
        now = self.now()
        out = Listing(unreadable=listing.unreadable)
        for rec in listing:
            if is_orphan(rec, now):
                out.append(rec)
        return out

    def claim_some(
        self,
        owner: str,
        ttl: float,
        limit: int,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> Records:
        """Up to ``limit`` of the oldest runnable jobs, claimed: :func:`.picking.claim_some` over one listing."""
        from .picking import claim_some  # with jobctl.schedule: not on a piped submit's path

        listing = self.list_open()
        if unreadable is not None:
            unreadable.extend(listing.unreadable)
        return claim_some(self, owner, ttl, limit, kinds, records=listing, skipped=skipped)

    # -- writes --------------------------------------------------------------

    def _write(
        self,
        job_id: str,
        apply: Callable[[Record, datetime], None],
        fresh: bool = False,
        vet: Callable[[str, bytes], None] | None = None,
        *,
        wait: bool = True,
    ) -> Record:
        """Decode, ``apply``, encode and replace under the lock; return the record written.

        Internal operations hand nobody the record, so it is settled in place
        instead of decoded again; ``fresh`` decodes the bytes written (for a
        record outside code has touched). ``vet`` sees the path and the bytes
        as read, under the lock, before anything is decoded; with ``owned_by``
        set, every write is vetted by :meth:`_owned`, so such a handle never
        rewrites (and so takes over) a record another user owns.
        """
        name = ids.check(job_id) + ".json"
        if vet is None and self.owned_by is not None:
            vet = self._owned

        done: list[Record] = []

        def edit(current: bytes | None) -> bytes:
            if current is None:
                raise NotFound(f"no job {job_id}", job_id)
            if vet is not None:
                vet(name, current)
            rec = decode(current, job_id, named=True)
            rec._exposed = False  # only update() hands it to outside code
            apply(rec, self.now())
            data = encode(rec, settle=True)
            done.append(rec)
            return data

        try:
            with self._jobs() as jobs:
                data = lock.change(jobs, name, edit, job_id, wait=wait)
            return decode(data, job_id, named=True) if fresh else done[-1]
        except JobError as exc:
            if not exc.job_id:
                exc.job_id = job_id
            raise

    def _create(self, job_id: str, data: bytes) -> None:
        def edit(current: bytes | None) -> bytes:
            if current is not None:
                raise Exists(f"job {job_id} is already in the store", job_id)
            return data

        with self._jobs() as jobs:
            lock.change(jobs, job_id + ".json", edit, job_id)

    def _owned(self, name: str, current: bytes) -> None:
        """Refuse (``Untrusted``) a record whose file the required uid does not own.

        The file is opened through :mod:`jobctl.fsio` (no link followed, a
        regular file only) and ``fstat``-ed, and what it holds must be the
        bytes the claim is deciding on: a record swapped in by somebody else
        between the two reads is refused, not run.
        """
        job_id = name[:-5]
        with self._jobs() as jobs:
            try:
                fd = fsio.open_read(jobs, name, job_id)
            except JobError as exc:
                raise Untrusted(
                    f"job {job_id}: its record cannot be opened to check its owner: {exc}", job_id
                ) from None
        if fd is None:
            raise Untrusted(f"job {job_id}: its record went away while its owner was checked; not run", job_id)
        try:
            st = os.fstat(fd)
            if st.st_uid != self.owned_by:
                raise Untrusted(
                    f"job {job_id}: its record is owned by uid {st.st_uid}, not by uid {self.owned_by}; not run",
                    job_id,
                )
            chunks = []
            size = 0
            while size <= len(current):
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
        if b"".join(chunks) != current:
            raise Untrusted(f"job {job_id}: its record changed while its owner was checked; not run", job_id)

    # -- maintenance -----------------------------------------------------------

    def remove(self, job_id: str) -> bool:
        """Delete an ended job's record under its lock; False when it is missing, unreadable or not ended.

        The only deletion of a record jobctl does (``jobctl gc``): a terminal
        record never changes again [JOB-T1], so once it is read ended under
        the lock nobody else can be writing it. The lock file stays [JOB-L3].
        """

        def ended(data: bytes) -> bool:
            try:
                return decode(data, job_id, named=True).terminal
            except JobError:
                return False

        with self._jobs() as jobs:
            return lock.remove(jobs, ids.check(job_id) + ".json", ended, job_id)

    def sweep(self, job_id: str | None = None, refused: Refusals | None = None) -> int:
        """Remove stale staging temporaries (of one record, or of all); return the count.

        A record whose lock is refused (a link or odd file at ``<id>.json.lock``)
        is skipped and the others swept; its refusal goes to ``refused``, or
        without that list the first one is raised after the sweep.
        """
        with self._jobs() as jobs:
            # Beside a name no record can have ("..json.x.tmp"): nobody's staging, and no lock made for it.
            bases = {ids.check(job_id) + ".json"} if job_id is not None else set()
            for entry in fsio.scan(jobs) if job_id is None else ():
                m = _TEMP.match(entry.name)
                if m and ids.safe(m.group(1)[:-5]):
                    bases.add(m.group(1))
            removed = 0
            refusals: list[JobError] = []
            for base in sorted(bases):
                try:
                    removed += lock.sweep(jobs, base, base[:-5])
                except JobError as exc:
                    refusals.append(exc)  # a planted link at one lock must not stop the rest
            if refused is not None:
                refused.extend(refusals)
            elif refusals:
                raise refusals[0]
            return removed


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
    return summary_tuple(
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
    jobs: fsio.Dir, share: Sequence[str], limit: int | None, brief: bool, cache: summary.Summaries
) -> list[Any]:
    """What :meth:`FileStore._take_shared` needs of the records of ``share``, as :mod:`marshal` carries it.

    ``[finished ids, their states, their summaries, open records, unreadable
    ids, cache rows]``: the summaries only with ``brief`` (else None), each
    as its fields (:func:`summary_fields`), its file's identity, and that
    identity as the listing part keeps it (None when the file changed too
    recently to trust: :meth:`jobctl.summary.Listed.remember_made`), in id
    order; each open record as ``(id, identity, bytes)``;
    the ids this process could not read or decode (the caller reads them
    again); the cache's rows of every record read, in share order
    (:meth:`jobctl.summary.Summaries.rows_of`; None without a cache). A
    file gone since the directory was read is in none of them.
    """
    fin_ids: list[str] = []
    fin_states: list[str] = []
    briefs: list[tuple[tuple[Any, ...], tuple[int, int, int, int], str | None]] = []
    opened: list[tuple[str, tuple[int, int, int, int], bytes]] = []
    bad: list[str] = []
    read: list[tuple[str, str | None, tuple[int, int, int, int]]] = []
    rows = cache.directory is not None
    mod = _summary_module or _load_summary()
    ident_text, too_recent, started = mod.ident_text, mod.too_recent, cache.started
    for job_id in share:
        try:
            got = fsio.read_file_stat(jobs, job_id + ".json", job_id, limit)
            if got is None:
                continue
            data, st = got
            # A finished record's line (or without brief its state alone), without the record.
            got_one = summary_or_record(data, job_id, brief)
        except JobError:
            bad.append(job_id)
            continue
        ident = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if isinstance(got_one, Record):
            if not got_one.terminal:
                opened.append((job_id, ident, data))
                if rows:
                    read.append((job_id, None, ident))
                continue
            got_one = summary_fields(got_one) if brief else got_one.state
        if isinstance(got_one, str):
            state, fields = got_one, None
        else:
            state, fields = got_one[2], got_one
        fin_ids.append(job_id)
        fin_states.append(state)
        if rows:
            read.append((job_id, state, ident))
        if fields is not None:
            # Too recent a change: not kept in the listing part (Listed.remember_made names it among the others).
            text = None if not rows or too_recent(ident[2], ident[3], started) else ident_text(*ident)
            briefs.append((fields, ident, text))
    if brief:
        # By id, which for ids minted by time is creation order too: the sorts of a listing (by
        # creation) and of the cache's listing part (by id) then merge runs.
        briefs.sort(key=_fields_id)
    return [fin_ids, fin_states, briefs if brief else None, opened, bad, cache.rows_of(read) if rows else None]


def _fields_id(brief: tuple[tuple[Any, ...], Any, Any]) -> str:
    """The id in a finished record's summary fields (with its identity and its text)."""
    id_: str = brief[0][0]
    return id_


def _well_formed(answer: Any, brief: bool) -> bool:
    """True when ``answer`` has the shape :func:`_read_share` gives (its rows are checked as they are taken)."""
    if type(answer) is not list or len(answer) != 6:
        return False
    fin_ids, fin_states, briefs, opened, bad, _ = answer
    if not (type(fin_ids) is list and type(fin_states) is list and len(fin_ids) == len(fin_states)):
        return False
    if brief and not (type(briefs) is list and len(briefs) == len(fin_ids)):
        return False
    return type(opened) is list and type(bad) is list


def _by_id(rec: Record) -> str:
    return rec.id
