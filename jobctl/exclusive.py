"""Exclusive keys: jobctl's extension key ``jobctl.run/exclusive@1``.

A job submitted with a key (``submit --exclusive KEY``) carries it as a
string. At most one job with a key runs at a time across every worker of the
store: a claim of a job with a key takes the key under the job's own lock
(a lock file per key on a directory, a row of ``jobctl_exclusive`` on
PostgreSQL) and records itself as the key's holder, in the same step as the
claim. The key is free again once that holder has ended, released its lease
or let it lapse (:func:`holds`). Not critical: a reader that does not know
the key keeps it as opaque extension data [JOB-D3] and would run the job
without waiting for its key.
Standard library only, beside the record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from .errors import Invalid, KeyHeld
from .record import Record, held

__all__ = ["EXCLUSIVE", "KEY_MAX_BYTES", "Keys", "check_key", "exclusive_of", "set_exclusive", "holds", "key_held"]

#: The extension key: the exclusive key, a string.
EXCLUSIVE = "jobctl.run/exclusive@1"
#: The longest key, in bytes of its UTF-8 text.
KEY_MAX_BYTES = 200


class Keys(Protocol):
    """What a claim of a job with a key asks of its store, under the job's lock (``contract.claiming``)."""

    def take(self, key: str, rec: Record, now: datetime) -> None:
        """Make ``rec`` (its lease just taken) the holder of ``key``; ``KeyHeld`` when a live job holds it."""
        ...


def check_key(key: Any, what: str = "exclusive key") -> str:
    """``key`` if it can stand as an exclusive key: text, not blank, at most 200 bytes, no control character."""
    if not isinstance(key, str):
        raise Invalid(f"{what} must be text, not {type(key).__name__}")
    if not key.strip():
        raise Invalid(f"{what} is blank")
    if any(not ch.isprintable() for ch in key):
        raise Invalid(f"{what} {key!r} holds a character that is not printable (a newline or control character)")
    size = len(key.encode("utf-8", "surrogatepass"))
    if size > KEY_MAX_BYTES:
        raise Invalid(f"{what} is {size} bytes long; at most {KEY_MAX_BYTES}")
    return key


def exclusive_of(rec: Record) -> str | None:
    """The exclusive key ``rec`` carries, or None (none, or not a string: another writer's odd value)."""
    value = rec.extensions.get(EXCLUSIVE)
    return value if isinstance(value, str) and value else None


def set_exclusive(rec: Record, key: str, what: str = "exclusive key") -> Record:
    """Give ``rec`` the exclusive key ``key`` (checked as :func:`check_key` does); returns ``rec``."""
    rec.extensions[EXCLUSIVE] = check_key(key, what)
    return rec


def holds(holder: Record, key: str, now: datetime) -> bool:
    """Whether ``holder``, the job a key's holder names, still holds ``key`` at ``now``.

    It does while it carries the key, has not ended, and its lease is held
    (not released, not lapsed): a worker that died frees the key when its
    lease lapses, as it frees the job.
    """
    return exclusive_of(holder) == key and not holder.terminal and held(holder.lease, now)


def key_held(job_id: str, key: str, holder: Record) -> KeyHeld:
    """The refusal of a claim of ``job_id``: ``holder`` holds its key ``key``."""
    return KeyHeld(
        f"job {job_id}: its exclusive key {key!r} is held by job {holder.id} (running, epoch {holder.lease.epoch})",
        job_id,
        key,
        holder.id,
    )
