"""Instants as a record spells them [JOB-E5]: read leniently, written one way, and as microseconds."""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from .. import wire
from ..errors import Invalid

UTC = timezone.utc
#: The unset instant jobctl writes (a never-claimed lease's ``expires_at``): the
#: Unix epoch, as upstream's Python and C++ writers spell it. Go writes year one
#: instead, which the C++ reader refuses (DIGEST §10.4); a year-one value read
#: from disk is kept as read, but jobctl never creates one.
ZERO_TIME = datetime(1970, 1, 1, tzinfo=UTC)
#: Go's spelling of the unset instant; read, never written by jobctl.
GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


_RFC3339: re.Pattern[str] = wire.lazy_pattern(
    globals(),
    "_RFC3339",
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})"
    r"(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})\Z",
)


def parse_time(text: Any, what: str) -> datetime | None:
    """Read an RFC 3339 instant leniently; ``""``/``null`` mean unset (None)."""
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise Invalid(f"{what} is not a timestamp")
    if len(text) == 27 and text[26] == "Z" and text[10] == "T" and text[19] == ".":
        try:
            return datetime.fromisoformat(text[:26] + "+00:00")
        except ValueError:
            pass
    m = _RFC3339.match(text)
    if m is None:
        raise Invalid(f"{what} {text!r} is not an RFC 3339 timestamp")
    year, month, day, hour, minute, second, frac, zone = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    try:
        when = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=UTC)
        if zone not in ("Z", "z"):
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:  # RFC 3339's time-numoffset: 00-23 hours, 00-59 minutes
                raise ValueError(zone)
            sign = 1 if zone[0] == "+" else -1
            when -= sign * timedelta(hours=hours, minutes=minutes)
    except (ValueError, OverflowError):
        raise Invalid(f"{what} {text!r} is not a valid instant") from None
    return when


def is_zero(when: datetime | None) -> bool:
    """Whether ``when`` is an unset instant in any writer's spelling (absent, 1970 or year one)."""
    return when is None or when in (ZERO_TIME, GO_ZERO_TIME)


@lru_cache(maxsize=1024)
def format_time(when: datetime | None) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC, six digits always; None is :data:`ZERO_TIME` (1970)."""
    if when is None:
        when = ZERO_TIME
    if when.tzinfo is None:
        raise Invalid("timestamps must be timezone-aware")
    if when.utcoffset():
        when = when.astimezone(UTC)
    return (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}T"
        f"{when.hour:02d}:{when.minute:02d}:{when.second:02d}.{when.microsecond:06d}Z"
    )


_fromiso = datetime.fromisoformat


#: From 3.11 ``fromisoformat`` reads the ``Z`` itself; before, it must be spelt as an offset.
_Z = "Z" if sys.version_info >= (3, 11) else "+00:00"


def _offset_iso(value: str) -> datetime:
    return _fromiso(value[:26] + "+00:00")


def _time(value: Any, what: str) -> datetime | None:
    """:func:`parse_time`, its common case (every conforming writer's spelling) inlined."""
    if type(value) is str and len(value) == 27 and value[26] == "Z" and value[10] == "T" and value[19] == ".":
        # The same instant parse_time reads from value[:26] + "+00:00"; a ValueError sends
        # the record to _decode, which says why.
        return _fromiso(value if _Z == "Z" else value[:26] + _Z)
    return parse_time(value, what)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def micros(when: datetime | None) -> int:
    """``when`` in whole microseconds since 1970 UTC; 0 for None. Orders exactly as the datetimes do."""
    return 0 if when is None else (when - _EPOCH) // _MICROSECOND


def moment(us: int) -> datetime:
    """The inverse of :func:`micros`."""
    return _EPOCH + us * _MICROSECOND
