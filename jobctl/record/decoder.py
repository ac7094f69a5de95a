"""The strict decoder: a record file's bytes to a :class:`.Record`, or a refusal that says why.

:func:`decode` tries the fast paths first (:mod:`.fast`); whatever they are
not sure of, and every refusal, is :func:`_decode`'s, so its verdicts and
their messages are the only ones there are.
"""

from __future__ import annotations

from typing import Any

from .. import wire
from ..errors import Invalid, UnknownSchema
from . import roster
from .checks import (
    _DELEGATION_KEYS,
    _ENVELOPE_KEYS,
    _INTENT_KEYS,
    _LEASE_KEYS,
    _PROGRESS_KEYS,
    _RECALL_KEYS,
    _STEP_KEYS,
    _check_delegation,
    _check_recall,
    _check_step,
    _int,
    _names,
    _obj,
    _str,
    check_envelope,
)
from .model import Delegation, Envelope, Intent, Lease, Progress, Recall, Record, Step
from .roster import _LEGACY, _NEVER_CRITICAL, _TOP_KEYS, DELEGATION, STATES, WANTS
from .times import parse_time


def _fast_decode(text: str) -> Record | None:
    """The first decode: load the fast paths (:mod:`.fast`, :mod:`.canonical`), put them in this name's place, use them.

    Loaded with the decoder, they would cost every command that imports a
    store and decodes nothing (a piped ``submit``) their start-up.
    """
    from .fast import _fast_decode as fast

    globals()["_fast_decode"] = fast
    return fast(text)


def decode(data: bytes | str, job_id: str = "", *, named: bool = False) -> Record:
    """Read one record file, validating everything a writer promises.

    Refusals: ``Invalid`` (bad JSON, a duplicate name, an unknown field, a
    broken rule), ``UnknownSchema`` (a critical model this reader does not
    know, or a legacy ``schema`` other than 3/4/5). ``job_id`` only labels
    the error message; ``named`` makes it the id the record was read under
    (its file's name, its row's key), and a record naming another id is
    ``Invalid``: a claim of it would write the other job's record. Every
    store read is ``named``.
    """
    try:
        text = wire.utf8_text(data, "record") if isinstance(data, bytes) else data
        rec = _fast_decode(text)
        if rec is None:
            rec = _decode(text)
        if named and rec.id != job_id:
            raise Invalid(f"the record of job {job_id} names another id, {rec.id!r}")
        return rec
    except (Invalid, UnknownSchema) as exc:
        if job_id and not exc.job_id:
            exc.job_id = job_id
        if isinstance(exc, Invalid) and job_id:
            exc.hint = f"the record file jobs/{job_id}.json is damaged: look at it, restore or remove it"
        raise


def _not_an_object(text: str, start: int) -> str:
    """What a record that does not open with ``{`` is: damaged JSON (where), or JSON of another shape."""
    at = len(text[:start].encode("utf-8", "surrogateescape"))
    if start >= len(text):
        return f"record is not valid JSON at byte {at} (the file {'is empty' if not text else 'holds only blanks'})"
    try:
        wire.scan_value(text, start)
    except Invalid:
        return f"record is not valid JSON at byte {at}"
    return "record is valid JSON but not a JSON object"


def _decode(data: bytes | str) -> Record:
    """The strict decoder: every check, in the contract's order; the fast paths' answers are held to it."""
    text = wire.utf8_text(data, "record") if isinstance(data, bytes) else data
    top = _top(text)
    content, critical = _models(top)
    rec = Record(content=content, critical=critical)
    rec._text = text
    intent = _obj(top.get("intent"), "intent", _INTENT_KEYS)
    if intent is not None:
        want = intent.get("want")
        if want not in WANTS:
            raise Invalid(f"intent.want {want!r} is not run, pause or cancel")
        rec.intent = Intent(want, _str(intent.get("by"), "intent.by"), parse_time(intent.get("at"), "intent.at"))
    rec.id = _str(top.get("id"), "id")
    if not rec.id.strip():
        raise Invalid("id is blank")
    rec.kind = _str(top.get("kind"), "kind")
    if not rec.kind.strip():
        raise Invalid("kind is blank")
    state = top.get("state")
    if state not in STATES:
        raise Invalid(f"state {state!r} is not a state")
    rec.state = state
    envelope = _obj(top.get("envelope"), "envelope", _ENVELOPE_KEYS)
    if envelope is not None:
        rec.envelope = Envelope(
            _str(envelope.get("schema"), "envelope.schema"), list(_names(envelope.get("actions"), "envelope.actions"))
        )
        check_envelope(rec.envelope)

    if "spec" not in top or top["spec"] is None:
        raise Invalid("spec is missing or null")
    rec.spec = rec._orig["spec"] = top["spec"]
    rec.checkpoint = rec._orig["checkpoint"] = top.get("checkpoint")
    rec.progress = _progress(top)
    rec.lease = _lease(top)
    rec.delegation = _delegation(top)

    rec.requires = list(_names(top.get("requires"), "requires"))
    rec.error = _str(top.get("error"), "error")
    if "error" in top and not rec.error:
        rec._error_present = True  # written back only by a faithful (non-deriving) encode

    extensions = top.get("extensions")
    if extensions is not None:
        if not isinstance(extensions, dict):
            raise Invalid("extensions is not an object")
        for name, value in extensions.items():
            if not name.strip():
                raise Invalid("an extension key is blank")
            rec.extensions[name] = rec._orig["x:" + name] = value

    rec.created_at = parse_time(top.get("created_at"), "created_at")
    rec.updated_at = parse_time(top.get("updated_at"), "updated_at")
    return rec


