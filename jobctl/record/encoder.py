"""The one encoder: a record's canonical bytes [JOB-E1]..[JOB-E6], every value checked on the way out."""

from __future__ import annotations

from typing import Any

from .. import wire
from ..errors import Invalid, UnknownSchema
from . import roster
from .checks import _check_delegation, _check_recall, _check_step, _int, canonical_ranges, check_envelope
from .model import Record
from .roster import (
    _CARRIED,
    _NEVER_CRITICAL,
    BASE,
    DELEGATION,
    ENVELOPE,
    INTENT,
    RANGES,
    RECALL,
    STATES,
    STEP,
    TERMINAL,
    TERMINAL_MODEL,
    WANTS,
)
from .times import format_time


def derive(rec: Record, has_ranges: bool) -> tuple[list[str], list[str]]:
    """``content``/``critical`` for ``rec`` as it is about to be written [JOB-D2]."""
    content = [BASE]
    critical = [BASE]
    if rec.intent is not None:
        content.append(INTENT)
        critical.append(INTENT)
    if rec.delegation is not None:
        content.append(DELEGATION)
        critical.append(DELEGATION)
    if rec.envelope is not None:
        content.append(ENVELOPE)
        critical.append(ENVELOPE)
    if rec.progress.step is not None:
        content.append(STEP)
    if rec.state in TERMINAL:
        content.append(TERMINAL_MODEL)
        critical.append(TERMINAL_MODEL)
    if rec.lease.recall is not None:
        content.append(RECALL)
        critical.append(RECALL)
    carried = {name for name in rec.content if name in _CARRIED}
    if has_ranges:
        carried.add(RANGES)
    content.extend(sorted(carried))
    content.extend(sorted(rec.extensions))  # [JOB-D3]
    present = set(content)
    for name in rec.critical:
        if name not in _NEVER_CRITICAL and name in present and name not in critical:
            critical.append(name)
    return content, critical


def _names_block(key: str, names: list[str]) -> str:
    return f'  "{key}": [\n' + ",\n".join("    " + wire.escape(n) for n in names) + "\n  ],\n"


class Prepared:
    """A record's values as :func:`encode` writes them, every check made: what the layout and a store need.

    ``spec``, ``checkpoint`` and each extension value are compact texts
    (spelling kept); ``*_kept`` says the text is the one read (so the value a
    caller holds may be kept); ``ranged`` that the checkpoint carries
    ``verified`` ranges [JOB-C1]; ``content``/``critical`` are the lists to
    write (derived afresh unless the encode is faithful). (Slots, not a
    ``NamedTuple``: generating one is a tenth of a millisecond of every start-up.)
    """

    __slots__ = ("spec", "spec_kept", "checkpoint", "checkpoint_kept", "ranged", "extensions", "content", "critical")

    def __init__(
        self,
        spec: str,
        spec_kept: bool,
        checkpoint: str | None,
        checkpoint_kept: bool,
        ranged: bool,
        extensions: list[tuple[str, str, bool]],  # (key, compact text, kept), sorted by key
        content: list[str],
        critical: list[str],
    ) -> None:
        self.spec, self.spec_kept = spec, spec_kept
        self.checkpoint, self.checkpoint_kept, self.ranged = checkpoint, checkpoint_kept, ranged
        self.extensions = extensions
        self.content, self.critical = content, critical


