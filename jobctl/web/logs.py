"""The end of a job's attempt log, for ``GET /api/jobs/{id}/logs``: what a frontend shows of a failure.

The logs are the runner's (:func:`jobctl.runner.log_dir`), read through its
functions, which open every directory and the file without following a link
(:mod:`jobctl.fsio`): a link planted in a shared store never sends this read
elsewhere. Only the last bytes are read, at most :data:`LOG_MAX_BYTES`, so a
gigabyte of output costs a request no more than a page of it.
"""

from __future__ import annotations

from typing import Any

from .. import runner
from ..errors import Invalid, NotFound
from ..store.base import Store

__all__ = ["LOG_DEFAULT_BYTES", "LOG_MAX_BYTES", "tail", "parse_tail_query"]

#: How much of the end of a log an answer carries when the request does not say.
LOG_DEFAULT_BYTES = 16 * 1024
#: The most an answer carries, whatever the request says.
LOG_MAX_BYTES = 256 * 1024


def parse_tail_query(query: dict[str, str]) -> tuple[int | None, int]:
    """``(attempt or None, bytes)`` from ``?attempt=N&bytes=M``; ``invalid`` naming the parameter otherwise."""
    unknown = sorted(set(query) - {"attempt", "bytes"})
    if unknown:
        raise Invalid(f"unknown parameter {unknown[0]!r} (attempt, bytes)")
    attempt = None
    if "attempt" in query:
        text = query["attempt"]
        if not text.isdigit() or not text.isascii() or not 1 <= int(text) <= 1_000_000:
            raise Invalid(f"attempt {text!r} is not a whole number 1..1000000")
        attempt = int(text)
    size_text = query.get("bytes", str(LOG_DEFAULT_BYTES))
    if not size_text.isdigit() or not size_text.isascii() or not 1 <= int(size_text) <= LOG_MAX_BYTES:
        raise Invalid(f"bytes {size_text!r} is not a whole number 1..{LOG_MAX_BYTES}")
    return attempt, int(size_text)


def tail(store: Store, job_id: str, attempt: int | None, limit: int) -> dict[str, Any]:
    """The last ``limit`` bytes of attempt ``attempt``'s log (None: the latest attempt that has one).

    ``not_found`` when the job does not exist or has no such log here (a
    database store's logs are on the host whose worker ran the attempt).
    When the log is longer, the text starts after the first line break
    within those bytes, so it begins with a whole line.
    """
    store.load(job_id)  # not_found for a job that does not exist
    attempts = [number for number, _path in runner.log_files(store, job_id)]
    chosen = attempt if attempt is not None else (attempts[-1] if attempts else None)
    size = None if chosen is None else runner.log_size(store, job_id, chosen)
    if chosen is None or size is None:
        which = f"attempt {attempt}" if attempt is not None else "any attempt"
        raise NotFound(f"job {job_id} has no log of {which} on this server", job_id)
    start = max(0, size - limit)
    data = runner.log_read(store, job_id, chosen, start) or b""
    data = data[:limit]  # what was appended since the size was read waits for the next request
    truncated = start > 0
    if truncated:
        cut = data.find(b"\n")
        if 0 <= cut < len(data) - 1:
            data = data[cut + 1 :]
    return {
        "id": job_id,
        "attempt": chosen,
        "attempts": attempts,
        "size": size,
        "truncated": truncated,
        "text": data.decode("utf-8", "replace"),
    }
