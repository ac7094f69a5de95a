"""The change stream behind ``GET /api/events``: one watch of the store, shared by every open stream.

One :class:`jobctl.watch.Watch` runs in a thread of its own (:class:`_Pump`)
while at least one stream is open: it blocks (inotify on a directory, LISTEN
on PostgreSQL, a reconnecting read when the server is away), so it is never
on the event loop nor in the thread pool the endpoints share. Each stream
(:class:`Subscription`) keeps only what it has not sent yet: the newest view
of each job and pipeline that changed, so a slow reader gets the latest
views, never a backlog.

A stream begins with the whole present (``"full": true``), and after an
outage every stream is sent the whole present again: a reader replaces what
it holds with a full event and applies the others by job id and pipeline
name. The store's recurring schedules ride along: a full event holds them
all (``"schedules"``), and another event holds them all again whenever one
was added, removed, changed or fired, or its next slot moved on (the watch
reads them every :data:`SCHEDULES_EVERY` seconds: no job is written when a
schedule is). The ``status`` event says whether what was sent is up to date:
``live``, or ``stale`` with the time of the last read that succeeded. It is
stale while the watch cannot read the store (a read failed; the thread
tries again, waiting longer each time up to :data:`PAUSE_MOST`) or has been
waiting for one read longer than ``stale_after``. The first failure of an
outage and the read that ends it are each one line on the server's stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from ..errors import JobError
from ..record import UTC, Record, format_time
from ..roster import UNKNOWN, Roster, roster_for
from ..store.base import Store
from ..watch import Watch, fingerprint
from .schedules import schedule_view
from .views import changed_pipelines, changed_views

__all__ = ["Feed", "Subscription", "KEEPALIVE_SECONDS", "STALE_AFTER", "PAUSE_MOST", "SCHEDULES_EVERY", "shown"]

#: A ``status`` event this often, changed or not: it keeps proxies from closing a quiet stream, and a
#: reader that hears nothing for two of these knows the stream itself is gone.
KEEPALIVE_SECONDS = 15.0
#: Seconds one read of the store may take before the stream says it is stale.
STALE_AFTER = 3.0
#: The first wait after a failed read, doubled after each failure of one outage up to :data:`PAUSE_MOST`.
PAUSE_FIRST = 0.5
PAUSE_MOST = 5.0
#: Seconds between two reads of what running workers handle (it changes with no job written).
ROSTER_EVERY = 2.0
#: Seconds between two reads of the recurring schedules (they change with no job written).
SCHEDULES_EVERY = 2.0
#: How long the watch waits at a time, so that it sees a closed feed soon after; and how often a
#: stream looks at the feed's status.
_TICK = 1.0


def shown(records: list[Record]) -> tuple[str, ...]:
    """What the page sees change: [JOB-N1]'s fingerprint and the intent (an approval moves only that)."""
    lines = fingerprint(records)
    return tuple(f"{line}|{rec.want}|{rec.lease.epoch}" for line, rec in zip(lines, records, strict=True))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    said = text.splitlines()[0] if text else ""
    return said if isinstance(exc, (JobError, OSError)) and said else f"{type(exc).__name__}: {said}".rstrip(": ")


def _to_stderr(line: str) -> None:
    sys.stderr.write(f"jobctl serve: {line}\n")
    sys.stderr.flush()


class Feed:
    """The change stream of one application: :meth:`subscribe` for each open ``GET /api/events``."""

    def __init__(
        self, store: Store, *, log: Callable[[str], None] | None = None, stale_after: float = STALE_AFTER
    ) -> None:
        self._store = store
        self._log = _to_stderr if log is None else log
        self._stale_after = stale_after
        self._lock = threading.Lock()
        self._pump: _Pump | None = None
        self._closed = False

    def subscribe(self) -> Subscription:
        """A new stream; the watch starts with the first one open and stops when the last one leaves."""
        loop = asyncio.get_running_loop()
        with self._lock:
            pump = self._pump
            if pump is None or pump.stopped:
                pump = self._pump = _Pump(self._store, self._log, self._stale_after)
            sub = Subscription(pump, loop)
            sub.ended = self._closed
            pump.add(sub)
        return sub

    def close(self) -> None:
        """End every open stream (the server is stopping): each ends its response, and a page reconnects later."""
        with self._lock:
            self._closed = True
            pump = self._pump
        if pump is not None:
            pump.end()


