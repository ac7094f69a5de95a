"""The range of every number jobctl takes, and the checks that keep a lease within them.

One table, so that a flag, its environment variable, its config key and the
library call behind it all accept the same numbers. A number outside its
range is refused before anything is read or written: on the command line as
a usage error (exit 2), in the library and in settings read from the
environment or the config file as ``Invalid`` (exit 9).

Why these bounds:

* counts that land in a record (``epoch``, ``done``, ``total``) stop at
  2**63-1, the largest integer every upstream reader holds (Go's ``int64``);
* a lease never outlives ``max_ttl`` (default one day, at most a year): a
  lease planted further ahead would keep a job ``running`` with nobody
  working on it, so ``list``, ``show`` and ``doctor`` flag one
  (:func:`lease_too_long`) and ``claim``/``renew`` refuse to grant one;
* other durations stop at a year (waits, recalls, retry intervals) or a day
  (grace periods), far beyond any use and far inside what a ``datetime``
  holds (year 9999), so no sum of "now" and a duration can overflow.

Leaf module: the standard library only (the CLI imports it on every start).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from .errors import Invalid

__all__ = [
    "Range",
    "INT64_MAX",
    "YEAR",
    "DAY",
    "DEFAULT_MAX_TTL",
    "LEASE_SLACK",
    "TTL",
    "RUN_TTL",
    "MAX_TTL",
    "GRACE",
    "SHUTDOWN_GRACE",
    "RECALL_GRACE",
    "POLL_INTERVAL",
    "TIMEOUT",
    "QUIET_AFTER",
    "CONCURRENCY",
    "EPOCH",
    "DONE",
    "TOTAL",
    "RETRIES",
    "RETRY_INTERVAL",
    "RETRY_INTERVALS_MAX",
    "NOT_BEFORE_DELAY",
    "OLDER_THAN",
    "ATTEMPT",
    "PRIORITY",
    "JOB_TIMEOUT",
    "later",
    "duration",
    "duration_text",
    "lease_too_long",
]

INT64_MAX = 2**63 - 1
DAY = 86_400.0
YEAR = 365 * DAY
#: The longest lease jobctl grants unless told otherwise (setting ``max_ttl``).
DEFAULT_MAX_TTL = DAY

#: Seconds a write that will not wait (a claim from a pick: ``claim --next``, a worker's slot) waits
#: for a record's lock, or its row lock: a write holds it for milliseconds (its fsyncs), a writer
#: stopped in the middle of one for as long as it stays stopped.
LOCK_PATIENCE = 2.0
#: How far past ``max_ttl`` a lease may reach before it is flagged: clocks of
#: two hosts sharing a store may disagree by this much.
LEASE_SLACK = 60.0


class Range:
    """``low <= value <= high`` (``low < value`` when ``open_low``); ``whole`` for integers only.

    Written out rather than a dataclass: ``dataclasses`` imports ``inspect``,
    about 15 ms on every command's start-up, for a class of five fields.
    """

    __slots__ = ("name", "low", "high", "open_low", "whole")

    def __init__(self, name: str, low: float, high: float, open_low: bool = False, whole: bool = False) -> None:
        self.name = name
        self.low = low
        self.high = high
        self.open_low = open_low
        self.whole = whole

    def __repr__(self) -> str:
        return f"Range({self.name!r}, {self.low!r}, {self.high!r}, open_low={self.open_low}, whole={self.whole})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Range):
            return NotImplemented
        return (self.name, self.low, self.high, self.open_low, self.whole) == (
            other.name,
            other.low,
            other.high,
            other.open_low,
            other.whole,
        )

    def __hash__(self) -> int:
        return hash((self.name, self.low, self.high, self.open_low, self.whole))

    def text(self) -> str:
        """The range as the help text and the refusal say it: ``0 < SECONDS <= 31536000``."""
        return f"{_number(self.low)} {'<' if self.open_low else '<='} {self.name} <= {_number(self.high)}"

    def holds(self, value: float) -> bool:

        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.whole and not (isinstance(value, int) or float(value).is_integer()):
            return False
        if self.open_low:
            return self.low < value <= self.high
        return self.low <= value <= self.high

    def check(self, value: float, what: str, job_id: str = "") -> float:
        """``value`` when it is in range; else ``Invalid`` naming ``what`` and the range."""
        if not self.holds(value):
            raise Invalid(f"{what} {value!r} is out of range ({self.text()})", job_id)
        return value


def _number(value: float) -> str:
    """``31536000``, ``9223372036854775807``, ``0.5``: exact, never in exponent form."""
    if isinstance(value, int):
        return str(value)
    return str(int(value)) if value.is_integer() else repr(value)


#: A lease a holder asks for by hand (claim, renew): 0 is a lease that lapses at once.
TTL = Range("ttl", 0, YEAR)
#: The lease of a job jobctl runs (run, worker): renewed every third, so never 0.
RUN_TTL = Range("ttl", 0, YEAR, open_low=True)
MAX_TTL = Range("max_ttl", 60, YEAR)
GRACE = Range("grace", 0, DAY)
SHUTDOWN_GRACE = Range("shutdown_grace", 0, DAY)
RECALL_GRACE = Range("grace", 0, YEAR)
POLL_INTERVAL = Range("poll_interval", 0, 3600, open_low=True)
TIMEOUT = Range("timeout", 0, YEAR)
QUIET_AFTER = Range("quiet_after", 0, YEAR)
CONCURRENCY = Range("concurrency", 1, 1024, whole=True)
EPOCH = Range("epoch", 0, INT64_MAX, whole=True)
DONE = Range("done", 0, INT64_MAX, whole=True)
TOTAL = Range("total", 0, INT64_MAX, whole=True)
RETRIES = Range("retries", 0, 1000, whole=True)
RETRY_INTERVAL = Range("interval", 0, YEAR)
#: The most intervals (= retries) a retry schedule may list.
RETRY_INTERVALS_MAX = 1000
NOT_BEFORE_DELAY = Range("delay", 0, 10 * YEAR)
#: ``gc --older-than``: as far back as a ``--not-before`` delay reaches ahead.
OLDER_THAN = Range("older_than", 0, 10 * YEAR)
ATTEMPT = Range("attempt", 1, INT64_MAX, whole=True)
#: A job's priority (``submit --priority``, :mod:`jobctl.priority`): higher runs first, 0 when not given.
PRIORITY = Range("priority", -1000, 1000, whole=True)
#: How long one attempt of a job may run (``submit --timeout``, :mod:`jobctl.timeout`): never 0, at most a year.
JOB_TIMEOUT = Range("timeout", 0, YEAR, open_low=True)


_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str, what: str, bounds: Range) -> float:
    """Seconds in ``bounds`` from ``90``, ``90s``, ``15m``, ``2h``, ``7d`` (``1.5h`` too); ``Invalid`` naming ``what``.

    The range is checked on the number, before any time is made of it:
    ``99999999999999999999d`` is a refusal, never ``OverflowError``.
    """
    import re

    match = re.match(r"(\d+(?:\.\d+)?)([smhd]?)\Z", text.strip())
    if match is None:
        raise Invalid(f"{what}: {text!r} is not a duration (90s, 15m, 2h, 7d)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not bounds.holds(seconds):
        days = bounds.high / DAY
        raise Invalid(f"{what}: {text!r} is out of range ({bounds.text()} seconds: at most {days:g}d)")
    return int(seconds) if seconds.is_integer() else seconds


def duration_text(seconds: float) -> str:
    """A span as people write it: ``1m30s``, ``2h``, ``1d2h``, ``45s``, ``0.5s`` (whole seconds past a minute)."""
    if seconds < 60:
        return f"{seconds:g}s"
    left = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts)


def later(now: datetime, seconds: float, what: str, job_id: str = "") -> datetime:
    """``now + seconds``, or ``Invalid`` when that is not a time a record can hold (past year 9999).

    The store's guard behind every range: a library caller that passes a
    huge number gets a verdict, never ``OverflowError``.
    """
    try:
        return now + timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        raise Invalid(f"{what} {seconds!r} s from now is past the last time a record can hold", job_id) from None


def lease_too_long(expires_at: datetime | None, now: datetime, max_ttl: float) -> bool:
    """Whether a lease runs further ahead than any jobctl would grant: ``max_ttl`` (+ clock slack) from now.

    Such a lease was planted by hand or by a writer that ignores ``max_ttl``;
    nobody renews it, and the job stays ``running`` until it lapses.
    ``jobctl recall`` ends it (docs/howto/recovery.md).
    """
    if expires_at is None:
        return False
    return (expires_at - now).total_seconds() > max_ttl + LEASE_SLACK
