"""A job's priority: jobctl's extension key ``jobctl.run/priority@1``.

The value is a whole number in :data:`jobctl.limits.PRIORITY` (-1000 to
1000); higher runs first. A record without the key -- every record an
upstream writer makes, and every job submitted without ``--priority`` -- is
priority 0, and a priority of 0 is never written, so such a record keeps its
bytes. Runnable jobs are taken by priority, then oldest first
(:func:`pick_key`): by a worker's board, by ``claim --next`` and by the
PostgreSQL pick, whose index walks the same order.

It orders, and nothing else: it is not critical, so a reader that does not
know it keeps it as opaque extension data [JOB-D3] and runs the job in its own
order. A value no jobctl writes (a string, a fraction, a number out of range:
another writer's, or a hand edit) orders as 0, so that a job is never held
back for it; ``show`` prints the value as found.
Standard library only: ``submit`` imports this.
"""

from __future__ import annotations

from datetime import datetime

from . import limits
from .errors import Invalid
from .record import ZERO_TIME, Record

__all__ = ["PRIORITY", "priority_of", "check_priority", "set_priority", "pick_key"]

#: The extension key: a whole number, higher first.
PRIORITY = "jobctl.run/priority@1"


def priority_of(rec: Record) -> int:
    """The priority ``rec`` is picked by: its key's value when it is one jobctl writes, else 0."""
    value = rec.extensions.get(PRIORITY)
    if type(value) is int and limits.PRIORITY.holds(value):
        return value
    return 0


def check_priority(value: object, what: str = "priority", job_id: str = "") -> int:
    """``value`` when it is a whole number in :data:`jobctl.limits.PRIORITY`; else ``Invalid`` naming ``what``."""
    if type(value) is not int or not limits.PRIORITY.holds(value):
        raise Invalid(f"{what} must be a whole number ({limits.PRIORITY.text()}), not {value!r}", job_id)
    return value


def set_priority(rec: Record, value: object, what: str = "priority") -> Record:
    """Give ``rec`` the priority ``value`` (checked as :func:`check_priority`); 0 removes the key. Returns ``rec``."""
    number = check_priority(value, what, rec.id)
    if number:
        rec.extensions[PRIORITY] = number
    else:
        rec.extensions.pop(PRIORITY, None)
    return rec


def pick_key(rec: Record) -> tuple[int, datetime, str]:
    """The order runnable jobs are taken in: higher priority first, then oldest first, then by id.

    Ids minted within one millisecond sort by their random part, as the
    creation times of two jobs can be equal to the microsecond.
    """
    return (-priority_of(rec), rec.created_at or ZERO_TIME, rec.id)
