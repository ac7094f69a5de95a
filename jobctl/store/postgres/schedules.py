"""Recurring schedules kept in a PostgreSQL store: a row a schedule (``schedules.sql``).

Each call is one statement. An add is an ``INSERT ... ON CONFLICT DO
NOTHING``: of two adds of one name, the table's primary key lets one through
and the other is ``Exists``. A declaration (:meth:`ScheduleRows.put_schedule`)
is an ``INSERT ... ON CONFLICT DO UPDATE`` whose ``WHERE`` leaves a row of
the same plan untouched: of two declarations at once, the row's lock
orders them, and neither sees half of the other. A slot marked fired moves ``fired`` forward
only, and touches no row of another ``created_at`` (a schedule removed and
added again). A store whose schema predates the table reads as one with no
schedule; writing one there is ``Refused`` with the advice to migrate.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from ...errors import Exists, Invalid, JobError, NotFound, Refused
from ...recurring import Schedule, new
from ..base import Unreadable
from . import row
from .schema import SQL_DIR, queries
from .session import Session, psycopg, read

__all__ = ["ScheduleRows", "NO_TABLE_HINT"]

NO_TABLE_HINT = "add the table of schedules with: jobctl db migrate (the schema version stays)"

_Q = queries(os.path.join(SQL_DIR, "schedule-queries.sql"))


def _no_table(exc: Refused) -> bool:
    return isinstance(exc.__cause__, psycopg.errors.UndefinedTable)


def _schedule(fields: tuple[Any, ...]) -> Schedule:
    name, every, cron, kind, spec, by, created_at, fired = fields
    try:
        return new(name, every=every, cron=cron, kind=kind, spec=spec, by=by, now=created_at, fired=fired)
    except JobError as exc:
        raise Invalid(f"schedule {name} cannot be read: {exc}", name) from None


def _params(schedule: Schedule) -> dict[str, Any]:
    """A schedule's columns as ``schedule_add`` and ``schedule_put`` take them, each text checked to fit."""
    return {
        "name": row.text_fit(schedule.name, "schedule name"),
        "every": schedule.every,
        "cron": schedule.cron,
        "kind": row.text_fit(schedule.kind, "kind"),
        "spec": row.text_fit(schedule.spec, "spec"),
        "by": row.text_fit(schedule.by, "by"),
        "created_at": schedule.created_at,
    }


class ScheduleRows:
    """The :class:`jobctl.store.base.Store` schedule calls of the PostgreSQL store (a mixin)."""

    session: Session

    def _run(self, query: str, params: dict[str, Any]) -> Any:
        try:
            return self.session.one(_Q[query], params)
        except Refused as exc:
            if _no_table(exc):
                exc.hint = NO_TABLE_HINT
            raise

    def add_schedule(self, schedule: Schedule) -> None:
        if self._run("schedule_add", _params(schedule)) is None:
            raise Exists(f"schedule {schedule.name} exists already", schedule.name)

    def put_schedule(self, schedule: Schedule) -> str:
        got = self._run("schedule_put", _params(schedule))
        if got is None:
            return "unchanged"
        return "added" if got[0] else "updated"

    @read
    def schedules(self, unreadable: Unreadable | None = None) -> list[Schedule]:
        try:
            rows = self.session.all(_Q["schedules"], {})
        except Refused as exc:
            if _no_table(exc):
                return []
            raise
        out: list[Schedule] = []
        for fields in rows:
            try:
                out.append(_schedule(fields))
            except Invalid as exc:
                if unreadable is not None:
                    unreadable.append((str(fields[0]), exc))
        return out

    @read
    def schedule(self, name: str) -> Schedule:
        try:
            got = self.session.one(_Q["schedule"], {"name": row.text_fit(name, "schedule name")})
        except Refused as exc:
            if not _no_table(exc):
                raise
            got = None
        if got is None:
            raise NotFound(f"no schedule {name}", name)
        return _schedule(got)

    def remove_schedule(self, name: str) -> bool:
        try:
            got = self.session.one(_Q["schedule_remove"], {"name": row.text_fit(name, "schedule name")})
        except Refused as exc:
            if _no_table(exc):
                return False
            raise
        return got is not None

    def mark_fired(self, name: str, created_at: datetime, slot: datetime, *, wait: bool = True) -> bool:
        # wait changes nothing: the statement holds the row only while it runs on the server.
        got = self._run("schedule_fired", {"name": name, "created_at": created_at, "slot": slot})
        return bool(got and got[0])