def prepare(rec: Record, rederive: bool = True, *, settle: bool = False) -> Prepared:
    """Check ``rec`` as :func:`encode` does and give what it would write, without laying it out.

    Refusals: ``Invalid`` (a blank id or kind, a bad state, intent, envelope,
    number, step, recall or delegation, an opaque value that is not JSON or
    nests too deep), ``UnknownSchema`` (a critical model this writer does not
    know). The PostgreSQL store keeps these values in its columns. ``settle``
    is :func:`encode`'s.
    """
    if not isinstance(rec.id, str) or not rec.id.strip():
        raise Invalid("id is blank")
    if not isinstance(rec.kind, str) or not rec.kind.strip():
        raise Invalid("kind is blank", rec.id)
    if rec.state not in STATES:
        raise Invalid(f"state {rec.state!r} is not a state", rec.id)
    if rec.intent is not None and rec.intent.want not in WANTS:
        raise Invalid(f"intent.want {rec.intent.want!r} is not run, pause or cancel", rec.id)
    if rec.envelope is not None:
        check_envelope(rec.envelope)
    if rec.spec is None:
        raise Invalid("spec is missing", rec.id)
    spec_got = rec._opaque("spec")
    assert spec_got is not None  # spec is checked non-None above
    spec, spec_kept = spec_got
    if not spec_kept:
        wire.check_text(spec, 1)  # the record object is the first of the 64 [JOB-E8]
        if spec == "null":
            raise Invalid("spec is null", rec.id)
    cp_got = rec._opaque("checkpoint")
    checkpoint, cp_kept = cp_got if cp_got is not None else (None, False)
    if checkpoint is not None and checkpoint.strip() == "null":
        checkpoint = None  # absent and null are one state, spelled one way [JOB-E4]
    if checkpoint is not None and not cp_kept:
        wire.check_text(checkpoint, 1)
    has_ranges = False
    if checkpoint is not None:
        ranged = canonical_ranges(checkpoint)
        if ranged is not None:
            checkpoint, has_ranges, cp_kept = ranged, True, False
    _check_numbers(rec)
    ext_texts: list[tuple[str, str, bool]] = []
    for key in sorted(rec.extensions):
        if not isinstance(key, str) or not key.strip():
            raise Invalid("an extension key is blank", rec.id)
        got = rec._opaque("x:" + key)
        assert got is not None
        if not got[1]:
            wire.check_text(got[0], 2)  # record -> extensions -> value
        ext_texts.append((key, *got))
    for name in rec.requires:
        if not isinstance(name, str):
            raise Invalid("requires holds something other than a string", rec.id)

    if rederive:
        content, critical = derive(rec, has_ranges)
    else:
        content, critical = rec.content, rec.critical
    for name in critical:
        if name not in roster._UNDERSTOOD:
            raise UnknownSchema(f"critical model {name} is unknown to this writer", rec.id)
    p = Prepared(spec, spec_kept, checkpoint, cp_kept, has_ranges, ext_texts, content, critical)
    if settle:
        _settle(rec, p, rederive)
    return p


def _check_numbers(rec: Record) -> None:
    """The counts and sub-objects :func:`decode` would refuse: negative or too large numbers, a broken step."""
    progress = rec.progress
    for what, value in (("progress.done", progress.done), ("progress.total", progress.total)):
        _int(value, what)
    if progress.step is not None:
        for what, value in (
            ("ordinal", progress.step.ordinal),
            ("of", progress.step.of),
            ("done", progress.step.done),
            ("total", progress.step.total),
        ):
            _int(value, "progress.step." + what)
        _check_step(progress.step)
    lease = rec.lease
    _int(lease.epoch, "lease.epoch")
    if lease.recall is not None:
        _check_recall(lease.recall)
    if rec.delegation is not None:
        _check_delegation(rec.delegation)


def encode(rec: Record, rederive: bool = True, settle: bool = False) -> bytes:
    """The canonical bytes of ``rec`` [JOB-E1]..[JOB-E6], validated on the way out (:func:`prepare`).

    With ``rederive`` (every store write) ``content``/``critical`` are derived
    afresh. Without it the encode is *faithful*: the lists are written as they
    were read and an explicitly empty ``error`` stays, so any record written by
    a conforming writer comes back byte for byte (the vector tests).

    With ``settle`` the record is left equal to what decoding the returned
    bytes would give -- derived lists, canonical checkpoint, opaque values
    re-read from their texts (so nothing aliases what a caller handed in) --
    which spares a store write a second decode.
    """
    p = prepare(rec, rederive)
    data = _layout(rec, p, rederive)  # before _settle, which may drop an explicitly empty error
    if settle:
        _settle(rec, p, rederive)
    return data


