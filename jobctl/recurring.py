"""Recurring schedules: what one is, when its slots fall, and the one job each slot becomes.

A schedule names a job (a kind and a spec, or a command) and when it recurs:
``every`` N seconds, or a cron line (:mod:`jobctl.cron`). Its *slots* are the
instants it names, in UTC: for ``every`` the multiples of N seconds since
1970-01-01T00:00:00Z (``every 1h`` falls on the hour, ``every 1d`` at
midnight UTC); for a cron line the minutes the line matches. Only slots at
or after the schedule's ``created_at`` (the store's clock when it was added)
belong to it.

Each slot becomes one job, whose id is :func:`slot_id`: derived from the
schedule's name and the slot's time alone, so every worker that fires the
slot submits the same id and the store's create (a file that refuses an
existing name, the table's primary key) lets exactly one through. The job
carries ``jobctl.run/schedule@1`` = ``{"name": NAME, "slot": TIME}``, which is
for people and filters, never critical.

A worker fires only a schedule's *latest* slot at or before now
(:meth:`Schedule.due`), and the store keeps the latest slot fired
(``fired``): slots missed while no worker ran become one job, the latest of
them, not one each. Standard library only, beside jobctl's record layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from . import cron as cronlines
from . import limits
from .errors import Invalid
from .record import Record, format_time, parse_time
from .submitter import check_name as check_submitter
from .submitter import set_submitter
from .wire import Raw, parse_value

__all__ = [
    "Schedule",
    "SCHEDULE_OF",
    "NAME_MAX",
    "STORED_MAX",
    "stored",
    "EVERY",
    "check_name",
    "parse_every",
    "slot_id",
    "schedule_of",
    "new",
]

#: The extension key a fired job carries: ``{"name": NAME, "slot": RFC 3339 time}``.
SCHEDULE_OF = "jobctl.run/schedule@1"
#: The longest schedule name, in characters (a slot's job id does not grow with it).
NAME_MAX = 100
#: The most bytes a schedule takes as stored (its file in a directory store, which a reader refuses
#: past this): a schedule that would not fit is refused when it is made, never written unreadable.
STORED_MAX = 1 << 20
#: ``--every``: a whole number of seconds, from one second to a year.
EVERY = limits.Range("every", 1, limits.YEAR, whole=True)

_EVERY = re.compile(r"([0-9]+)([smhd]?)\Z")  # ASCII digits: "\u0665m" (Arabic-Indic 5) is no duration
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def check_name(name: object, what: str = "schedule name") -> str:
    """``name`` if it can name a schedule: as a job id may be (no control character, separator or leading dot,
    not blank), and at most :data:`NAME_MAX` characters; else ``Invalid`` naming ``what``."""
    if not isinstance(name, str):
        raise Invalid(f"{what} must be a string, not {type(name).__name__}")
    if not name.strip():
        raise Invalid(f"{what} is blank")
    if len(name) > NAME_MAX:
        raise Invalid(f"{what} {name[:40]!r}... is longer than {NAME_MAX} characters")
    if name[0] == ".":
        raise Invalid(f"{what} {name!r} starts with a dot")
    for ch in name:
        if ch in "/\\" or not ch.isprintable():
            raise Invalid(f"{what} {name!r} holds a separator (/ or \\) or a character that is not printable")
    return name


def parse_every(value: object, what: str = "--every") -> int:
    """Seconds between slots: an int, a ``timedelta``, or text ``90``, ``90s``, ``15m``, ``2h``, ``7d``.

    A whole number of seconds in :data:`EVERY`; zero, negative, fractional
    or longer than a year is ``Invalid`` naming ``what``.
    """
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, str):
        match = _EVERY.match(value.strip())
        if match is None:
            raise Invalid(f"{what}: {value!r} is not a duration (a whole number with s, m, h or d: 90s, 15m, 2h, 7d)")
        digits = match.group(1).lstrip("0") or "0"
        if len(digits) > 12:  # more than any duration in range has (and past 4300, more than int() converts)
            raise Invalid(f"{what}: {value.strip()[:20]!r}... is out of range ({EVERY.text()} seconds: 1s to 365d)")
        value = int(digits) * _UNITS[match.group(2)]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not EVERY.holds(value):
        raise Invalid(f"{what}: {value!r} is out of range ({EVERY.text()} seconds: 1s to 365d)")
    return int(value)


def slot_id(name: str, slot: datetime) -> str:
    """The id of the job of ``name``'s slot at ``slot``: the same for every worker that fires it.

    The minted form ``<ms>-<hex20>`` (so every reader takes it, and ids sort
    by slot): the slot in Unix milliseconds, then 20 hex digits of SHA-256
    over the extension key, the name and the slot's time.
    """
    import hashlib  # here: it loads OpenSSL, which a command that fires nothing must not pay for

    ms = int((slot - _EPOCH).total_seconds() * 1000)
    digest = hashlib.sha256(f"{SCHEDULE_OF}\0{name}\0{format_time(slot)}".encode()).hexdigest()[:20]
    return f"{max(0, ms):013d}-{digest}"


def schedule_of(rec: Record) -> tuple[str, str] | None:
    """``(name, slot)`` of the schedule that fired ``rec``, or None (not fired, or another writer's odd value)."""
    value = rec.extensions.get(SCHEDULE_OF)
    if not isinstance(value, dict):
        return None
    name, slot = value.get("name"), value.get("slot")
    return (name, slot) if isinstance(name, str) and isinstance(slot, str) else None


@dataclass(frozen=True)
class Schedule:
    """A recurring job: its name, when (``every`` seconds or a ``cron`` line), and the job (``kind``, ``spec`` text).

    ``created_at`` is the store's clock when it was added; ``fired`` the
    latest slot a worker fired (None before the first); ``by`` who added it
    (kept as each job's submitter).
    """

    name: str
    kind: str
    spec: str
    created_at: datetime
    every: int | None = None
    cron: str | None = None
    by: str = ""
    fired: datetime | None = None

    @property
    def when(self) -> str:
        """How it recurs, as the command line says it: ``every 15m`` or ``cron 0 3 * * *``."""
        if self.every is not None:
            return f"every {_span(self.every)}"
        return f"cron {self.cron}"

    def _line(self) -> cronlines.Cron:
        return cronlines.parse(self.cron or "", f"schedule {self.name}: cron")

    def latest(self, now: datetime) -> datetime | None:
        """The latest slot at or before ``now`` that belongs to the schedule (none before ``created_at``)."""
        if self.every is not None:
            seconds = int((now - _EPOCH).total_seconds()) // self.every * self.every
            slot: datetime | None = _EPOCH + timedelta(seconds=seconds)
        else:
            slot = self._line().previous(now)
        return slot if slot is not None and slot >= _floor(self.created_at) else None

    def due(self, now: datetime) -> datetime | None:
        """The slot a worker fires at ``now``: the latest one, unless it (or a later one) was fired already."""
        slot = self.latest(now)
        if slot is None or (self.fired is not None and slot <= self.fired):
            return None
        return slot

    def next(self, now: datetime) -> datetime | None:
        """The first slot that will fire after ``now``; None when a cron line has no more.

        Not before ``created_at``, and after the latest slot fired: that one
        is later than ``now`` only when the store's clock went back, and no
        slot up to it fires again (:meth:`due`).
        """
        start = max(now, _floor(self.created_at) - timedelta(microseconds=1))
        if self.fired is not None and self.fired > start:
            start = self.fired
        if self.every is not None:
            seconds = int((start - _EPOCH).total_seconds()) // self.every * self.every + self.every
            return _EPOCH + timedelta(seconds=seconds)
        return self._line().next(start)

    def replanned(self, other: Schedule) -> Schedule:
        """``other``'s plan and job, with this one's ``created_at`` and latest slot fired."""
        return replace(other, created_at=self.created_at, fired=self.fired)

    def fired_at(self, slot: datetime) -> Schedule:
        """This schedule with ``slot`` as the latest slot fired."""
        return replace(self, fired=slot)

    def same_plan(self, other: Schedule) -> bool:
        """Whether ``other`` recurs the same way and makes the same job (who added it and when aside)."""
        return (self.every, self.cron, self.kind, self.spec) == (other.every, other.cron, other.kind, other.spec)

    def job(self, slot: datetime) -> Record:
        """The job of the slot at ``slot``: its id (:func:`slot_id`), kind, spec, submitter, and where it came from."""
        rec = Record(id=slot_id(self.name, slot), kind=self.kind, spec=Raw(self.spec))
        rec.extensions[SCHEDULE_OF] = {"name": self.name, "slot": format_time(slot)}
        if self.by:
            set_submitter(rec, self.by)
        return rec

    def to_json(self) -> dict[str, Any]:
        """The schedule as stored (a file's body; the same keys as ``schedule list --json``)."""
        return {
            "name": self.name,
            "every": self.every,
            "cron": self.cron,
            "kind": self.kind,
            "spec": self.spec,
            "by": self.by,
            "created_at": format_time(self.created_at),
            "fired": format_time(self.fired) if self.fired is not None else None,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Schedule:
        """The schedule ``obj`` holds (as :meth:`to_json` wrote it); ``Invalid`` when it is not one."""
        if not isinstance(obj, dict):
            raise Invalid("a schedule is a JSON object")
        name = check_name(obj.get("name"))
        every, line = obj.get("every"), obj.get("cron")
        created = parse_time(obj.get("created_at"), "created_at")
        fired = parse_time(obj.get("fired"), "fired")
        kind, spec, by = obj.get("kind"), obj.get("spec"), obj.get("by", "")
        if created is None or not isinstance(kind, str) or not isinstance(spec, str) or not isinstance(by, str):
            raise Invalid(f"schedule {name}: created_at, kind, spec or by missing or not text")
        return new(name, every=every, cron=line, kind=kind, spec=spec, by=by, now=created, fired=fired)


def new(
    name: str,
    *,
    kind: str,
    now: datetime,
    spec: str = "{}",
    every: object = None,
    cron: str | None = None,
    by: str = "",
    fired: datetime | None = None,
) -> Schedule:
    """A checked :class:`Schedule` created at ``now``; ``Invalid`` naming what is wrong.

    Exactly one of ``every`` (:func:`parse_every`) and ``cron``
    (:func:`jobctl.cron.parse`); the kind as ``submit`` takes one; the spec a
    JSON object (a ``shell`` spec checked as ``submit`` checks it), kept
    byte for byte; the job it makes must be one a store can write.
    """
    from .shell import SHELL, check_kind, parse

    check_name(name)
    if (every is None) == (cron is None):
        raise Invalid(f"schedule {name}: give either every (a duration) or cron (a line), not both or neither")
    seconds = None if every is None else parse_every(every, f"schedule {name}: every")
    if cron is not None:
        cronlines.parse(cron, f"schedule {name}: cron")
    if not isinstance(kind, str):
        raise Invalid(f"schedule {name}: kind must be text")
    check_kind(kind, f"schedule {name}: kind")
    if not isinstance(by, str):
        raise Invalid(f"schedule {name}: by must be text, not {type(by).__name__}")
    if by:
        check_submitter(by, f"schedule {name}: by")
    if not isinstance(spec, str):
        raise Invalid(f"schedule {name}: spec must be JSON text")
    try:
        spec.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid(f"schedule {name}: spec is not UTF-8 text (it holds a lone surrogate)") from None
    try:
        body = parse_value(spec)  # as a record's spec is judged: nesting, duplicate names, NaN
    except Invalid as exc:
        raise Invalid(f"schedule {name}: spec is not JSON: {exc.message}") from None
    if not isinstance(body, dict):
        raise Invalid(f"schedule {name}: spec must be a JSON object")
    sched = Schedule(name, kind, spec, now, every=seconds, cron=cron, by=by, fired=fired)
    _check_size(sched)
    from .record import prepare

    rec = sched.job(_floor(now))
    try:
        if kind == SHELL:
            parse(rec.spec)
        prepare(rec)  # what a store would refuse at the first slot is refused now
    except Invalid as exc:
        raise Invalid(f"schedule {name}: {exc.message}") from None
    return sched


def stored(sched: Schedule) -> bytes:
    """``sched`` as a directory store keeps it: its file's bytes (:mod:`jobctl.store.schedules`)."""
    import json  # where used: its import is ~1.2 ms of every start-up

    return json.dumps(sched.to_json(), ensure_ascii=True, sort_keys=True).encode() + b"\n"


def _check_size(sched: Schedule) -> None:
    """Refuse a schedule larger than :data:`STORED_MAX` as stored, once a slot is fired (a spec, a kind too long)."""
    size = len(stored(replace(sched, fired=sched.fired or sched.created_at)))
    if size > STORED_MAX:
        raise Invalid(
            f"schedule {sched.name}: it takes {size} bytes as stored, over the {STORED_MAX}-byte limit on a schedule"
            " (its spec or kind is too long)"
        )


def _floor(when: datetime) -> datetime:
    """``when`` to the second below (a slot is a whole second or minute)."""
    return when.replace(microsecond=0)


def _span(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
