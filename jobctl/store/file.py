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
import errno
import os
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

# record.decode, not decode: the decoder loads on the first decode (a piped submit reads no record)
from .. import fsio, ids, limits, lock, record
from ..errors import Exists, JobError, NoStore, NotFound, Untrusted
from ..record import Record, encode, is_orphan
from ..wire import lazy_pattern
from .base import Listing, Notices, Records, Refusals, Skipped
from .contract import ContractStore
from .file_listing import FileIdentity, FileListing, Finished, collector_paused, summary_fields, summary_of
from .schedules import ScheduleFiles
from .workers import WorkerFiles

if TYPE_CHECKING:
    from .keys import FileKeys

# is_orphan is the record's rule (jobctl.record); the listing's names live in jobctl.store.file_listing.
# All are named here for callers that import them from here.
__all__ = [
    "FileStore",
    "Clock",
    "Finished",
    "FileIdentity",
    "summary_of",
    "summary_fields",
    "collector_paused",
    "is_orphan",
]

Clock = Callable[[], datetime]


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


class FileStore(FileListing, ContractStore, WorkerFiles, ScheduleFiles):
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
            try:
                os.makedirs(self.root, mode=0o755, exist_ok=True)
            except FileExistsError:  # something that is not a directory is there: say so, not "File exists"
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), self.root) from None
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
        return record.decode(self.load_bytes(job_id), job_id, named=True)

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
        return record.decode(data, job_id, named=True).lease.epoch, data, True

    def ids(self) -> list[str]:
        """Ids of every record name, sorted by byte order.

        Whatever is at the name -- a link, a FIFO, a directory -- counts: it
        is that record's to answer for, as unreadable, when it is read.
        """
        with self._jobs() as jobs:
            return self._ids(jobs)

    def list(self) -> Listing:
        listing = Listing()
        with self._jobs() as jobs:
            for job_id in self._ids(jobs):
                try:
                    data = lock.read(jobs, job_id + ".json", job_id)
                    if data is None:
                        continue  # removed by hand since the directory was read
                    listing.append(record.decode(data, job_id, named=True))
                except JobError as exc:
                    listing.unreadable.append((job_id, exc))
        return listing

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

    def _keys(self, wait: bool) -> FileKeys:
        """A claim's exclusive keys: a lock file each under ``work/.jobctl/exclusive/`` (:mod:`.keys`)."""
        from .keys import FileKeys  # a claim's: not on a piped submit's path

        return FileKeys(self, wait)

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
            rec = record.decode(current, job_id, named=True)
            rec._exposed = False  # only update() hands it to outside code
            apply(rec, self.now())
            data = fsio.within_limit(encode(rec, settle=True), job_id)
            done.append(rec)
            return data

        try:
            with self._jobs() as jobs:
                data = lock.change(jobs, name, edit, job_id, wait=wait)
            return record.decode(data, job_id, named=True) if fresh else done[-1]
        except JobError as exc:
            if not exc.job_id:
                exc.job_id = job_id
            raise

    def _create(self, job_id: str, data: bytes, *, wait: bool = True) -> None:
        def edit(current: bytes | None) -> bytes:
            if current is not None:
                raise Exists(f"job {job_id} is already in the store", job_id)
            return fsio.within_limit(data, job_id)

        with self._jobs() as jobs:
            lock.change(jobs, job_id + ".json", edit, job_id, wait=wait)

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

    def remove(self, job_id: str, before: Callable[[Record], bool] | None = None) -> bool:
        """Delete an ended job's record under its lock; False when it is missing, unreadable or not ended.

        The only deletion of a record jobctl does (``jobctl gc``): a terminal
        record never changes again [JOB-T1], so once it is read ended under
        the lock nobody else can be writing it. ``before`` (see
        ``Store.remove``) runs under the lock too. The lock file stays [JOB-L3].
        """

        def ended(data: bytes) -> bool:
            try:
                rec = record.decode(data, job_id, named=True)
            except JobError:
                return False
            return rec.terminal and (before is None or before(rec))

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
