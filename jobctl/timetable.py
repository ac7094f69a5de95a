"""Recurring schedules over a store: add, list, remove (the library's calls), and a worker's firing of due slots.

:func:`add`, :func:`remove` and :func:`listing` are what ``jobctl schedule``
and ``/api/schedules`` call. :class:`Firing` is what every running worker
does between its picks: when a schedule's slot is due, it submits the
slot's job (:meth:`jobctl.recurring.Schedule.job`, an id derived from the
schedule's name and the slot) and then marks the slot fired in the store.
However many workers fire one slot, on however many hosts, the store's
create lets one job through under that id; the others find it there
(``Exists``), which is success. A worker killed between the two writes
leaves the slot unmarked, and the next worker's submit finds the job. Both
writes wait for a lock a moment only (``wait=False``): a writer stopped in
the middle of one (SIGSTOP) holds that schedule's firing until it goes on
or dies, never the worker's loop (its claims, its stop), and the slot is
tried again at the next look.

Only a schedule's latest slot is ever fired (:meth:`~jobctl.recurring.Schedule.due`),
so slots missed while no worker ran become one job. Times are the store's
clock (:meth:`jobctl.store.base.Store.now`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from .errors import Exists, JobError
from .record import Record, format_time
from .recurring import Schedule, new
from .store.base import Unreadable

__all__ = ["add", "declare", "remove", "listing", "Firing", "FiringStore", "REREAD"]

#: Seconds between a worker's reads of the schedules when no slot is due sooner: a schedule added
#: is fired from its first slot on, if that slot comes later than this after the add.
REREAD = 5.0


class FiringStore(Protocol):
    """What firing needs of a store."""

    def now(self) -> datetime: ...
    def schedules(self, unreadable: Unreadable | None = None) -> list[Schedule]: ...
    def submit(self, record: Record, *, wait: bool = True) -> str: ...
    def mark_fired(self, name: str, created_at: datetime, slot: datetime, *, wait: bool = True) -> bool: ...


class ScheduleStore(FiringStore, Protocol):
    def add_schedule(self, schedule: Schedule) -> None: ...
    def put_schedule(self, schedule: Schedule) -> str: ...
    def remove_schedule(self, name: str) -> bool: ...


def add(
    store: ScheduleStore,
    name: str,
    *,
    kind: str,
    spec: str = "{}",
    every: object = None,
    cron: str | None = None,
    by: str = "",
) -> Schedule:
    """Keep a new schedule, created now by the store's clock; ``Invalid`` (:func:`jobctl.recurring.new`), ``Exists``.

    ``every``: seconds (an int, a ``timedelta``, or ``"15m"``); ``cron``: a
    line in UTC (:mod:`jobctl.cron`); exactly one of them. Its first slot is
    the first at or after now.
    """
    sched = new(name, kind=kind, spec=spec, every=every, cron=cron, by=by, now=store.now())
    store.add_schedule(sched)
    return sched


def declare(
    store: ScheduleStore,
    name: str,
    *,
    kind: str,
    spec: str = "{}",
    every: object = None,
    cron: str | None = None,
    by: str = "",
) -> str:
    """Keep schedule ``name`` as given, whether or not it is there: ``"added"``, ``"updated"`` or ``"unchanged"``.

    Checked as :func:`add` checks it. Declaring the same plan again writes
    nothing; a changed plan replaces the kept one, which keeps its
    ``created_at`` and the latest slot fired (:meth:`jobctl.store.base.Store.put_schedule`).
    What :meth:`jobctl.Worker.every` and :meth:`jobctl.Worker.cron` do at each start.
    """
    sched = new(name, kind=kind, spec=spec, every=every, cron=cron, by=by, now=store.now())
    return store.put_schedule(sched)


def remove(store: ScheduleStore, name: str) -> bool:
    """Delete schedule ``name``; False when there was none. The jobs it fired stay."""
    return store.remove_schedule(name)


def listing(store: FiringStore, unreadable: Unreadable | None = None) -> list[Schedule]:
    """Every schedule, sorted by name (the unreadable named in ``unreadable``, when given)."""
    return store.schedules(unreadable)


class Firing:
    """A worker's firing of due slots: :meth:`tick` from its loop, :attr:`due_mono` for its sleep.

    Cheap when nothing is due: it reads the schedules at most every
    :data:`REREAD` seconds, and otherwise only when the earliest next slot
    it knows of has come (a monotonic deadline, so the loop sleeps until
    then). ``say`` is handed a line for each slot fired (and each failure, once in a row).
    """

    def __init__(self, store: FiringStore, say: Callable[[str, str, str], None], reread: float = REREAD) -> None:
        self.store = store
        self.say = say
        self.reread = reread
        #: When (monotonic) to look again.
        self.due_mono = 0.0
        self._failing: set[str] = set()  # what was said to fail ("": the reading of them all)

    def tick(self, now_mono: float | None = None) -> int:
        """Fire every due slot if it is time to look; return how many jobs this call created.

        A schedule that cannot be read or fired is said once (until it works
        again) and passed over: the others fire as ever.
        """
        now_mono = time.monotonic() if now_mono is None else now_mono
        if now_mono < self.due_mono:
            return 0
        self.due_mono = now_mono + self.reread
        unreadable: Unreadable = []
        try:
            now = self.store.now()
            scheds = self.store.schedules(unreadable)
        except (JobError, OSError) as exc:
            self._failed("", f"cannot read the schedules: {exc}")
            return 0
        self._failing.discard("")
        failing = {where for where, _ in unreadable}
        for where, why in unreadable:
            self._failed(where, f"cannot read schedule {where}: {why}")
        created = 0
        upcoming: datetime | None = None
        for sched in scheds:
            try:
                created += self._fire(sched, now)
            except (JobError, OSError) as exc:
                self._failed(sched.name, f"cannot fire schedule {sched.name}: {exc}")
                failing.add(sched.name)
                continue
            after = sched.next(now)
            if after is not None and (upcoming is None or after < upcoming):
                upcoming = after
        self._failing &= failing  # what works again is said again when it next fails
        if upcoming is not None:
            self.due_mono = min(self.due_mono, now_mono + max(0.0, (upcoming - now).total_seconds()))
        return created

    def _failed(self, where: str, line: str) -> None:
        if where not in self._failing:
            self.say("schedule-failed", "", line)
        self._failing.add(where)

    def _fire(self, sched: Schedule, now: datetime) -> int:
        slot = sched.due(now)
        if slot is None:
            return 0
        rec = sched.job(slot)
        try:
            self.store.submit(rec, wait=False)
            created = 1
        except Exists:
            created = 0  # another worker fired it first: the slot has its one job
        if created:
            self.say("scheduled", rec.id, f"schedule {sched.name} slot {format_time(slot)}")
        self.store.mark_fired(sched.name, sched.created_at, slot, wait=False)
        return created
