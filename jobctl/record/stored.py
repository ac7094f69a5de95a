"""A record from the values a store keeps in columns (the PostgreSQL store's rows), checked as a decode checks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import wire
from ..errors import Invalid, UnknownSchema
from . import roster
from .checks import _INT64, canonical_ranges, check_envelope
from .encoder import _check_numbers, derive
from .model import Delegation, Envelope, Intent, Lease, Progress, Record
from .roster import STATES, TERMINAL, WANTS

_new_record = object.__new__


def restore(
    parts: tuple[str, str, str, Envelope | None, str, str | None, Progress, Lease, Delegation | None],
    requires: list[str],
    error: str,
    intent: Intent | None,
    extensions: dict[str, str],
    times: tuple[datetime, datetime],
    models: tuple[list[str], list[str]],
) -> Record:
    """The record :func:`decode` would read from the bytes a store renders of these values.

    ``parts`` are the id, kind, state, envelope, the compact texts of spec and
    checkpoint, progress, lease and delegation; ``extensions`` maps each key
    to its value's compact text; ``times`` are created_at and updated_at;
    ``models`` the content and critical lists as last written or read, from
    which the lists are derived afresh [JOB-D2]. Checked as a decode checks
    what it reads, with its refusals (``Invalid``, ``UnknownSchema``): the
    PostgreSQL store keeps a record as these values, and anybody with a
    ``psql`` may have changed them.
    """
    job_id, kind, state, envelope, spec, checkpoint, progress, lease, delegation = parts
    rec: Record = _new_record(Record)
    rec.id, rec.kind, rec.state, rec.envelope, rec.intent = job_id, kind, state, envelope, intent
    rec.progress, rec.lease, rec.delegation = progress, lease, delegation
    rec.requires, rec.error, rec._error_present = requires, error, False
    rec.created_at, rec.updated_at = times
    rec._text, rec._exposed = None, True
    # The lists first, as decode judges them first [JOB-D10]: derived from the fields they describe.
    ranged = checkpoint is not None and canonical_ranges(checkpoint) is not None
    rec.content, rec.critical = _restored_models(rec, extensions, models, ranged)
    if not job_id.strip():
        raise Invalid("id is blank")
    if not kind.strip():
        raise Invalid("kind is blank")
    if state not in STATES:
        raise Invalid(f"state {state!r} is not a state")
    if intent is not None and intent.want not in WANTS:
        raise Invalid(f"intent.want {intent.want!r} is not run, pause or cancel")
    if envelope is not None:
        check_envelope(envelope)
    rec.spec = spec_value = _stored_value(spec, 1)
    if spec_value is None:
        raise Invalid("spec is missing or null")
    rec._raw = raw = {"spec": spec}
    rec._orig = orig = {"spec": spec_value, "checkpoint": None}
    rec.checkpoint = None
    if checkpoint is not None:
        rec.checkpoint = orig["checkpoint"] = _stored_value(checkpoint, 1)
        raw["checkpoint"] = checkpoint
    done, total, epoch = progress.done, progress.total, lease.epoch
    if (
        progress.step is not None
        or lease.recall is not None
        or delegation is not None
        or type(done) is not int
        or type(total) is not int
        or type(epoch) is not int
        or min(done, total, epoch) < 0
        or max(done, total, epoch) > _INT64
    ):
        _check_numbers(rec)  # says which
    rec.extensions = exts = {}
    for key, text in extensions.items():
        if not key.strip():
            raise Invalid("an extension key is blank")
        exts[key] = orig["x:" + key] = _stored_value(text, 2)
        raw["x:" + key] = text
    return rec


#: What :func:`derive` made of each combination of stored lists and fields :func:`restore` met: a store
#: holds few (the same models on most rows), and each stays right as this process understands more.
_DERIVED: dict[tuple[Any, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _restored_models(
    rec: Record, extensions: dict[str, str], models: tuple[list[str], list[str]], ranged: bool
) -> tuple[list[str], list[str]]:
    """:func:`derive`'s lists for a restored record, refusing a critical model this reader does not know."""
    stored_content, stored_critical = models
    key = (
        tuple(stored_content),
        tuple(stored_critical),
        tuple(extensions),
        rec.intent is not None,
        rec.delegation is not None,
        rec.envelope is not None,
        rec.progress.step is not None,
        rec.state in TERMINAL,
        rec.lease.recall is not None,
        ranged,
    )
    got = _DERIVED.get(key)
    if got is None:
        rec.extensions = dict.fromkeys(extensions)
        rec.content, rec.critical = stored_content, stored_critical
        content, critical = derive(rec, ranged)
        for name in critical:
            if name not in roster._UNDERSTOOD:
                raise UnknownSchema(f"critical model {name} is unknown to this reader")
        got = (tuple(content), tuple(critical))
        if len(_DERIVED) < 512:
            _DERIVED[key] = got
    return list(got[0]), list(got[1])


_scan_value = wire._scan


def _stored_value(text: str, base_depth: int) -> Any:
    """:func:`jobctl.wire.parse_value` of a compact text a store kept, its common case in one scan.

    A text with whitespace around it, an escape that could be a lone
    surrogate, or enough brackets to come near the depth limit goes the
    careful way, which also words every refusal.
    """
    if "\\u" not in text and text.count("{") + text.count("[") + base_depth < wire.MAX_DEPTH:
        try:
            value, end = _scan_value(text, 0)
        except Exception:  # the careful way says what is wrong, in its words
            return wire.parse_value(text, base_depth)
        if end == len(text):
            return value
    return wire.parse_value(text, base_depth)
