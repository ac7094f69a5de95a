"""A job's result: the JSON value a finished run leaves for whoever asked.

A result is stored in the record itself, under the extension key
``jobctl.run/result@1``, in the same fenced write that completes the job, so
a job is never complete without its result nor carries a result from a run
that did not complete it. Other implementations keep the key as opaque
extension data [JOB-D3]; nothing in the contract depends on it.

Python processors return it (``Result.data``); shell commands write it as
JSON to the file named by ``$JOB_RESULT``.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import Invalid, NoResult
from .record import RESULT, TERMINAL, Record

__all__ = ["RESULT", "RESULT_MAX_BYTES", "has_result", "result_of", "set_result", "parse_result", "require"]

#: The largest result, as compact JSON, a record will carry. A record is read
#: whole by every reader; bulk output belongs in a file the result names.
RESULT_MAX_BYTES = 1 << 20


def has_result(rec: Record) -> bool:
    """Whether the record carries a result (``null`` is a result)."""
    return RESULT in rec.extensions


def result_of(rec: Record) -> Any:
    """The stored result, or None when there is none (see :func:`has_result`)."""
    return rec.extensions.get(RESULT)


def require(rec: Record) -> str:
    """The stored result as compact JSON text, spelling kept; :class:`NoResult` when there is none.

    The refusal says why there is none: a job that has not ended has no
    result *yet* (one is written only by the write that completes it); one
    that ended failed or cancelled, or completed without leaving one, never will.
    """
    text = rec.opaque_text("x:" + RESULT)
    if text is not None:
        return text
    if rec.state not in TERMINAL:
        raise _none(
            rec, f"has no result yet: it is {rec.state}", f"wait for it to end (jobctl wait {rec.id}), then ask again"
        )
    if rec.state == "complete":
        raise _none(
            rec,
            "is complete and left no result",
            "its command wrote nothing to $JOB_RESULT (or its processor returned none)",
        )
    why = f": {rec.error}" if rec.error else ""
    raise _none(
        rec,
        f"ended {rec.state} and left no result{why}",
        f"only a job that completes leaves one; jobctl logs {rec.id} shows its last attempt",
    )


def _none(rec: Record, what: str, hint: str) -> NoResult:
    exc = NoResult(f"job {rec.id} {what}", rec.id)
    exc.hint = hint
    return exc


def _check(value: Any, job_id: str) -> None:
    """Refuse what the record's write would refuse, so that write never is the one to (it completes the job)."""
    from . import wire

    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except RecursionError:  # nested past the interpreter's limit
        raise Invalid(f"result is not JSON: nesting deeper than {wire.MAX_DEPTH}", job_id) from None
    except UnicodeEncodeError:
        raise Invalid("result is not JSON: a string holds a lone surrogate (it is not UTF-8)", job_id) from None
    except (TypeError, ValueError) as exc:
        raise Invalid(f"result is not JSON: {exc}", job_id) from None
    if size > RESULT_MAX_BYTES:
        raise Invalid(f"result is larger than {RESULT_MAX_BYTES} bytes", job_id)
    try:
        wire.check_text(text, 2)  # as the record's write checks it: record -> extensions -> the result
    except Invalid as exc:
        raise Invalid(f"result is not JSON: {exc.message}", job_id) from None


def set_result(rec: Record, value: Any) -> None:
    """Put ``value`` in the record as its result; refuses what JSON cannot carry."""
    _check(value, rec.id)
    rec.extensions[RESULT] = value


def parse_result(data: bytes, job_id: str = "") -> Any:
    """Decode a result written as JSON text (what a shell job leaves in ``$JOB_RESULT``)."""
    if len(data) > RESULT_MAX_BYTES:
        raise Invalid(f"result is larger than {RESULT_MAX_BYTES} bytes", job_id)
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise Invalid(f"result is not JSON: {exc}", job_id) from None
    _check(value, job_id)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
