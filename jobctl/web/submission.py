"""A ``POST /api/jobs`` body made into a record to submit, checked as ``jobctl submit`` checks its options.

The body is a JSON object; its fields are the options of ``jobctl submit``
(docs/reference/http.md). Every check is the library's own: the id
(:func:`jobctl.ids.check`), a ``shell`` spec (:func:`jobctl.shell.parse`),
the scheduling choices (:func:`jobctl.schedule.plan`), the ranges of
:mod:`jobctl.limits`. Anything else is refused ``invalid`` naming the field.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from .. import ids, limits
from ..errors import Invalid
from ..record import Progress, Record, parse_time
from ..submitter import set_submitter
from ..wire import Raw

__all__ = ["FIELDS", "IDEMPOTENCY_KEY_MAX", "record_from", "idempotent_id"]

#: The fields a submission may carry; any other is refused (a misspelt option must not be ignored).
FIELDS = (
    "kind",
    "spec",
    "total",
    "requires",
    "id",
    "hold",
    "retries",
    "retry_intervals",
    "no_retry_on",
    "after",
    "pipeline",
    "stage",
    "not_before",
    "by",
    "priority",
    "timeout",
    "exclusive",
)
#: The longest ``Idempotency-Key`` header taken.
IDEMPOTENCY_KEY_MAX = 200


def idempotent_id(key: str) -> str:
    """The job id an ``Idempotency-Key`` stands for: the same key, the same job, in every server process."""
    if not key or len(key) > IDEMPOTENCY_KEY_MAX or not key.isascii() or not key.isprintable():
        raise Invalid(f"Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX} printable ASCII characters")
    return "http-" + hashlib.sha256(key.encode("ascii")).hexdigest()[:40]


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{name} must be a non-empty string")
    return value


def _whole(body: dict[str, Any], name: str, bounds: limits.Range) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not bounds.holds(value):
        raise Invalid(f"{name} must be a whole number ({bounds.text()}), not {json.dumps(value)}")
    return value


def _strings(body: dict[str, Any], name: str) -> list[str]:
    value = body.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise Invalid(f"{name} must be a list of non-empty strings")
    return value


def _start_after(value: Any, now: datetime) -> datetime | None:
    """``not_before``: an RFC 3339 instant, or a delay in seconds from now (as ``submit --not-before``)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        limits.NOT_BEFORE_DELAY.check(value, "not_before delay (seconds)")
        return limits.later(now, value, "not_before delay")
    if not isinstance(value, str):
        raise Invalid("not_before must be an RFC 3339 time or a number of seconds")
    return parse_time(value, "not_before")


def record_from(body: Any, now: datetime, by: str, *, allow_shell: bool = False) -> Record:
    """The record a submission asks for, not yet in the store; ``invalid`` naming the field otherwise.

    A ``shell`` job runs a command as the worker's user, so it is refused
    unless ``allow_shell`` (``jobctl serve --allow-shell``): whoever may reach
    the API could otherwise run anything there.
    """
    from ..schedule import check_label
    from ..shell import SHELL, check_kind

    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
    kind = body.get("kind")
    if kind is None:
        raise Invalid("kind is required")
    if not isinstance(kind, str):
        raise Invalid("kind must be a string")
    check_kind(kind)  # the rule `jobctl submit --kind` applies
    if kind == SHELL and not allow_shell:
        raise Invalid(f"kind {SHELL} is not taken over HTTP here (jobctl serve --allow-shell)")
    job_id = _text(body, "id")
    if job_id is not None:
        ids.check(job_id)
    spec = body.get("spec", {})
    total = _whole(body, "total", limits.TOTAL) or 0
    rec = Record(
        id=job_id or "", kind=kind, spec=Raw(json.dumps(spec, ensure_ascii=False)), progress=Progress(total=total)
    )
    if kind == SHELL:
        from ..shell import parse

        parse(rec.spec, job_id or "")
    rec.requires = [check_label(name, "requires") for name in _strings(body, "requires")]
    hold = body.get("hold", False)
    if not isinstance(hold, bool):
        raise Invalid("hold must be true or false")
    intervals = body.get("retry_intervals")
    if intervals is not None:
        from ..schedule import parse_intervals

        if not isinstance(intervals, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in intervals
        ):
            raise Invalid("retry_intervals must be a list of seconds")
        intervals = parse_intervals(",".join(repr(v) for v in intervals), "retry_intervals") if intervals else []
    codes = body.get("no_retry_on", [])
    if not isinstance(codes, list):
        raise Invalid("no_retry_on must be a list of exit codes")
    pipeline, stage = _text(body, "pipeline"), _text(body, "stage")
    from ..schedule import plan  # refuses a stage without a pipeline

    who = _text(body, "by") or by
    rec = plan(
        rec,
        retries=_whole(body, "retries", limits.RETRIES),
        intervals=intervals,
        no_retry_on=codes,
        after=_strings(body, "after"),
        pipeline=pipeline,
        stage=stage,
        start_after=_start_after(body.get("not_before"), now),
        hold=hold,
        by=who,
    )
    set_submitter(rec, who)  # as `jobctl submit --by`: the submitter, and the hold's name
    _priority_and_timeout(rec, body)
    exclusive = body.get("exclusive")
    if exclusive is not None:  # as `jobctl submit --exclusive KEY`
        from ..exclusive import set_exclusive

        set_exclusive(rec, exclusive, "exclusive")
    return rec


def _priority_and_timeout(rec: Record, body: dict[str, Any]) -> None:
    """``priority`` (a whole number) and ``timeout`` (seconds, or a duration: ``"15m"``), as ``submit`` takes them."""
    from ..priority import set_priority
    from ..timeout import set_timeout

    priority = body.get("priority")
    if priority is not None:
        set_priority(rec, priority)
    timeout = body.get("timeout")
    if isinstance(timeout, str):
        timeout = limits.duration(timeout, "timeout", limits.JOB_TIMEOUT)
    if timeout is not None:
        set_timeout(rec, timeout)
