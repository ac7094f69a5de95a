"""How long one attempt of a job may run: jobctl's extension key ``jobctl.run/timeout@1``.

The value is a number of seconds in :data:`jobctl.limits.JOB_TIMEOUT` (more
than 0, at most a year). An attempt that runs longer is stopped by the
:class:`jobctl.keeper.Keeper` that keeps its lease, as a cancel stops it --
a command's process group gets SIGTERM, then SIGKILL after the grace; a
Python processor is asked to stop -- and counts as a failed attempt whose
error says so (``attempt 1: timed out after 1m30s``), retried as its retry
policy (``jobctl.run/retry@1``) says. The clock starts when the attempt's
work starts and counts each attempt afresh.

It is not critical: a reader that does not know it keeps it as opaque
extension data [JOB-D3] and runs the job without a limit. A value no jobctl
writes (not a number, or out of range) sets no limit.
Standard library only: ``submit`` imports this.
"""

from __future__ import annotations

from . import limits
from .errors import Invalid
from .record import Record

__all__ = ["TIMEOUT", "timeout_of", "check_timeout", "set_timeout", "timed_out"]

#: The extension key: seconds, a number.
TIMEOUT = "jobctl.run/timeout@1"


def timeout_of(rec: Record) -> float | None:
    """The seconds an attempt of ``rec`` may run, or None: no limit (no key, or a value no jobctl writes)."""
    value = rec.extensions.get(TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not limits.JOB_TIMEOUT.holds(value):
        return None
    return value


def check_timeout(value: object, what: str = "timeout", job_id: str = "") -> float:
    """``value`` when it is a number of seconds in :data:`jobctl.limits.JOB_TIMEOUT`, else ``Invalid`` naming ``what``.

    A whole number of seconds is kept as an integer: ``90``, not ``90.0``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not limits.JOB_TIMEOUT.holds(value):
        raise Invalid(f"{what} must be a number of seconds ({limits.JOB_TIMEOUT.text()}), not {value!r}", job_id)
    return int(value) if float(value).is_integer() else value


def set_timeout(rec: Record, seconds: object, what: str = "timeout") -> Record:
    """Limit each attempt of ``rec`` to ``seconds`` (checked as :func:`check_timeout`); returns ``rec``."""
    rec.extensions[TIMEOUT] = check_timeout(seconds, what, rec.id)
    return rec


def timed_out(seconds: float) -> str:
    """The error of an attempt stopped for running too long: ``timed out after 1m30s``."""
    return f"timed out after {limits.duration_text(seconds)}"
