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
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .errors import JobError
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
    """``changed``, ``quiet`` or ``closed``, with the kind's records at that moment."""

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
    ) -> None:
        self.store = store
        self.kind = kind
        self.budget = max(0.0, float(budget))
        #: Seconds between reads without notices.
        self.poll = max(0.01, float(poll))
        self._clock = clock
        self._sleep = time.sleep if sleep is None else sleep
        # Notices first, then the first read: a write between the two is seen twice, never missed.
        # A caller that brings its own sleep drives time itself, and is polled.
        self._changes = Changes(store) if sleep is None else None
        recheck = None if self._changes is None else self._changes.recheck
        self._insurance = INSURANCE_SECONDS if recheck is None else min(INSURANCE_SECONDS, recheck)
        self._seen: tuple[str, ...] | None = None
        self._records: list[Record] = []
        #: The records the last poll could not read, with why: ``(id, error)``.
        self.unreadable: list[tuple[str, JobError]] = []
        self._mark = 0.0
        self._polled = 0.0
        self.closed = False

    def _poll(self) -> None:
        self._polled = self._clock()
        try:
            listing = self.store.list()
        except OSError:
            return  # a failed read keeps the last snapshot
        self._records = [r for r in listing if self.kind is None or r.kind == self.kind]
        self.unreadable = list(listing.unreadable)

    def _visible(self) -> tuple[str, ...]:
        # A record becoming unreadable (or readable again) is news too: its kind is unknown.
        return fingerprint(self._records) + tuple(f"{job_id}|unreadable" for job_id, _ in self.unreadable)

    def next(self, timeout: float | None = None) -> Notice | None:
        """Wait for the next notice. With ``timeout``, None when it passes first."""
        if self.closed:
            return self._closed()
        changes = self._changes
        watching = changes is not None and changes.watching
        # With notices, an unchanged store need not be read again (a large one costs seconds).
        if (
            self._seen is None
            or changes is None
            or not watching
            or changes.wait(0)
            or self._clock() - self._polled >= self._insurance
        ):
            self._poll()
        now = self._clock()
        seen = self._visible()
        if self._seen is None or seen != self._seen:
            self._seen = seen
            self._mark = now
            return Notice("changed", list(self._records))
        interval = self._insurance if watching else self.poll
        if self.budget:
            interval = min(interval, self.budget)
        give_up = None if timeout is None else now + timeout
        while True:
            now = self._clock()
            if self.budget and now - self._mark >= self.budget:
                self._mark = now
                return Notice("quiet", list(self._records))
            wait = interval
            if self.budget:
                wait = min(wait, self._mark + self.budget - now)
            if give_up is not None:
                if now >= give_up:
                    return None
                wait = min(wait, give_up - now)
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
            self._poll()
            seen = self._visible()
            if seen != self._seen:
                self._seen = seen
                self._mark = self._clock()
                return Notice("changed", list(self._records))

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
