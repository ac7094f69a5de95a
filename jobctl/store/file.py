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
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from .. import ids, lock
from ..errors import Invalid, JobError, NotFound
from ..record import (
    Record,
    decode,
    encode,
    held,
)
from ..wire import lazy_pattern
from .base import Listing, Skipped
from .contract import Apply, ContractStore

__all__ = ["FileStore", "Clock"]

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


class FileStore(ContractStore):
    """A store rooted at a directory; opening it creates ``jobs/`` and ``work/``."""

    def __init__(self, root: str | os.PathLike[str], clock: Clock | None = None) -> None:
        self.root = os.fspath(root)
        self.jobs_dir = os.path.join(self.root, "jobs")
        self.work_dir = os.path.join(self.root, "work")
        os.makedirs(self.jobs_dir, mode=0o755, exist_ok=True)
        os.makedirs(self.work_dir, mode=0o755, exist_ok=True)
        self._clock: Clock = clock or _system_clock

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

    # -- reads ---------------------------------------------------------------

    def load(self, job_id: str) -> Record:
        data = lock.read(self.path(job_id))
        if data is None:
            raise NotFound(f"no job {job_id}", job_id)
        return decode(data, job_id)

    def load_bytes(self, job_id: str) -> bytes:
        data = lock.read(self.path(job_id))
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
        data = lock.read(self.path(job_id))
        if data is None:
            raise NotFound(f"no job {job_id}", job_id)
        m = _EPOCH.search(data)
        if m is not None:
            return int(m.group(1)), data, False
        return decode(data, job_id).lease.epoch, data, True

    def ids(self) -> list[str]:
        """Ids of every record file, sorted by byte order."""
        out = []
        with os.scandir(self.jobs_dir) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(".json") and not name.startswith(".") and entry.is_file():
                    out.append(name[:-5])
        out.sort()
        return out

    def list(self) -> Listing:
        listing = Listing()
        jobs = self.jobs_dir
        for job_id in self.ids():
            data = lock.read(os.path.join(jobs, job_id + ".json"))
            if data is None:
                continue  # removed by hand since the directory was read
            try:
                listing.append(decode(data, job_id))
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
        listing = self.list()
        now = self.now()
        out = Listing(unreadable=listing.unreadable)
        for rec in listing:
            if is_orphan(rec, now):
                out.append(rec)
        return out

    def claim_next(
        self,
        owner: str,
        ttl: float,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> Record | None:
        """The oldest runnable job, claimed: :func:`jobctl.schedule.claim_next` over a listing."""
        from ..schedule import claim_next

        listing = self.list()
        if unreadable is not None:
            unreadable.extend(listing.unreadable)
        return claim_next(self, owner, ttl, kinds, records=listing, skipped=skipped)

    # -- writes --------------------------------------------------------------

    def _write(self, job_id: str, apply: Apply, fresh: bool = False) -> Record:
        """Decode, ``apply``, encode and replace under the lock; return the record written.

        Internal operations hand nobody the record, so it is settled in place
        instead of decoded again; ``fresh`` decodes the bytes written (for a
        record outside code has touched).
        """
        path = self.path(job_id)

        done: list[Record] = []

        def edit(current: bytes | None) -> bytes:
            if current is None:
                raise NotFound(f"no job {job_id}", job_id)
            rec = decode(current, job_id)
            rec._exposed = False  # only update() hands it to outside code
            apply(rec, self.now())
            data = encode(rec, settle=True)
            done.append(rec)
            return data

        try:
            data = lock.change(path, edit)
            return decode(data, job_id) if fresh else done[-1]
        except JobError as exc:
            if not exc.job_id:
                exc.job_id = job_id
            raise

    def _create(self, job_id: str, data: bytes) -> None:
        def edit(current: bytes | None) -> bytes:
            if current is not None:
                raise Invalid(f"job {job_id} already exists", job_id)
            return data

        lock.change(self.path(job_id), edit)

    # -- maintenance -----------------------------------------------------------

    def sweep(self, job_id: str | None = None) -> int:
        """Remove stale staging temporaries (of one record, or of all); return the count."""
        if job_id is not None:
            return lock.sweep(self.path(job_id))
        bases = set()
        with os.scandir(self.jobs_dir) as entries:
            for entry in entries:
                m = _TEMP.match(entry.name)
                if m:
                    bases.add(m.group(1))
        return sum(lock.sweep(os.path.join(self.jobs_dir, base)) for base in sorted(bases))


def is_orphan(rec: Record, now: datetime) -> bool:
    """The adoption rule of [JOB-I11] [JOB-I12] [JOB-T2], for one record at ``now``."""
    if rec.terminal or held(rec.lease, now) or rec.state == "transferred":
        return False
    return not rec.paused or rec.state == "running"