def _top(text: str) -> dict[str, Any]:
    """The record's JSON object, scanned strictly: one object, nothing after it, no lone surrogate."""
    wire.check_text(text)
    start = wire._WS.match(text).end()  # type: ignore[union-attr]
    if start >= len(text) or text[start] != "{":
        raise Invalid(_not_an_object(text, start))
    top, end = wire.scan_value(text, start)  # duplicate names refused at every depth [JOB-E9]
    if wire._WS.match(text, end).end() != len(text):  # type: ignore[union-attr]
        raise Invalid("extra data after the record")
    wire.check_surrogates(text, top)
    got: dict[str, Any] = top
    return got


def _models(top: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``content`` and the ``critical`` kept, judged first [JOB-D10]; then no member the binding does not name."""
    # content first: a record must say what it contains; then critical [JOB-D10].
    content = _names(top.get("content"), "content")
    critical = _names(top.get("critical"), "critical")
    if not content:
        schema = top.get("schema")
        if schema is None:
            raise Invalid("a record must say what it contains: no content")
        if type(schema) is not int:
            raise Invalid("legacy schema is not an integer")
        if schema not in _LEGACY:
            raise UnknownSchema(f"unknown legacy schema {schema}")
        content, critical = (list(x) for x in _LEGACY[schema])
        if top.get("delegation") is not None:
            content.append(DELEGATION)
            critical.append(DELEGATION)
    critical = [name for name in critical if name not in _NEVER_CRITICAL]
    for name in critical:
        if name not in roster._UNDERSTOOD:
            raise UnknownSchema(f"critical model {name} is unknown to this reader")
    for name in critical:
        if name not in content:
            raise Invalid(f"critical model {name} is not in content")
    if not _TOP_KEYS.issuperset(top):
        raise Invalid(f"unknown field {next(key for key in top if key not in _TOP_KEYS)}")
    return content, critical


def _progress(top: dict[str, Any]) -> Progress:
    progress = _obj(top.get("progress"), "progress", _PROGRESS_KEYS) or {}
    got = Progress(
        _int(progress.get("done"), "progress.done"),
        _int(progress.get("total"), "progress.total"),
        parse_time(progress.get("updated_at"), "progress.updated_at"),
    )
    step = _obj(progress.get("step"), "progress.step", _STEP_KEYS)
    if step is not None:
        got.step = Step(
            _str(step.get("name"), "progress.step.name"),
            _int(step.get("ordinal"), "progress.step.ordinal"),
            _int(step.get("of"), "progress.step.of"),
            _int(step.get("done"), "progress.step.done"),
            _int(step.get("total"), "progress.step.total"),
        )
        _check_step(got.step)
    return got


def _lease(top: dict[str, Any]) -> Lease:
    lease = _obj(top.get("lease"), "lease", _LEASE_KEYS) or {}
    got = Lease(
        _str(lease.get("owner"), "lease.owner"),
        _int(lease.get("epoch"), "lease.epoch"),
        parse_time(lease.get("expires_at"), "lease.expires_at"),
    )
    recall = _obj(lease.get("recall"), "lease.recall", _RECALL_KEYS)
    if recall is not None:
        got.recall = Recall(
            _str(recall.get("reason"), "lease.recall.reason"),
            parse_time(recall.get("at"), "lease.recall.at"),
            parse_time(recall.get("until"), "lease.recall.until"),
            _str(recall.get("by"), "lease.recall.by"),
        )
        _check_recall(got.recall)
    return got


def _delegation(top: dict[str, Any]) -> Delegation | None:
    delegation = _obj(top.get("delegation"), "delegation", _DELEGATION_KEYS)
    if delegation is None:
        return None
    delivered = delegation.get("delivered")
    if delivered is not None and not isinstance(delivered, bool):
        raise Invalid("delegation.delivered is not a boolean")
    got = Delegation(
        _str(delegation.get("system"), "delegation.system"),
        _str(delegation.get("external_id"), "delegation.external_id"),
        bool(delivered),
    )
    _check_delegation(got)
    return got
