"""Change notices over one kind's records [JOB-N1].

A subscription's first notice is the present, whether or not anything moved.
After that a notice comes only when the *visible fingerprint* changes -- per
record of the kind, ``id|state|done/total|owner|error`` -- so a renewal, which
moves nothing but ``expires_at``, is not a change. Changes between two calls
to :meth:`Watch.next` coalesce into one notice carrying the latest records.
With a budget, ``quiet`` is reported once nothing visible changed for that
long, again every budget while silent. The watch reads the store on entry to
``next`` and then whenever the store's notices (:meth:`jobctl.store.base.Store.notices`:
inotify on a directory, LISTEN/NOTIFY on PostgreSQL, as the worker uses them)
say a record changed, at once, and at least every 5 s as insurance against a
lost notice. Without notices, and when the caller drives time with its own
``sleep``, it polls every ``poll`` (0.75 s, or every budget when shorter).

What is read: on a notice, only the records it names (``load`` each; one
gone is dropped, one that cannot be read is named in ``unreadable`` as a
listing would name it), so a notice costs what changed, not the size of the
store, as the worker's board re-reads (:mod:`jobctl.board`). Every record
(``list``) is read at the first read, after notices were lost (a queue
overflowed, a connection was made again), at the insurance interval, and at
every read when polling. Either way a notice carries what a full read would
give at that moment: the kind's records sorted by id, each as decoded from
the store. They are the watch's own, shared with later notices: read them,
do not change them.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Collection

from . import ids
from .errors import JobError, NotFound, Refused
from .notices import Changes
from .record import Record
from .store.base import Store

__all__ = ["Notice", "Watch", "watch", "fingerprint", "POLL_SECONDS"]

POLL_SECONDS = 0.75
#: With notices, the longest time without reading the store: insurance against a notice that never came.
INSURANCE_SECONDS = 5.0


def fingerprint(records: list[Record]) -> tuple[str, ...]:
    """What a watcher can see of ``records``: a renewal changes none of it."""
    return tuple(f"{r.id}|{r.state}|{r.progress.done}/{r.progress.total}|{r.lease.owner}|{r.error}" for r in records)


class Notice:
    """``changed``, ``quiet`` or ``closed``, with the kind's records at that moment.

    The records are the watch's, shared with its later notices: read them, do not change them.
    """

    __slots__ = ("what", "records")

    def __init__(self, what: str, records: list[Record] | None = None) -> None:
        self.what = what
        self.records: list[Record] = [] if records is None else records

    def __repr__(self) -> str:
        return f"Notice({self.what!r}, {len(self.records)} records)"


class Watch:
    """One listener's subscription; independent listeners share nothing."""

    def __init__(
        self,
        store: Store,
        kind: str | None,
        budget: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        poll: float = POLL_SECONDS,
        shown: Callable[[list[Record]], tuple[str, ...]] = fingerprint,
    ) -> None:
        self.store = store
        #: What of a record counts as a change ([JOB-N1]'s :func:`fingerprint` unless given).
        self.shown = shown
        self.kind = kind
        self.budget = max(0.0, float(budget))
        #: Seconds between reads without notices.
        self.poll = max(0.01, float(poll))
        self._clock = clock
        self._sleep = time.sleep if sleep is None else sleep
        # Notices first, then the first read: a write between the two is seen twice, never missed.
        # A caller that brings its own sleep drives time itself, and is polled.
        self._changes = Changes(store, keep=True) if sleep is None else None
        recheck = None if self._changes is None else self._changes.recheck
        self._insurance = INSURANCE_SECONDS if recheck is None else min(INSURANCE_SECONDS, recheck)
        self._seen: tuple[str, ...] | None = None
        self._records: list[Record] = []
        #: The records the last read could not read, with why: ``(id, error)``, sorted by id.
        self.unreadable: list[tuple[str, JobError]] = []
        # The snapshot the notices' ids update: the kind's records by id, their ids sorted
        # (as a listing sorts them), and the unreadable ones. Whole only after a full read
        # that nothing lost since: until then every read is a full one.
        self._by_id: dict[str, Record] = {}
        self._ids: list[str] = []
        self._broken: dict[str, JobError] = {}
        self._whole = False
        # What a notice would carry and show, made again only when asked after a change:
        # a renewal moves no mark, so a store of many running jobs costs a watcher little.
        self._listed = True  # _records is _ids' records
        self._view: tuple[str, ...] | None = None  # _visible(), when not None
        self._mark = 0.0
        #: When the store was last read in full (the insurance counts from there).
        self._polled = 0.0
        self.closed = False

    def _read(self, whole: bool = False) -> None:
        """Catch up with the store: the records the notices name, or every one (``whole``, or when it must)."""
        changes = self._changes
        if whole or changes is None or not changes.watching or not self._whole:
            self._poll()
        elif self._clock() - self._polled >= self._insurance:
            self._poll()  # insurance against a notice that never came
        else:
            named = changes.take()
            if named is None:
                self._poll()  # notices were lost: look at everything
            else:
                self._reload(*named)

    def _poll(self) -> None:
        """Read every record (``store.list()``)."""
        self._polled = self._clock()
        if self._changes is not None and self._changes.watching:
            self._changes.take()  # this read covers whatever they named so far
        self._whole = False  # until the read succeeds: what the notices named is in no snapshot
        try:
            listing = self.store.list()
        except OSError:
            return  # a failed read keeps the last snapshot
        self._records = [r for r in listing if self.kind is None or r.kind == self.kind]
        self.unreadable = list(listing.unreadable)
        self._listed = True
        self._view = None
        self._by_id = {r.id: r for r in self._records}
        self._ids = [r.id for r in self._records]
        self._broken = dict(self.unreadable)
        # Ids out of order or repeated (record files that name another file's id) cannot be kept
        # by id: such a store is read in full every time.
        in_order = all(a < b for a, b in zip(self._ids, self._ids[1:], strict=False))
        self._whole = in_order and len(self._broken) == len(self.unreadable)

    def _reload(self, written: Collection[str], removed: Collection[str]) -> None:
        """Apply the notices' ids: re-read the records written, drop the ones removed."""
        if not written and not removed:
            return
        got: list[tuple[str, Record | JobError | None]] = []
        for job_id in sorted(written):
            try:
                ids.check(job_id)
            except JobError:
                self._poll()  # a name load() refuses but a listing reads: let the listing say
                return
            try:
                rec: Record | JobError | None = self.store.load(job_id)
            except NotFound:
                rec = None  # gone again since the notice
            except Refused:
                # The store did not answer (a database away past its patience): nothing is known of
                # the record, and it is not taken for unreadable. The full read says what holds, or raises.
                self._poll()
                return
            except JobError as exc:
                rec = exc  # cannot be read now: named, as a listing names it
            except OSError:
                self._poll()  # the store could not be read: the full read decides (or keeps the snapshot)
                return
            got.append((job_id, rec))
        shown = broke = False  # a mark moved (the view must be made again); the unreadable moved
        for job_id in removed:
            shown |= self._drop(job_id)
            broke |= self._broken.pop(job_id, None) is not None
        for job_id, rec in got:
            if isinstance(rec, Record) and (self.kind is None or rec.kind == self.kind):
                old = self._by_id.get(job_id)
                if old is None:
                    bisect.insort(self._ids, job_id)
                    shown = True
                elif not shown:
                    shown = self.shown([old]) != self.shown([rec])
                self._by_id[job_id] = rec
                self._listed = False
            else:
                shown |= self._drop(job_id)  # gone, unreadable, or (now) of another kind
            if isinstance(rec, JobError):
                self._broken[job_id] = rec
                broke = True
            else:
                broke |= self._broken.pop(job_id, None) is not None
        if broke:
            self.unreadable = sorted(self._broken.items(), key=lambda pair: pair[0])
        if shown or broke:
            self._view = None

    def _drop(self, job_id: str) -> bool:
        """Forget ``job_id``'s record; True when there was one."""
        if self._by_id.pop(job_id, None) is None:
            return False
        del self._ids[bisect.bisect_left(self._ids, job_id)]
        self._listed = False
        return True

    def _current(self) -> list[Record]:
        """The kind's records now, sorted by id."""
        if not self._listed:
            self._records = [self._by_id[job_id] for job_id in self._ids]
            self._listed = True
        return self._records

    def _visible(self) -> tuple[str, ...]:
        # A record becoming unreadable (or readable again) is news too: its kind is unknown.
        if self._view is None:
            unreadable = tuple(f"{job_id}|unreadable" for job_id, _ in self.unreadable)
            self._view = self.shown(self._current()) + unreadable
        return self._view

    def next(self, timeout: float | None = None) -> Notice | None:
        """Wait for the next notice. With ``timeout``, None when it passes first."""
        if self.closed:
            return self._closed()
        changes = self._changes
        watching = changes is not None and changes.watching
        # With notices, an unchanged store need not be read again (a large one costs seconds),
        # and a changed one only where they say.
        self._read()
        now = self._clock()
        seen = self._visible()
        if self._seen is None or seen != self._seen:
            self._seen = seen
            self._mark = now
            return Notice("changed", list(self._current()))
        interval = self._insurance if watching else self.poll
        if self.budget:
            interval = min(interval, self.budget)
        give_up = None if timeout is None else now + timeout
        while True:
            now = self._clock()
            if self.budget and now - self._mark >= self.budget:
                self._mark = now
                return Notice("quiet", list(self._current()))
            wait = interval
            if self.budget:
                wait = min(wait, self._mark + self.budget - now)
            if give_up is not None:
                if now >= give_up:
                    return None
                wait = min(wait, give_up - now)
            moved = True
            if watching:
                assert self._changes is not None
                insurance = self._polled + self._insurance - now
                moved = self._changes.wait(max(min(wait, insurance), 0.0))
                if self.closed:
                    return self._closed()
                if not moved and insurance > wait:
                    continue  # the timeout or the budget came first: nothing to read
                # a change, or the insurance read after self._insurance without one
            else:
                self._sleep(max(wait, 0.0))
            if self.closed:
                return self._closed()
            self._read(whole=not moved)
            seen = self._visible()
            if seen != self._seen:
                self._seen = seen
                self._mark = self._clock()
                return Notice("changed", list(self._current()))

    def _closed(self) -> Notice:
        if self._changes is not None:
            self._changes.close()  # here, not in close(): another thread may be waiting on it
            self._changes = None
        return Notice("closed")

    def close(self) -> None:
        self.closed = True


def watch(store: Store, kind: str | None, budget: float = 0.0, poll: float = POLL_SECONDS) -> Watch:
    """Subscribe to ``kind``'s records (every kind when None); ``budget`` and ``poll`` in seconds."""
    return Watch(store, kind, budget, poll=poll)
