"""What a record's values must be: the checks :mod:`.decoder` and :mod:`.encoder` share.

The field readers of a decoded JSON object, the members each sub-object may
hold, the step/recall/delegation rules, the envelope grammar [JOB-V1]..[JOB-V6]
and the canonical form of a checkpoint's verified ranges [JOB-C1]..[JOB-C5].
"""

from __future__ import annotations

import re
from typing import Any

from .. import wire
from ..errors import Invalid
from .model import Delegation, Envelope, Recall, Record, Step

#: The largest number a record holds: a signed 64-bit integer.
_INT64 = (1 << 63) - 1


def _str(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Invalid(f"{what} is not a string")
    return value


def _int(value: Any, what: str) -> int:
    if value is None:
        return 0
    if type(value) is not int:
        raise Invalid(f"{what} is not an integer")
    if value < 0:
        raise Invalid(f"{what} is negative")
    if value > _INT64:
        raise Invalid(f"{what} does not fit in 64 bits")
    return value


def _obj(value: Any, what: str, allowed: frozenset[str]) -> dict[str, Any] | None:
    if value is None:
        return None
    if type(value) is not dict:
        raise Invalid(f"{what} is not an object")
    if not allowed.issuperset(value):
        unknown = next(key for key in value if key not in allowed)
        raise Invalid(f"unknown field {what}.{unknown}")
    return value


_ONLY_STR = {str}


def _names(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if type(value) is not list or (value and set(map(type, value)) != _ONLY_STR):
        raise Invalid(f"{what} is not an array of strings")
    return value


_PROGRESS_KEYS = frozenset(("done", "total", "updated_at", "step"))
_STEP_KEYS = frozenset(("name", "ordinal", "of", "done", "total"))
_LEASE_KEYS = frozenset(("owner", "epoch", "expires_at", "recall"))
_RECALL_KEYS = frozenset(("reason", "by", "at", "until"))
_DELEGATION_KEYS = frozenset(("system", "external_id", "delivered"))
_INTENT_KEYS = frozenset(("want", "by", "at"))
_ENVELOPE_KEYS = frozenset(("schema", "actions"))


def _check_step(step: Step) -> None:
    if not step.name.strip():
        raise Invalid("progress.step.name is blank")
    if step.ordinal < 1:
        raise Invalid("progress.step.ordinal is below 1")
    if step.of and step.ordinal > step.of:
        raise Invalid("progress.step.ordinal is past progress.step.of")


def _check_recall(recall: Recall) -> None:
    if not recall.reason.strip():
        raise Invalid("lease.recall.reason is blank")
    if recall.until is None:
        raise Invalid("lease.recall.until is not set")


def _check_delegation(delegation: Delegation) -> None:
    if not delegation.system.strip() or not delegation.external_id.strip():
        raise Invalid("delegation needs both system and external_id")


_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_SCHEMA: re.Pattern[str] = wire.lazy_pattern(
    globals(), "_SCHEMA", rf"({_LABEL}(?:\.{_LABEL})*)/({_LABEL})@([1-9][0-9]{{0,8}})\Z"
)
_BARE: re.Pattern[str] = wire.lazy_pattern(globals(), "_BARE", r"[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?\Z")
BASE_ACTIONS = ("pause", "resume", "cancel", "recall")


def valid_schema(schema: str) -> bool:
    """The envelope schema grammar [JOB-V1]: ``namespace/name@version``, at most 128 bytes."""
    return len(schema.encode()) <= 128 and _SCHEMA.match(schema) is not None


def split_action(action: str) -> tuple[str, str] | None:
    """``(schema, bare)`` for a well-formed action name [JOB-V2] (schema "" if bare), else None."""
    if action.count("#") > 1:
        return None
    schema, sep, bare = action.rpartition("#")
    if sep and not valid_schema(schema):
        return None
    if _BARE.match(bare) is None:
        return None
    return schema, bare


def check_envelope(envelope: Envelope) -> None:
    """Refuse an envelope whose schema or actions break [JOB-V1]..[JOB-V3]."""
    if not valid_schema(envelope.schema):
        raise Invalid(f"envelope.schema {envelope.schema!r} is not namespace/name@version")
    seen: set[str] = set()
    for action in envelope.actions:
        parts = split_action(action)
        if parts is None:
            raise Invalid(f"envelope action {action!r} is not an action name")
        schema, bare = parts
        if not schema and bare not in BASE_ACTIONS:
            raise Invalid(f"bare envelope action {action!r} is not one of {', '.join(BASE_ACTIONS)}")
        if schema == "abstraction.job/base@1":
            raise Invalid(f"envelope action {action!r} spells a base action long; write {bare!r}")
        if schema and schema != envelope.schema:
            raise Invalid(f"envelope action {action!r} names a schema other than the record's")
        if action in seen:
            raise Invalid(f"envelope action {action!r} is listed twice")
        seen.add(action)


def ask(rec: Record, action: str, schemas: list[str], actions: list[str]) -> str:
    """What a supervisor holding ``schemas`` and ``actions`` is told when it asks [JOB-V6].

    ``ok``, ``invalid`` (not an action name), ``unknown_schema`` (the record's
    or the action's schema is not the supervisor's) or ``not_supported``.
    """
    parts = split_action(action)
    if parts is None:
        return "invalid"
    schema, bare = parts
    if not schema and bare not in BASE_ACTIONS:
        return "invalid"
    if rec.envelope is None:
        return "not_supported"
    if rec.envelope.schema not in schemas or (schema and schema not in schemas):
        return "unknown_schema"
    if action not in rec.envelope.actions or action not in actions:
        return "not_supported"
    return "ok"


# -- checkpoint ranges [JOB-C1]..[JOB-C5] -------------------------------------


def _offset(value: Any, what: str) -> int:
    if type(value) is not int:
        raise Invalid(f"checkpoint {what} is not a whole number")
    if value < 0:
        raise Invalid(f"checkpoint {what} is negative")
    return value


def canonical_ranges(checkpoint_text: str) -> str | None:
    """The canonical checkpoint when it is an object holding ``verified``, else None.

    ``verified_prefix`` first, then the sorted, merged ``verified`` list
    (touching ranges merge, empty ones drop), then every other member sorted
    by name with its value verbatim.
    """
    if not checkpoint_text.startswith("{"):
        return None
    if '"verified"' not in checkpoint_text and "\\u" not in checkpoint_text:
        return None  # names compare after decoding escapes: only then can it hide
    members, _ = wire.parse_object_members(checkpoint_text, 0, "checkpoint")
    found = {name: (value, s, e) for name, value, s, e in members}
    if "verified" not in found:
        return None
    verified = found["verified"][0]
    if not isinstance(verified, list):
        raise Invalid("checkpoint verified is not an array")
    ranges: list[tuple[int, int]] = []
    for pair in verified:
        if not isinstance(pair, list) or len(pair) != 2:
            raise Invalid("checkpoint verified holds something other than [start, end] pairs")
        start, end = _offset(pair[0], "range start"), _offset(pair[1], "range end")
        if end < start:
            raise Invalid(f"checkpoint range [{start}, {end}] ends before it starts")
        if end > start:
            ranges.append((start, end))
    if "verified_prefix" in found:
        prefix = _offset(found["verified_prefix"][0], "verified_prefix")
        if prefix > 0:
            ranges.append((0, prefix))
    ranges.sort()
    merged: list[list[int]] = []
    for start, end in ranges:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1][1] = end
        else:
            merged.append([start, end])
    prefix = merged[0][1] if merged and merged[0][0] == 0 else 0
    parts = [f'"verified_prefix":{prefix}', '"verified":[' + ",".join(f"[{s},{e}]" for s, e in merged) + "]"]
    others = sorted((name, s, e) for name, _, s, e in members if name not in ("verified", "verified_prefix"))
    for name, s, e in others:
        parts.append(wire.escape(name) + ":" + checkpoint_text[s:e])
    return "{" + ",".join(parts) + "}"
