"""A finished record's summary fields, read straight from its canonical text (:mod:`jobctl.summary`)."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import wire
from .decoder import decode
from .model import _CANONICAL_START, _UNTIL_CANONICAL, Record
from .roster import TERMINAL
from .times import micros

if TYPE_CHECKING:
    from .canonical import _Parts

_CANONICAL_START_BYTES = _CANONICAL_START.encode()


def _canonical_parts(text: str) -> _Parts | None:
    """The first look at a canonical text: load :mod:`.canonical`, put its reader in this name's place, use it.

    Read only once the canonical path is taken (``_UNTIL_CANONICAL``); a
    command that decodes nothing (a piped ``submit``) does not load it.
    """
    from .canonical import _canonical_parts as parts

    globals()["_canonical_parts"] = parts
    return parts(text)


def _ended_fields(text: str, job_id: str) -> tuple[Any, ...] | None:
    """:func:`_canonical_parts`'s twin for a finished record's fields (:func:`.canonical._ended_fields`)."""
    from .canonical import _ended_fields as fields

    globals()["_ended_fields"] = fields
    return fields(text, job_id)


def summary_or_record(data: bytes | str, job_id: str = "", fields: bool = True) -> tuple[Any, ...] | str | Record:
    """:func:`decode`, or for a finished record in the canonical layout without a checkpoint, its summary's fields.

    The fields are what ``jobctl.store.file.summary_fields`` makes of the
    decoded record (:func:`summary_tuple`, its checkpoint text None); without
    ``fields``, only its state (a scan that lists no finished record needs no
    more). The record is checked exactly as :func:`decode` checks it and
    refused with the same error (``job_id``, when given, is the name it was
    read under: ``named``); only the objects a finished record's line never
    shows are not built. A shared cold scan reads tens of thousands of these
    (:mod:`jobctl.fanout`).
    """
    text: str | None = None
    if _UNTIL_CANONICAL[0] == 0:
        try:
            parts = None
            if isinstance(data, str):
                text = data
            elif data.startswith(_CANONICAL_START_BYTES):  # no byte order mark: the bytes' text as it is
                text = data.decode("utf-8")
            else:
                text = wire.utf8_text(data, "record")
            if text.startswith(_CANONICAL_START):
                # A finished record's fields by the shorter way when it applies (its head met before),
                # else its parts, whose reader the shorter way takes its word from.
                got = _ended_fields(text, job_id) if job_id else None
                if got is not None:
                    return got if fields else got[2]
                parts = _canonical_parts(text)
        except Exception:  # decode says why, in its words
            parts = None
        # A record naming another id than it was read under goes to decode, which refuses it.
        if (
            parts is not None
            and (not job_id or parts.id == job_id)
            and parts.state in TERMINAL
            and parts.checkpoint is None
        ):
            if not fields:
                return parts.state
            # job_id, when given, is parts.id: the one string, carried once by marshal and held once.
            return summary_tuple(
                job_id or parts.id, parts.kind, parts.state, parts.done, parts.total, parts.owner, parts.epoch,
                parts.error or "", None, parts.created, parts.expires,
            )  # fmt: skip
    return decode(data if text is None else text, job_id, named=bool(job_id))


def summary_tuple(
    job_id: str,
    kind: str,
    state: str,
    done: int,
    total: int,
    owner: str,
    epoch: int,
    error: str,
    checkpoint_text: str | None,
    created: datetime | None,
    expires: datetime | None,
) -> tuple[Any, ...]:
    """A finished record's summary fields in ``jobctl.summary.Summary``'s order, as the cache keeps them.

    The instants in microseconds since 1970 (:func:`micros`); kind, state,
    owner and error interned: they repeat across a store, one copy each when
    held, and marshal writes and loads each once.
    """
    intern = sys.intern
    return (
        job_id, intern(kind), intern(state), done, total, intern(owner), epoch, intern(error),
        checkpoint_text, micros(created), micros(expires),
    )  # fmt: skip
