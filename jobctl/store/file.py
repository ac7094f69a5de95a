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

import errno
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from .. import ids, lock, summary
from ..errors import Invalid, JobError, LeaseExpired, LeaseHeld, NotFound, Refused, StaleEpoch, Terminal
from ..record import (
    STATES,
    WANTS,
    Intent,
    Lease,
    Recall,
    Record,
    decode,
    encode,
    held,
)
from ..wire import Raw, lazy_pattern
from .base import UNSET, Listing, OpenListing, Unreadable

__all__ = ["FileStore", "Clock"]

Clock = Callable[[], datetime]


def _system_clock() -> datetime:
    return datetime.now(timezone.utc)


def _seconds(value: Any, what: str) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise Invalid(f"{what} must be a non-negative number of seconds, not {value!r}")
    return timedelta(seconds=value)


def _epoch(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Invalid(f"epoch must be a non-negative integer, not {value!r}")
    return value


# The lease block as every conforming writer lays it out; "\n  " anchors it
# at the record's top level (a raw newline cannot occur inside a JSON string).
_EPOCH: re.Pattern[bytes] = lazy_pattern(
    globals(),
    "_EPOCH",
    rb'\n  "lease": \{\n    "owner": "[^"\\\n]*(?:\\.[^"\\\n]*)*",\n    "epoch": (\d+),\n',
)
_TEMP: re.Pattern[str] = lazy_pattern(globals(), "_TEMP", r"(.+\.json)\.[A-Za-z0-9_]+\.tmp\Z")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_S_IFMT = 0o170000
_S_IFREG = stat.S_IFREG


def _read_stat(path: str) -> tuple[bytes, os.stat_result] | None:
    """The bytes of a regular file and the identity of the very inode they came from; None when missing.

    ``fstat`` on the descriptor read, not a ``stat`` of the name: a
    replacement between the two would pair new bytes with an old identity.
    A link is refused (``ELOOP``), never followed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


class FileStore:
    """A store rooted at a directory; opening it creates ``jobs/`` and ``work/``.

    ``summaries`` is where the per-user cache of finished records' summaries
    lives (:mod:`jobctl.summary`): True for the user's cache directory, a
    path for another one, False for none (every scan then decodes every record).
    """

    def __init__(
        self, root: str | os.PathLike[str], clock: Clock | None = None, *, summaries: bool | str = True
    ) -> None:
        self.root = os.fspath(root)
        self.summaries = summaries
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

    def _summaries_dir(self) -> str | None:
        if self.summaries is False:
            return None
        if self.summaries is True:
            return summary.default_dir()
        return os.fspath(self.summaries)

    def list_open(self) -> OpenListing:
        """The open records and every record's state, decoding only what the cache cannot vouch for.

        A record file whose identity matches its cached summary is taken as
        summarised (finished records only); every other one is read and
        decoded. When ``jobs/`` itself is unchanged since the cache was
        written, the finished records are not even statted: a conforming
        writer replaces a record by rename, which changes the directory
        [JOB-W3]. A record edited in place by hand is noticed only once the
        directory changes; open records are read on every call regardless.
        """
        jobs = self.jobs_dir
        try:
            jobs_stat = os.stat(jobs)
        except OSError:
            jobs_stat = None
        cache = summary.Summaries.load(self._summaries_dir(), jobs, jobs_stat)
        out = OpenListing()
        states = out.states
        if jobs_stat is not None and cache.fresh(jobs_stat):
            states.update(cache.states())
            for job_id in cache.others:
                self._take_open(job_id, out, None)
            out.sort(key=_by_id)
            return out
        cache.begin()
        # The loop every record file passes through: one lstat, one lookup.
        known = cache.table.get
        seen = cache.seen.append
        with os.scandir(jobs) as entries:
            for entry in entries:
                name = entry.name
                if name[-5:] != ".json" or name[0] == ".":
                    continue
                job_id = name[:-5]
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if st.st_mode & _S_IFMT != _S_IFREG:
                    if entry.is_file():  # a link to a record: read as list() does, never cached
                        cache.other(job_id)
                        self._take_open(job_id, out, None)
                    continue
                key = f"{job_id} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"  # summary.key
                state = known(key)
                if state is not None:
                    states[job_id] = state
                    seen((key, state))
                    continue
                self._take_open(job_id, out, cache)
        if jobs_stat is not None:
            cache.finish(jobs_stat)
            cache.save()
        out.sort(key=_by_id)
        out.unreadable.sort(key=lambda pair: pair[0])
        return out

    def scan(self, unreadable: Unreadable, *, summaries: bool = True) -> Iterator[Record | summary.Summary]:
        """Every record in id order, one at a time, for a listing that prints as it reads.

        A finished record the summary cache vouches for (same file identity)
        comes as its :class:`jobctl.summary.Summary` (unless ``summaries`` is
        False); every other one is read and decoded. The unreadable ones are appended to ``unreadable`` as
        they are met. Memory holds the ids and the summaries, never the records.
        """
        jobs = self.jobs_dir
        try:
            jobs_stat = os.stat(jobs)
        except OSError:
            jobs_stat = None
        cache = summary.Summaries.load(self._summaries_dir(), jobs, jobs_stat)
        listed = summary.Listed.of(cache)
        if not summaries:
            listed.directory = None  # neither believed nor written
            listed.table = {}
        lookup = listed.lookup
        for job_id in self.ids():
            path = f"{jobs}/{job_id}.json"  # ids() are names found in jobs/: no join needed
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if st.st_mode & _S_IFMT == _S_IFREG:
                known = lookup(job_id, st)
                if known is not None:
                    yield known
                    continue
            got: tuple[bytes, os.stat_result | None] | None
            try:
                got = _read_stat(path)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                raw = lock.read(path)  # a link: read as list() reads it, never cached
                got = None if raw is None else (raw, None)
            if got is None:
                continue
            data, fst = got
            try:
                rec = decode(data, job_id)
            except JobError as exc:
                unreadable.append((job_id, exc))
                continue
            if rec.terminal and fst is not None:
                listed.remember(_summary_of(rec), fst)
            yield rec
        listed.save()

    def _take_open(self, job_id: str, out: OpenListing, cache: summary.Summaries | None) -> None:
        """Read and decode one record into ``out``; tell ``cache`` what it was."""
        path = os.path.join(self.jobs_dir, job_id + ".json")
        got: tuple[bytes, os.stat_result | None] | None
        try:
            got = _read_stat(path)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raw = lock.read(path)  # a link after all: read as list() reads it, never cached
            got = None if raw is None else (raw, None)
        if got is None:
            return  # removed since the directory was read
        data, st = got
        try:
            rec = decode(data, job_id)
        except JobError as exc:
            out.unreadable.append((job_id, exc))
            if cache is not None:
                cache.other(job_id)
            return
        out.states[job_id] = rec.state
        if not rec.terminal:
            out.append(rec)
        if cache is not None:
            if st is None:
                cache.other(job_id)
            else:
                cache.remember(job_id, st, rec.state if rec.terminal else None)

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

    # -- writes --------------------------------------------------------------

    def _write(self, job_id: str, apply: Callable[[Record, datetime], None], fresh: bool = False) -> Record:
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

    def _as_holder(
        self, job_id: str, epoch: int, apply: Callable[[Record, datetime], None], fresh: bool = False
    ) -> Record:
        """A write by the lease holder: terminal, stale epoch and lapse refused first."""
        _epoch(epoch)

        def checked(rec: Record, now: datetime) -> None:
            if rec.terminal:
                raise Terminal(f"job {job_id} is {rec.state}; nothing reopens it")
            if rec.lease.epoch != epoch:
                raise StaleEpoch(
                    f"job {job_id} is at epoch {rec.lease.epoch}, not {epoch}: "
                    f"{rec.lease.owner or 'somebody'} claimed it since"
                )
            if not held(rec.lease, now):
                raise LeaseExpired(f"job {job_id}: the lease of epoch {epoch} has lapsed or was released")
            apply(rec, now)
            rec.updated_at = now

        return self._write(job_id, checked, fresh)

    def submit(self, record: Record) -> str:
        if not isinstance(record, Record):
            raise Invalid("submit takes a Record")
        job_id = ids.check(record.id) if record.id else ids.mint()
        spec = record.spec
        if not isinstance(spec, dict) and not (isinstance(spec, Raw) and spec.text.startswith("{")):
            raise Invalid("spec must be a JSON object", job_id)
        now = self.now()
        rec = record.replace(
            id=job_id,
            state=record.state or "pending",
            progress=record.progress.replace(updated_at=now),
            lease=Lease(),
            intent=None if record.intent is None else record.intent.replace(at=record.intent.at or now),
            created_at=now,
            updated_at=now,
            extensions=dict(record.extensions),
            requires=list(record.requires),
            content=list(record.content),
            critical=list(record.critical),
            _raw=dict(record._raw),
            _text=record._text,
        )
        data = encode(rec)

        def edit(current: bytes | None) -> bytes:
            if current is not None:
                raise Invalid(f"job {job_id} already exists", job_id)
            return data

        lock.change(self.path(job_id), edit)
        return job_id

    def claim(self, job_id: str, owner: str, ttl_seconds: float) -> Record:
        if not isinstance(owner, str) or not owner.strip():
            raise Refused("claim needs an owner", job_id)
        ttl = _seconds(ttl_seconds, "ttl")
        seen, data, exact = self._read_epoch(job_id)

        def apply(rec: Record, now: datetime) -> None:
            nonlocal seen, exact
            lease = rec.lease
            if lease.epoch != seen and not exact:
                seen, exact = decode(data, job_id).lease.epoch, True  # the pattern may have misread
            if lease.epoch != seen:
                raise LeaseHeld(f"job {job_id} moved since it was read (epoch {seen} -> {lease.epoch})")
            if rec.terminal:
                raise Terminal(f"job {job_id} is {rec.state}; nothing reopens it")
            if held(lease, now):
                if lease.owner != owner:
                    raise LeaseHeld(
                        f"job {job_id} is held by {lease.owner} until {lease.expires_at:%Y-%m-%dT%H:%M:%SZ}"
                    )
                if lease.recall is not None:
                    raise LeaseHeld(f"job {job_id} is recalled ({lease.recall.reason}); its holder cannot re-claim it")
            rec.lease = Lease(owner, lease.epoch + 1, now + ttl)
            if rec.state in ("pending", "running"):
                rec.state = "running"

        return self._write(job_id, apply)

    def renew(self, job_id: str, epoch: int, ttl_seconds: float) -> Record:
        _epoch(epoch)
        ttl = _seconds(ttl_seconds, "ttl")

        def apply(rec: Record, now: datetime) -> None:
            lease = rec.lease
            if lease.epoch != epoch:
                raise StaleEpoch(f"job {job_id} is at epoch {lease.epoch}, not {epoch}")
            if not held(lease, now):
                raise LeaseExpired(f"job {job_id}: the lease of epoch {epoch} has lapsed or was released")
            expires = now + ttl
            if lease.recall is not None and lease.recall.until is not None and expires > lease.recall.until:
                expires = lease.recall.until
            lease.expires_at = expires

        return self._write(job_id, apply)

    def release(self, job_id: str, epoch: int) -> Record:
        def apply(rec: Record, now: datetime) -> None:
            rec.lease.expires_at = now
            rec.lease.owner = ""
            if rec.state == "running" and rec.delegation is None:
                rec.state = "pending"

        return self._as_holder(job_id, epoch, apply)

    def update(self, job_id: str, epoch: int, mutate: Callable[[Record], object]) -> Record:
        def envelope(rec: Record) -> tuple[str, tuple[str, ...]] | None:
            return None if rec.envelope is None else (rec.envelope.schema, tuple(rec.envelope.actions))

        def apply(rec: Record, now: datetime) -> None:
            before = (rec.id, rec.kind, rec.opaque_text("spec"), rec.created_at, envelope(rec))
            lease = rec.lease.replace(recall=None if rec.lease.recall is None else rec.lease.recall.replace())
            intent = None if rec.intent is None else rec.intent.replace()
            rec._exposed = True
            mutate(rec)
            after = (rec.id, rec.kind, rec.opaque_text("spec"), rec.created_at, envelope(rec))
            for name, old, new in zip(("id", "kind", "spec", "created_at", "envelope"), before, after, strict=True):
                if old != new:
                    raise Invalid(f"job {job_id}: {name} cannot change under a lease [JOB-M1]")
            if rec.lease != lease:
                raise Invalid(f"job {job_id}: the lease changes only by claim, renew and release")
            if rec.intent != intent:
                raise Invalid(f"job {job_id}: intent changes only by set_intent")

        # The caller's mutate may keep references into the record it was handed:
        # what it gets back is decoded afresh from the bytes written [JOB-M2].
        return self._as_holder(job_id, epoch, apply, fresh=True)

    def progress(self, job_id: str, epoch: int, done: int, checkpoint: Any = UNSET) -> Record:
        """Record how far the holder got, and optionally what a successor needs."""
        if isinstance(done, bool) or not isinstance(done, int) or done < 0:
            raise Invalid(f"done must be a non-negative integer, not {done!r}", job_id)

        def apply(rec: Record, now: datetime) -> None:
            rec.progress.done = done
            rec.progress.updated_at = now
            if checkpoint is not UNSET:
                rec.checkpoint = checkpoint

        return self._as_holder(job_id, epoch, apply)

    def finish(
        self,
        job_id: str,
        epoch: int,
        state: str,
        *,
        error: str | None = None,
        checkpoint: Any = UNSET,
        done: int | None = None,
    ) -> Record:
        """Set the state; error, checkpoint and done travel in the same write [JOB-T4]."""
        if done is not None and (isinstance(done, bool) or not isinstance(done, int) or done < 0):
            raise Invalid(f"done must be a non-negative integer, not {done!r}", job_id)

        def apply(rec: Record, now: datetime) -> None:
            if state not in STATES:
                raise Invalid(f"{state!r} is not a state ({', '.join(STATES)})")
            rec.state = state
            if error is not None:
                rec.error = error
            if checkpoint is not UNSET:
                rec.checkpoint = checkpoint
            if done is not None:
                rec.progress.done = done
                rec.progress.updated_at = now

        return self._as_holder(job_id, epoch, apply)

    def set_intent(self, job_id: str, want: str, by: str = "") -> Record:
        if want not in WANTS:
            raise Invalid(f"intent {want!r} is not run, pause or cancel [JOB-I1]", job_id)

        def apply(rec: Record, now: datetime) -> None:
            if rec.terminal:
                raise Terminal(f"job {job_id} is {rec.state}; nothing reopens it")
            rec.intent = Intent(want, by or "", now)
            rec.updated_at = now

        return self._write(job_id, apply)

    def recall(self, job_id: str, epoch: int, reason: str, by: str = "", grace: float = 30.0) -> Record:
        if not isinstance(reason, str) or not reason.strip():
            raise Invalid("a recall needs a reason", job_id)
        _epoch(epoch)
        window = _seconds(grace, "grace")

        def apply(rec: Record, now: datetime) -> None:
            lease = rec.lease
            if rec.terminal:
                raise Terminal(f"job {job_id} is {rec.state}; there is nothing to give back")
            if lease.epoch != epoch:
                raise StaleEpoch(f"job {job_id} is at epoch {lease.epoch}, not {epoch}")
            if not held(lease, now):
                raise LeaseExpired(f"job {job_id}: nobody holds the lease of epoch {epoch}")
            until = now + window
            lease.recall = Recall(reason, now, until, by or "")
            if lease.expires_at is None or until < lease.expires_at:
                lease.expires_at = until
            rec.updated_at = now

        return self._write(job_id, apply)

    def cancel(self, job_id: str, by: str, ttl_seconds: float = 15.0) -> Record:
        """Ask for a stop and, when nobody holds the job, stop it now [JOB-S3] [JOB-S4].

        An already cancelled job is a success (a double click); another
        terminal state is ``Terminal``. When somebody holds the lease the
        intent is recorded and its holder is expected to honour it.
        """
        rec = self.load(job_id)
        if rec.state == "cancelled":
            return rec
        self.set_intent(job_id, "cancel", by)
        try:
            mine = self.claim(job_id, by, ttl_seconds)
        except (LeaseHeld, Terminal):
            return self.load(job_id)
        return self.finish(job_id, mine.lease.epoch, "cancelled")

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


def _summary_of(rec: Record) -> summary.Summary:
    return summary.Summary(
        rec.id,
        rec.kind,
        rec.state,
        rec.progress.done,
        rec.progress.total,
        rec.lease.owner,
        rec.lease.epoch,
        rec.error,
        rec.checkpoint_text(),
    )


def _by_id(rec: Record) -> str:
    return rec.id


def is_orphan(rec: Record, now: datetime) -> bool:
    """The adoption rule of [JOB-I11] [JOB-I12] [JOB-T2], for one record at ``now``."""
    if rec.terminal or held(rec.lease, now) or rec.state == "transferred":
        return False
    return not rec.paused or rec.state == "running"