class Subscription:
    """One reader's stream: what the pump changed that it has not sent yet."""

    def __init__(self, pump: _Pump, loop: asyncio.AbstractEventLoop) -> None:
        self._pump = pump
        self._loop = loop
        self._ready = asyncio.Event()
        # Filled by the pump under its lock, emptied by take(): the newest view by id and by name.
        self.full = True
        self.jobs: dict[str, dict[str, Any]] = {}
        self.removed: set[str] = set()
        self.pipelines: dict[str, dict[str, Any]] = {}
        self.removed_pipelines: set[str] = set()
        self.schedules = False  # the schedules changed since this stream last sent them
        self.ended = False  # the server is stopping: the stream ends at its next look

    def poke(self) -> None:
        """From the pump's thread: something waits to be sent."""
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the loop is gone: the server stopped
            self._pump.remove(self)

    async def events(self) -> AsyncIterator[str]:
        """Server-Sent Events text: ``jobs`` events (the first one full) and ``status`` events."""
        said: tuple[str, str | None] | None = None
        beat = 0.0
        try:
            yield "retry: 2000\n\n"
            while True:
                try:
                    await asyncio.wait_for(self._ready.wait(), _TICK)
                except asyncio.TimeoutError:
                    pass
                self._ready.clear()
                if self.ended:
                    return
                data = self._pump.take(self)
                if data is not None:
                    yield f"event: jobs\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
                state, since = self._pump.status()
                now = time.monotonic()
                if state == "connecting" or ((state, since) == said and now - beat < KEEPALIVE_SECONDS):
                    continue
                said, beat = (state, since), now
                status = {"state": state, "since": since, "every": KEEPALIVE_SECONDS}
                yield f"event: status\ndata: {json.dumps(status)}\n\n"
        finally:
            self.close()

    def close(self) -> None:
        self._pump.remove(self)