def _layout(rec: Record, p: Prepared, rederive: bool) -> bytes:
    """The file binding's text of a prepared record [JOB-E1]: two-space indentation, fixed member order."""
    out = ["{\n", _names_block("content", p.content)]
    if p.critical:
        out.append(_names_block("critical", p.critical))
    out.append(f'  "id": {wire.escape(rec.id)},\n  "kind": {wire.escape(rec.kind)},\n')
    if rec.envelope is not None:
        out.append(f'  "envelope": {{\n    "schema": {wire.escape(rec.envelope.schema)}')
        if rec.envelope.actions:
            out.append(',\n    "actions": [\n')
            out.append(",\n".join("      " + wire.escape(a) for a in rec.envelope.actions))
            out.append("\n    ]")
        out.append("\n  },\n")
    out.append(f'  "state": "{rec.state}",\n  "spec": {wire.indent(p.spec, 1)},\n')
    if p.checkpoint is not None:
        out.append(f'  "checkpoint": {wire.indent(p.checkpoint, 1)},\n')
    progress = rec.progress
    out.append(f'  "progress": {{\n    "done": {progress.done},\n')
    if progress.total:
        out.append(f'    "total": {progress.total},\n')
    out.append(f'    "updated_at": "{format_time(progress.updated_at)}"')
    if progress.step is not None:
        st = progress.step
        out.append(f',\n    "step": {{\n      "name": {wire.escape(st.name)},\n      "ordinal": {st.ordinal}')
        for key, value in (("of", st.of), ("done", st.done), ("total", st.total)):
            if value:
                out.append(f',\n      "{key}": {value}')
        out.append("\n    }")
    out.append("\n  },\n")
    lease = rec.lease
    out.append(
        f'  "lease": {{\n    "owner": {wire.escape(lease.owner)},\n    "epoch": {lease.epoch},\n'
        f'    "expires_at": "{format_time(lease.expires_at)}"'
    )
    if lease.recall is not None:
        rc = lease.recall
        out.append(f',\n    "recall": {{\n      "reason": {wire.escape(rc.reason)},\n')
        if rc.by:
            out.append(f'      "by": {wire.escape(rc.by)},\n')
        out.append(f'      "at": "{format_time(rc.at)}",\n      "until": "{format_time(rc.until)}"\n    }}')
    out.append("\n  },\n")
    if rec.delegation is not None:
        dg = rec.delegation
        out.append(
            f'  "delegation": {{\n    "system": {wire.escape(dg.system)},\n'
            f'    "external_id": {wire.escape(dg.external_id)}'
        )
        if dg.delivered:
            out.append(',\n    "delivered": true')
        out.append("\n  },\n")
    if rec.requires:
        out.append(_names_block("requires", rec.requires))
    if rec.error or (not rederive and rec._error_present):
        out.append(f'  "error": {wire.escape(rec.error)},\n')
    if rec.intent is not None:
        it = rec.intent
        out.append(f'  "intent": {{\n    "want": "{it.want}"')
        if it.by:
            out.append(f',\n    "by": {wire.escape(it.by)}')
        if it.at is not None:
            out.append(f',\n    "at": "{format_time(it.at)}"')
        out.append("\n  },\n")
    if p.extensions:
        out.append('  "extensions": {\n')
        out.append(",\n".join(f"    {wire.escape(k)}: {wire.indent(t, 2)}" for k, t, _ in p.extensions))
        out.append("\n  },\n")
    out.append(f'  "created_at": "{format_time(rec.created_at)}",\n')
    out.append(f'  "updated_at": "{format_time(rec.updated_at)}"\n}}\n')
    return "".join(out).encode("utf-8")


def _settle(rec: Record, p: Prepared, rederive: bool) -> None:
    """Leave ``rec`` as decoding what was just written would give it (see :func:`encode`)."""
    rec.content, rec.critical = list(p.content), list(p.critical)
    rec._text, rec._error_present = None, rec._error_present and not rederive
    # A value kept as read was never in a caller's hands (or equals what
    # was read): keep the object. Anything else is re-read from its text
    # so the returned record aliases nothing a caller holds [JOB-M2].
    trusted = not rec._exposed
    rec._raw = {"spec": p.spec}
    rec.spec = rec._orig["spec"] = rec.spec if p.spec_kept and trusted else wire.parse_value(p.spec)
    rec._orig["checkpoint"] = None
    if p.checkpoint is not None:
        rec._raw["checkpoint"] = p.checkpoint
        keep = p.checkpoint_kept and trusted
        rec.checkpoint = rec._orig["checkpoint"] = rec.checkpoint if keep else wire.parse_value(p.checkpoint)
    else:
        rec.checkpoint = None
    for key, text, kept in p.extensions:
        rec._raw["x:" + key] = text
        value = rec.extensions[key] if kept and trusted else wire.parse_value(text)
        rec.extensions[key] = rec._orig["x:" + key] = value
    rec._exposed = True


def given_checkpoint(value: Any) -> tuple[str | None, bool]:
    """A checkpoint a holder hands ``progress`` or ``finish``, as the record will hold it.

    Its compact text -- a :class:`jobctl.wire.Raw` keeps its spelling, any
    other value is written compactly -- canonicalised when it carries
    ``verified`` ranges [JOB-C3], and whether it does; ``(None, False)`` for
    no checkpoint (``None`` or JSON ``null`` [JOB-E4]). ``Invalid`` for what
    cannot be written as JSON or nests too deep. Every store writes the
    checkpoint it is given exactly as this says, whatever it held before.
    """
    if value is None:
        return None, False
    text = value.text if isinstance(value, wire.Raw) else wire.dumps_compact(value)
    if text == "null":
        return None, False
    wire.check_text(text, 1)
    ranged = canonical_ranges(text)
    return (text, False) if ranged is None else (ranged, True)
