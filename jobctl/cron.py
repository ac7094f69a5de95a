"""Cron lines: ``m h dom mon dow``, parsed and matched in UTC (standard library only).

Five fields, as crontab(5) writes them: minute (0-59), hour (0-23), day of
the month (1-31), month (1-12 or ``jan``..``dec``) and day of the week (0-7,
0 and 7 both Sunday, or ``sun``..``sat``). Each field is a comma-separated
list of ``*``, ``N``, ``N-M``, each optionally followed by ``/STEP``; ``N/STEP``
means from N to the field's end. Names are not case-sensitive and may stand
in ranges (``mon-fri``). The shorthands ``@hourly``, ``@daily`` (``@midnight``),
``@weekly``, ``@monthly`` and ``@yearly`` (``@annually``) stand for their lines.

As cron does, a day matches when both day fields match, unless both are
restricted (neither begins with ``*``): then either one is enough
(``0 0 1,15 * fri`` runs on the 1st, the 15th and every Friday). Every time
is UTC: a line names instants, never a host's local time.

A line that cannot be parsed is :class:`jobctl.errors.Invalid`, naming the
field and what is wrong with it; so is a line no date can ever match
(``0 0 30 feb *``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from .errors import Invalid

__all__ = ["Cron", "parse", "FIELDS"]

#: Each field's name, lowest and highest value.
FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)

_MONTHS = {name: n for n, name in enumerate(("jan", "feb", "mar", "apr", "may", "jun"), start=1)}
_MONTHS.update({name: n for n, name in enumerate(("jul", "aug", "sep", "oct", "nov", "dec"), start=7)})
_DAYS = {name: n for n, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_NAMES = {3: _MONTHS, 4: _DAYS}

_SHORTHANDS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

#: The longest line taken, in characters: a real one is far shorter.
MAX_LINE = 200

#: How far a search for the next or previous match looks, in days: every day
#: a line can match recurs within 8 years (a 29 February, or a weekday
#: falling on one).
_HORIZON = 8 * 366


class Cron:
    """A parsed cron line: the sets of values each field allows, and whether the day fields are restricted."""

    __slots__ = ("line", "minutes", "hours", "days", "months", "weekdays", "any_day", "any_weekday")

    def __init__(self, line: str, sets: list[frozenset[int]], stars: list[bool]) -> None:
        self.line = line
        self.minutes, self.hours, self.days, self.months, weekdays = sets
        self.weekdays = frozenset(7 if d == 0 else d for d in weekdays)  # isoweekday: Sunday is 7
        self.any_day, self.any_weekday = stars[2], stars[4]

    def __repr__(self) -> str:
        return f"Cron({self.line!r})"

    def day_matches(self, year: int, month: int, day: int) -> bool:
        """Whether the date is one the line runs on (crontab's OR of the two day fields when both are restricted)."""
        if month not in self.months:
            return False
        dom = day in self.days
        dow = datetime(year, month, day).isoweekday() in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow

    def matches(self, when: datetime) -> bool:
        """Whether the minute ``when`` is in (a naive time is taken as UTC) is one the line names."""
        t = _utc(when)
        return t.minute in self.minutes and t.hour in self.hours and self.day_matches(t.year, t.month, t.day)

    def previous(self, when: datetime) -> datetime | None:
        """The latest instant the line names at or before ``when`` (UTC, whole minutes); None beyond the horizon."""
        t = _utc(when).replace(second=0, microsecond=0)
        day = t.date()
        for n in range(_HORIZON):
            date = day - timedelta(days=n)
            if not self.day_matches(date.year, date.month, date.day):
                continue
            limit = (t.hour, t.minute) if n == 0 else (23, 59)
            for hour in sorted(self.hours, reverse=True):
                if hour > limit[0]:
                    continue
                minutes = [m for m in self.minutes if hour < limit[0] or m <= limit[1]]
                if minutes:
                    return datetime(date.year, date.month, date.day, hour, max(minutes), tzinfo=timezone.utc)
        return None

    def next(self, when: datetime) -> datetime | None:
        """The earliest instant the line names strictly after ``when`` (UTC, whole minutes); None beyond the horizon."""
        t = _utc(when).replace(second=0, microsecond=0) + timedelta(minutes=1)
        day = t.date()
        for n in range(_HORIZON):
            date = day + timedelta(days=n)
            if not self.day_matches(date.year, date.month, date.day):
                continue
            floor = (t.hour, t.minute) if n == 0 else (0, 0)
            for hour in sorted(self.hours):
                if hour < floor[0]:
                    continue
                minutes = [m for m in self.minutes if hour > floor[0] or m >= floor[1]]
                if minutes:
                    return datetime(date.year, date.month, date.day, hour, min(minutes), tzinfo=timezone.utc)
        return None


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def parse(line: str, what: str = "--cron") -> Cron:
    """The line as a :class:`Cron`; ``Invalid`` naming ``what`` and the field that cannot be read."""
    if not isinstance(line, str):
        raise Invalid(f"{what} must be a string, not {type(line).__name__}")
    if len(line) > MAX_LINE:
        raise Invalid(f"{what} is longer than {MAX_LINE} characters")
    if not line.isprintable():
        raise Invalid(f"{what} {line!r} holds a control character")
    text = " ".join(line.split())
    if text.startswith("@"):
        if text.lower() not in _SHORTHANDS:
            raise Invalid(f"{what} {line!r}: {text!r} is not a shorthand ({', '.join(_SHORTHANDS)})")
        text = _SHORTHANDS[text.lower()]
    fields = text.split(" ") if text else []
    if len(fields) != 5:
        raise Invalid(
            f"{what} {line!r} has {len(fields)} field(s); a cron line has 5: minute hour day-of-month month day-of-week"
        )
    sets: list[frozenset[int]] = []
    stars: list[bool] = []
    for index, field in enumerate(fields):
        name, low, high = FIELDS[index]
        try:
            sets.append(_field(field, index, low, high))
        except ValueError as exc:
            raise Invalid(f"{what} {line!r}: field {index + 1} ({name}) {field!r}: {exc}") from None
        stars.append(field.startswith("*"))
    cron = Cron(line, sets, stars)
    if cron.next(datetime(2000, 1, 1, tzinfo=timezone.utc)) is None:  # 2000..2008 holds every kind of year
        raise Invalid(f"{what} {line!r}: no date matches its day-of-month, month and day-of-week fields")
    return cron


def _field(text: str, index: int, low: int, high: int) -> frozenset[int]:
    out: set[int] = set()
    for item in text.split(","):
        if not item:
            raise ValueError("an empty item in its list")
        body, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or not step_text.isascii():
                raise ValueError(f"step {step_text!r} is not a whole number")
            step = int(step_text)
            if not 1 <= step <= high:
                raise ValueError(f"step {step} is out of range 1-{high}")
        if body == "*":
            first, last = low, high
        elif "-" in body:
            a, _, b = body.partition("-")
            first, last = _value(a, index, low, high), _value(b, index, low, high)
            if first > last:
                raise ValueError(f"range {body!r} runs backwards")
        else:
            first = _value(body, index, low, high)
            last = high if slash else first
        out.update(range(first, last + 1, step))
    return frozenset(out)


def _value(text: str, index: int, low: int, high: int) -> int:
    names = _NAMES.get(index, {})
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit() or not text.isascii():
        known = f" or a name ({', '.join(names)})" if names else ""
        raise ValueError(f"{text!r} is not a number{known}")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{value} is out of range {low}-{high}")
    return value