class _Pump:
    """The thread that reads the store for every open stream, and survives the store going away."""

    def __init__(self, store: Store, log: Callable[[str], None], stale_after: float) -> None:
        self._store = store
        self._log = log
        self._stale_after = stale_after
        self._lock = threading.Lock()
        self._subs: set[Subscription] = set()
        self.stopped = False
        self._wake = threading.Event()
        # What the last read found: views by id and by name, and their JSON text (to see what moved).
        # Replaced whole at each read, never changed in place: take() hands them out as they are.
        self._seen: dict[str, str] = {}
        self._views: dict[str, dict[str, Any]] = {}
        self._pipes_seen: dict[str, str] = {}
        self._pipes: dict[str, dict[str, Any]] = {}
        # The schedules' views as last read, their JSON text, and when (monotonic) to read them again.
        self._schedules: list[dict[str, Any]] = []
        self._schedules_seen = ""
        self._schedules_due = 0.0
        self._read_once = False
        # The records of the last read, and what workers handled then (read again every ROSTER_EVERY s).
        self._records: list[Record] | None = None
        self._roster = UNKNOWN
        self._roster_due = 0.0
        self._fresh: str | None = None  # when the last read that succeeded ended (UTC)
        self._busy: float | None = None  # time.monotonic() when the read under way began
        self._failure: float | None = None  # time.monotonic() when this outage's first read failed
        self._thread = threading.Thread(target=self._run, name="jobctl-events", daemon=True)
        self._thread.start()

    # -- the streams -------------------------------------------------------------

    def add(self, sub: Subscription) -> None:
        with self._lock:
            self._subs.add(sub)

    def remove(self, sub: Subscription) -> None:
        with self._lock:
            self._subs.discard(sub)
            if not self._subs:
                self.stopped = True  # the last reader left: the thread ends and lets go of its watch
                self._wake.set()

    def end(self) -> None:
        """End every stream: the server is stopping (the last one to leave stops the thread)."""
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            sub.ended = True
            sub.poke()

    def take(self, sub: Subscription) -> dict[str, Any] | None:
        """What ``sub`` has to send: the whole present once, then what changed; None when nothing."""
        with self._lock:
            if not self._read_once:
                return None
            if sub.full:
                sub.full = sub.schedules = False
                sub.jobs, sub.removed, sub.pipelines, sub.removed_pipelines = {}, set(), {}, set()
                return {
                    "full": True,
                    "jobs": list(self._views.values()),
                    "pipelines": list(self._pipes.values()),
                    "schedules": self._schedules,
                }
            if not (sub.jobs or sub.removed or sub.pipelines or sub.removed_pipelines or sub.schedules):
                return None
            data: dict[str, Any] = {
                "jobs": list(sub.jobs.values()),
                "removed": sorted(sub.removed),
                "pipelines": list(sub.pipelines.values()),
                "removed_pipelines": sorted(sub.removed_pipelines),
            }
            if sub.schedules:
                data["schedules"] = self._schedules  # all of them: a reader replaces what it holds
            sub.jobs, sub.removed, sub.pipelines, sub.removed_pipelines = {}, set(), {}, set()
            sub.schedules = False
            return data

    def status(self) -> tuple[str, str | None]:
        """``(state, since)``: ``live``, ``stale`` (since the last read that succeeded), or ``connecting``."""
        with self._lock:
            busy = self._busy
            stuck = busy is not None and time.monotonic() - busy > _TICK + self._stale_after
            if self._failure is not None or stuck:
                return "stale", self._fresh
            return ("live" if self._read_once else "connecting"), None

    # -- the thread --------------------------------------------------------------

    def _run(self) -> None:
        watch: Watch | None = None
        pause = PAUSE_FIRST
        try:
            while not self.stopped:
                self._busy = time.monotonic()
                try:
                    if watch is None:
                        watch = Watch(self._store, None, shown=shown)  # LISTEN needs the server too
                    notice = watch.next(timeout=_TICK)
                    if notice is not None and notice.what == "changed":
                        self._records = notice.records
                        self._publish(notice.records, self._store.now(), roster_for(self._store, notice.records))
                    elif self._records is not None and time.monotonic() >= self._roster_due:
                        self._recheck_roster(self._records)
                    if time.monotonic() >= self._schedules_due:
                        self._recheck_schedules()
                except Exception as exc:  # whatever the store raised: said once, tried again; the thread lives on
                    self._busy = None
                    self._failed(exc)
                    self._wake.wait(pause)
                    pause = min(pause * 2, PAUSE_MOST)
                    continue
                self._busy = None
                pause = PAUSE_FIRST
                self._succeeded()
        finally:
            if watch is not None:
                watch.close()
                watch.next(0)  # a closed watch lets go of its notices (inotify, LISTEN) on its next call

    def _recheck_roster(self, records: list[Record]) -> None:
        """What workers handle changes with no job written (a worker starts, stops or is killed): read it again."""
        roster = roster_for(self._store, records)
        if roster != self._roster:
            self._publish(records, self._store.now(), roster)
        else:
            self._roster_due = time.monotonic() + ROSTER_EVERY

    def _recheck_schedules(self) -> None:
        """Read the schedules again; every stream that has been sent them is sent them all when they changed."""
        now = self._store.now()
        views = [schedule_view(sched, now) for sched in self._store.schedules()]
        text = json.dumps(views, sort_keys=True)
        self._schedules_due = time.monotonic() + SCHEDULES_EVERY
        if text == self._schedules_seen:
            return
        with self._lock:
            self._schedules, self._schedules_seen = views, text
            if not self._read_once or self._failure is not None:
                return  # every stream is sent the whole present next, which has them
            subs = [sub for sub in self._subs if not sub.full]
            for sub in subs:
                sub.schedules = True
        for sub in subs:
            sub.poke()

    def _publish(self, records: list[Record], now: datetime, roster: Roster) -> None:
        self._roster, self._roster_due = roster, time.monotonic() + ROSTER_EVERY
        seen, changed, gone = changed_views(self._seen, records, now, roster)
        pipes_seen, pipes, pipes_gone = changed_pipelines(self._pipes_seen, records, now, roster)
        views = dict(self._views)
        for job_id in gone:
            del views[job_id]
        views.update((view["id"], view) for view in changed)
        named = dict(self._pipes)
        for name in pipes_gone:
            del named[name]
        named.update((view["name"], view) for view in pipes)
        with self._lock:
            self._seen, self._views, self._pipes_seen, self._pipes = seen, views, pipes_seen, named
            if not self._read_once:
                return  # the first read: every stream is sent it whole
            subs = list(self._subs)
            if self._failure is not None:
                # The read that ends an outage: every reader is sent the whole present, never a part of it
                # first (a stream that took these as changes would show them before the full event).
                for sub in subs:
                    sub.full = True
                return
            for sub in subs:
                if sub.full:
                    continue  # it is sent the whole present, which has these
                for view in changed:
                    sub.jobs[view["id"]] = view
                    sub.removed.discard(view["id"])
                for job_id in gone:
                    sub.jobs.pop(job_id, None)
                    sub.removed.add(job_id)
                for view in pipes:
                    sub.pipelines[view["name"]] = view
                    sub.removed_pipelines.discard(view["name"])
                for name in pipes_gone:
                    sub.pipelines.pop(name, None)
                    sub.removed_pipelines.add(name)
        if changed or gone or pipes or pipes_gone:
            for sub in subs:
                sub.poke()

    def _succeeded(self) -> None:
        with self._lock:
            first, failed = not self._read_once, self._failure
            self._read_once = True
            self._failure = None
            self._fresh = format_time(datetime.now(UTC))
            subs = list(self._subs)
            if failed is not None:
                for sub in subs:
                    sub.full = True  # after an outage, every reader is sent the whole present again
        if failed is not None:
            self._log(f"the change stream reads the store again (it could not for {time.monotonic() - failed:.0f} s)")
        if first or failed is not None:
            for sub in subs:
                sub.poke()

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            first = self._failure is None
            if first:
                self._failure = time.monotonic()
            subs = list(self._subs)
        if first:  # one line an outage, however long it lasts
            self._log(f"the change stream cannot read the store: {_first_line(exc)}; trying again (pages say stale)")
        for sub in subs:
            sub.poke()
