"""Recurring schedules kept in a directory store: a small file a schedule.

``<root>/work/.jobctl/schedules/<digest>.json`` (0600, the directory 0700),
beside the workers' words: ``.jobctl`` under ``work/`` is jobctl's own, and
upstream readers look at ``jobs/`` alone. A file is named by a digest of its
schedule's name, so no name becomes a path, and holds
:meth:`jobctl.recurring.Schedule.to_json`. Every write -- an add, a worker
marking a slot fired, a removal -- happens under ``flock`` on the file's
``.lock`` beside it (a declaration, :meth:`put_schedule`, too: it reads,
compares and writes under that lock) and is a fresh temporary, ``fsync``, ``rename``
(:func:`jobctl.lock.change`), so an add never replaces a schedule, a slot
marked fired never brings back a removed one, and a reader never sees half
a file. Nothing is opened by following a link (:mod:`jobctl.fsio`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from .. import fsio, lock
from ..errors import Exists, Invalid, JobError, NotFound
from .base import Unreadable

if TYPE_CHECKING:
    from ..recurring import Schedule

__all__ = ["ScheduleFiles", "SCHEDULES", "file_name"]

#: The directory of schedules, as names below a store's root.
SCHEDULES = ("work", ".jobctl", "schedules")

#: The most bytes a schedule's file may have (:data:`jobctl.recurring.STORED_MAX`, which a schedule
#: is checked against when it is made: no schedule is written that its readers would refuse).
MOST_BYTES = 1 << 20


def file_name(name: str) -> str:
    """The file of schedule ``name``: a digest, so that no name is a path (nor differs only in case)."""
    import hashlib

    return "s" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:32] + ".json"


class _Gone(Exception):
    """The schedule a write meant is not there (removed, or removed and added again)."""


def _decoded(data: bytes, name: str) -> Schedule:
    import json  # where used: its import is ~1.2 ms of every start-up

    from ..recurring import Schedule  # here, not at import: a piped submit loads no schedule's code

    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        raise Invalid(f"schedule file {name} is not JSON: {exc}") from None
    sched = Schedule.from_json(obj)
    if file_name(sched.name) != name:
        raise Invalid(f"schedule file {name} holds schedule {sched.name!r}, which is not its name")
    return sched


def _encoded(sched: Schedule) -> bytes:
    from ..recurring import stored  # here, not at import: a piped submit loads no schedule's code

    return stored(sched)


class ScheduleFiles:
    """The :class:`jobctl.store.base.Store` schedule calls of the directory store (a mixin)."""

    root: str

    def _schedules_dir(self, create: bool) -> fsio.Dir:
        return fsio.open_dir(self.root, *SCHEDULES, create=create, mode=0o700)

    def add_schedule(self, schedule: Schedule) -> None:
        name = file_name(schedule.name)

        def edit(current: bytes | None) -> bytes:
            if current is not None:
                raise Exists(f"schedule {schedule.name} exists already", schedule.name)
            return _encoded(schedule)

        with self._schedules_dir(create=True) as at:
            lock.change(at, name, edit, schedule.name)

    def put_schedule(self, schedule: Schedule) -> str:
        name = file_name(schedule.name)
        said = ["unchanged"]

        def edit(current: bytes | None) -> bytes:
            if current is None:
                said[0] = "added"
                return _encoded(schedule)
            kept = _decoded(current, name)
            if kept.same_plan(schedule):
                return current  # equal bytes: lock.change writes nothing
            said[0] = "updated"
            return _encoded(kept.replanned(schedule))

        with self._schedules_dir(create=True) as at:
            lock.change(at, name, edit, schedule.name)
        return said[0]

    def schedules(self, unreadable: Unreadable | None = None) -> list[Schedule]:
        try:
            at = self._schedules_dir(create=False)
        except FileNotFoundError:
            return []
        out: list[Schedule] = []
        with at:
            for entry in sorted(fsio.scan(at), key=lambda e: e.name):
                if not entry.name.endswith(".json"):
                    continue  # its lock, or a temporary of a write under way
                try:
                    data = fsio.read_file(at, entry.name, limit=MOST_BYTES)
                    if data is not None:
                        out.append(_decoded(data, entry.name))
                except JobError as exc:
                    if unreadable is not None:
                        unreadable.append((at.join(entry.name), exc))
        out.sort(key=lambda s: s.name)
        return out

    def schedule(self, name: str) -> Schedule:
        try:
            at = self._schedules_dir(create=False)
        except FileNotFoundError:
            raise NotFound(f"no schedule {name}", name) from None
        with at:
            data = fsio.read_file(at, file_name(name), name, limit=MOST_BYTES)
            if data is None:
                raise NotFound(f"no schedule {name}", name)
            return _decoded(data, file_name(name))

    def remove_schedule(self, name: str) -> bool:
        try:
            at = self._schedules_dir(create=False)
        except FileNotFoundError:
            return False
        with at:
            # Any size a record may be: one kept before the size was checked (or another writer's) goes too.
            if fsio.read_file(at, file_name(name), name) is None:
                return False  # none there: no lock file is made for it (a link or odd file there is refused)
            return lock.remove(at, file_name(name), lambda _data: True, name)

    def mark_fired(self, name: str, created_at: datetime, slot: datetime, *, wait: bool = True) -> bool:
        file = file_name(name)

        def edit(current: bytes | None) -> bytes:
            if current is None:
                raise _Gone
            sched = _decoded(current, file)
            if sched.created_at != created_at:
                raise _Gone  # removed and added again meanwhile: that one has fired nothing
            if sched.fired is not None and sched.fired >= slot:
                return current
            return _encoded(sched.fired_at(slot))

        try:
            with self._schedules_dir(create=False) as at:
                lock.change(at, file, edit, name, wait=wait)
        except (FileNotFoundError, _Gone):
            return False
        return True
