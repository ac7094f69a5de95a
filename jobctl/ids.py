"""Job ids: minting ``<ms>-<hex20>`` and refusing ids that could escape ``jobs/``."""

from __future__ import annotations

import os
import re
import time

from .errors import Invalid
from .wire import lazy_pattern

__all__ = ["mint", "check", "safe", "MAX_BYTES"]

#: The longest id, in UTF-8 bytes: ``<id>.json.<10 hex>.tmp``, the longest name made of one, stays
#: within the 255 bytes a file name may have, so an id too long is a refusal, not an I/O error.
MAX_BYTES = 200

# No leading dot, no separator, no control character, something visible.
_SAFE: re.Pattern[str] = lazy_pattern(globals(), "_SAFE", r"[^./\\\s\x00-\x1f\x7f-\x9f][^/\\\x00-\x1f\x7f-\x9f]*\Z")


def mint() -> str:
    """A fresh id: Unix milliseconds, a dash, ten random bytes as lower-case hex.

    All three upstream implementations mint this form, so the lexical order of
    ids is creation order while the millisecond field keeps 13 digits.
    """
    return f"{time.time_ns() // 1_000_000}-{os.urandom(10).hex()}"


def safe(job_id: object) -> bool:
    """True when :func:`check` takes ``job_id``."""
    try:
        check(job_id)
    except Invalid:
        return False
    return True


def check(job_id: object) -> str:
    """Return ``job_id`` if it is safe to turn into ``jobs/<id>.json``, else refuse.

    Upstream validates nothing on read; we refuse, before touching the
    filesystem, any id that is not a string, is blank, is longer than
    :data:`MAX_BYTES`, holds a separator, NUL or another control character,
    is ``.``/``..`` or starts with a dot. Every id the upstream
    implementations mint (34 characters) passes, so this cannot break interop.
    """
    if not isinstance(job_id, str):
        raise Invalid(f"job id must be a string, not {type(job_id).__name__}")
    # Letters, digits, '-' and '_' (every minted id) are safe: said without compiling _SAFE at start-up.
    if job_id.isascii() and job_id.replace("-", "").replace("_", "").isalnum() and len(job_id) <= MAX_BYTES:
        return job_id
    if _SAFE.match(job_id) and len(job_id) <= MAX_BYTES // 4:  # at most 4 bytes a character
        return job_id
    if len(job_id.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise Invalid(f"job id {job_id[:40]!r}... is longer than {MAX_BYTES} bytes")
    if _SAFE.match(job_id):
        return job_id
    if not job_id.strip():
        raise Invalid("job id is blank")
    if job_id[0] == ".":
        raise Invalid(f"job id {job_id!r} starts with a dot")
    for ch in job_id:
        if ch in "/\\" or ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:
            raise Invalid(f"job id {job_id!r} holds a separator or control character")
    return job_id
