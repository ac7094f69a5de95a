"""A record as the columns of its row, and back (schema version 3, ``migrate-3.sql``; 4 adds ``priority``).

One typed column a field; the values the contract keeps opaque (spec,
checkpoint, each extension's value) as their compact texts, spelling kept
[JOB-E7]. The canonical bytes are never stored: :func:`render` makes them
with :func:`jobctl.record.encode`, the file store's encoder, so the two
stores share one byte layout [JOB-E1]. The one exception is ``verbatim``:
bytes another writer wrote that rendering would not give back (its own
spacing, a legacy ``schema``, a model name this reader drops), kept as they
came until the next write, which renders the record as every jobctl write
does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from ...errors import Invalid, JobError
from ...exclusive import EXCLUSIVE, exclusive_of
from ...priority import priority_of
from ...record import (
    RANGES,
    TERMINAL,
    ZERO_TIME,
    Delegation,
    Envelope,
    Intent,
    Lease,
    Prepared,
    Progress,
    Recall,
    Record,
    Step,
    decode,
    encode,
    restore,
)
from ...schedule import after_of, not_before, pipeline_of
from ..base import UNSET, Listing, OpenListing

__all__ = [
    "Row",
    "COLUMNS",
    "HELD",
    "SCHEDULING",
    "REVISION",
    "STEPS",
    "laid_over",
    "record_of",
    "render",
    "values",
    "text_fit",
    "interval",
    "checkpoint_params",
    "listing",
    "open_listing",
]

#: A row as the driver hands it back, the id first.
Row = Sequence[Any]

#: The record's columns, in the order a row (``SELECT j.*``, ``RETURNING j.*``) holds them.
COLUMNS = (
    "id", "kind", "state", "envelope_schema", "envelope_actions", "spec", "checkpoint",
    "done", "total", "progress_at", "step_name", "step_ordinal", "step_of", "step_done", "step_total",
    "owner", "epoch", "expires_at", "recall_reason", "recall_by", "recall_at", "recall_until",
    "delegation_system", "delegation_external_id", "delegation_delivered",
    "requires", "error", "want", "intent_by", "intent_at", "extension_keys", "extension_values",
    "created_at", "updated_at", "content", "critical", "verbatim",
)  # fmt: skip
#: Then the row's revision, which every write raises: a claim hands back these (``HELD``, the row's head).
REVISION = len(COLUMNS)
HELD = (*COLUMNS, "revision")
#: The columns after them: the scheduling facts a pick reads, written from jobctl's extensions, and
#: whether the job is unfinished (kept true to the state by jobctl's writes and the trigger).
SCHEDULING = ("not_before", "after", "pipeline", "scheduled", "unfinished", "priority")

VERBATIM = COLUMNS.index("verbatim")
_AT = {name: n for n, name in enumerate(COLUMNS)}
#: The record's columns that are ``NOT NULL`` in the schema: a NULL there (an administrator dropped the
#: constraint) is no value any record holds, and the row is refused by name, not read as a default.
_NOT_NULL = (
    "kind", "state", "spec", "done", "total", "progress_at", "owner", "epoch", "expires_at",
    "error", "created_at", "updated_at", "content", "critical",
)  # fmt: skip
_REQUIRED = itemgetter(*(_AT[name] for name in _NOT_NULL))

#: What each step's statement hands back after the revision (``queries.sql``): the columns it sets.
STEPS: dict[str, tuple[str, ...]] = {
    "renew": ("expires_at",),
    "progress": ("done", "progress_at", "checkpoint", "content", "updated_at"),
    "finish": ("state", "error", "checkpoint", "content", "done", "progress_at", "updated_at"),
    "release": ("expires_at", "owner", "state", "updated_at"),
    "set_intent": ("want", "intent_by", "intent_at", "updated_at"),
    "recall": ("recall_reason", "recall_by", "recall_at", "recall_until", "expires_at", "updated_at"),
}


def laid_over(held: Sequence[Any], step: str, got: Sequence[Any]) -> tuple[Any, ...]:
    """The row after ``step``: ``held`` (the row at the revision before) with what the step set, from ``got``.

    ``got`` is the statement's answer: the new revision, then :data:`STEPS`'s
    columns, then the notice it sent. Every step's statement clears ``verbatim``.
    """
    out = list(held)
    columns = STEPS[step]
    # After them the statement's notice (queries.sql), which is no column of the row.
    for name, value in zip(columns, got[1 : 1 + len(columns)], strict=True):
        out[_AT[name]] = value
    out[VERBATIM] = None
    out[REVISION] = got[0]
    return tuple(out)


def record_of(row: Sequence[Any]) -> Record:
    """The record a row holds: decoded from its verbatim bytes, else restored from its columns.

    ``Invalid``/``UnknownSchema`` as a decode of the rendered bytes would
    refuse them, naming the row's id.
    """
    job_id = row[0]
    if None in _REQUIRED(row):
        empty = [name for name, value in zip(_NOT_NULL, _REQUIRED(row), strict=True) if value is None]
        raise Invalid(f"column {', '.join(empty)} of its row is NULL, which no record holds", job_id)
    verbatim = row[VERBATIM]
    if verbatim is not None:
        return decode(bytes(verbatim), job_id, named=True)
    try:
        return _restored(row)
    except JobError as exc:
        if not exc.job_id:
            exc.job_id = job_id
        raise


def _restored(row: Sequence[Any]) -> Record:
    (
        job_id, kind, state, envelope_schema, envelope_actions, spec, checkpoint,
        done, total, progress_at, step_name, step_ordinal, step_of, step_done, step_total,
        owner, epoch, expires_at, recall_reason, recall_by, recall_at, recall_until,
        delegation_system, delegation_external_id, delegation_delivered,
        requires, error, want, intent_by, intent_at, extension_keys, extension_values,
        created_at, updated_at, content, critical, _verbatim,
    ) = row[:37]  # fmt: skip
    step = None if step_name is None else Step(step_name, step_ordinal, step_of, step_done, step_total)
    recall = None if recall_reason is None else Recall(recall_reason, recall_at, recall_until, recall_by or "")
    parts = (
        job_id,
        kind,
        state,
        None if envelope_schema is None else Envelope(envelope_schema, list(envelope_actions or ())),
        spec,
        checkpoint,
        Progress(done, total, progress_at, step),
        Lease(owner, epoch, expires_at, recall),
        None
        if delegation_system is None
        else Delegation(delegation_system, delegation_external_id or "", bool(delegation_delivered)),
    )
    if len(extension_keys or ()) != len(extension_values or ()):
        raise Invalid(f"{len(extension_keys or ())} extension keys but {len(extension_values or ())} values")
    return restore(
        parts,
        requires or [],
        error,
        None if want is None else Intent(want, intent_by or "", intent_at),
        dict(zip(extension_keys or (), extension_values or (), strict=True)),
        (created_at, updated_at),
        (content, critical),
    )


def render(row: Sequence[Any]) -> bytes:
    """The record's bytes: its verbatim bytes, else the canonical bytes of its columns (``jobctl export``)."""
    verbatim = row[VERBATIM]
    if verbatim is not None:
        return bytes(verbatim)
    rec = record_of(row)
    rec._exposed = False  # nobody holds its values: each opaque text is written as kept
    return encode(rec)


def values(
    rec: Record,
    p: Prepared,
    *,
    verbatim: bytes | None = None,
    lists: tuple[list[str], list[str]] | None = None,
) -> dict[str, Any]:
    """Every column of ``rec``'s row, as :func:`jobctl.record.prepare` checked it into ``p``.

    ``lists`` are the content and critical lists to keep (default: the ones
    ``p`` derived), ``verbatim`` the bytes readers are to be handed. Times a
    record leaves unset are the zero instant its bytes show
    (:data:`jobctl.record.ZERO_TIME`), so a row holds what a decode of its
    rendering gives.
    """
    progress, lease = rec.progress, rec.lease
    step, recall, delegation, intent, envelope = progress.step, lease.recall, rec.delegation, rec.intent, rec.envelope
    content, critical = lists if lists is not None else (p.content, p.critical)
    _texts_fit(rec, p, (*content, *critical))
    try:
        after: list[str] = after_of(rec)
        when = not_before(rec)
        scheduled = True
    except JobError:  # malformed scheduling data: never picked; claim_next names it
        after, when, scheduled = [], None, False
    pipe = pipeline_of(rec)
    if pipe is not None and not fits(pipe[0]):
        pipe = None  # the column is metadata; the record's bytes render from the extension's own text
    return {
        "id": rec.id,
        "kind": rec.kind,
        "state": rec.state,
        "envelope_schema": None if envelope is None else envelope.schema,
        "envelope_actions": None if envelope is None else list(envelope.actions),
        "spec": p.spec,
        "checkpoint": p.checkpoint,
        "done": progress.done,
        "total": progress.total,
        "progress_at": _time(progress.updated_at),
        "step_name": None if step is None else step.name,
        "step_ordinal": None if step is None else step.ordinal,
        "step_of": None if step is None else step.of,
        "step_done": None if step is None else step.done,
        "step_total": None if step is None else step.total,
        "owner": lease.owner,
        "epoch": lease.epoch,
        "expires_at": _time(lease.expires_at),
        "recall_reason": None if recall is None else recall.reason,
        "recall_by": None if recall is None else recall.by,
        "recall_at": None if recall is None else _time(recall.at),
        "recall_until": None if recall is None else recall.until,
        "delegation_system": None if delegation is None else delegation.system,
        "delegation_external_id": None if delegation is None else delegation.external_id,
        "delegation_delivered": None if delegation is None else delegation.delivered,
        "requires": list(rec.requires) or None,
        "error": rec.error,
        "want": None if intent is None else intent.want,
        "intent_by": None if intent is None else intent.by,
        "intent_at": None if intent is None else intent.at,
        "extension_keys": [key for key, _text, _kept in p.extensions] or None,
        "extension_values": [text for _key, text, _kept in p.extensions] or None,
        "created_at": _time(rec.created_at),
        "updated_at": _time(rec.updated_at),
        "content": list(content),
        "critical": list(critical),
        "verbatim": verbatim,
        "not_before": when,
        "after": after,
        "pipeline": None if pipe is None else pipe[0],
        "scheduled": scheduled,
        "unfinished": rec.state not in TERMINAL,
        "priority": priority_of(rec),  # schema version 4: the pick's first key (jobctl.priority)
    }


def _time(when: datetime | None) -> datetime:
    return ZERO_TIME if when is None else when


def fits(value: str) -> bool:
    """Whether a text column can keep ``value``: PostgreSQL's text cannot hold U+0000."""
    return "\x00" not in value


def text_fit(value: str, what: str, job_id: str = "") -> str:
    """``value``, or ``Invalid`` when it holds U+0000: PostgreSQL's text cannot, and the record's field is text."""
    if not fits(value):
        raise Invalid(f"{what} holds the character U+0000, which a PostgreSQL store cannot keep", job_id)
    return value


def _texts_fit(rec: Record, p: Prepared, models: Iterable[str]) -> None:
    """Every string of ``rec`` that is a text column or an element of one, :func:`text_fit`.

    ``models`` are the names of the ``content`` and ``critical`` lists the row keeps: the
    record's own as read when its bytes are kept verbatim (names of models nobody here knows
    among them), else the ones ``p`` derived.
    """
    named: list[tuple[str, str]] = [("id", rec.id), ("kind", rec.kind), ("lease.owner", rec.lease.owner)]
    named += [("error", rec.error)]
    if rec.intent is not None:
        named.append(("intent.by", rec.intent.by))
    recall = rec.lease.recall
    if recall is not None:
        named += [("lease.recall.reason", recall.reason), ("lease.recall.by", recall.by)]
    if rec.delegation is not None:
        named += [("delegation.system", rec.delegation.system), ("delegation.external_id", rec.delegation.external_id)]
    if rec.envelope is not None:
        named += [("envelope", name) for name in (rec.envelope.schema, *rec.envelope.actions)]
    if rec.progress.step is not None:
        named.append(("progress.step.name", rec.progress.step.name))
    named += [("requires", name) for name in rec.requires]
    named += [("an extension key", key) for key, _text, _kept in p.extensions]
    named += [("content", name) for name in models]
    key = exclusive_of(rec)  # a claim keeps it in jobctl_exclusive.key
    if key is not None:
        named.append((f"the exclusive key ({EXCLUSIVE})", key))
    for what, value in named:
        text_fit(value, what, rec.id)


def interval(seconds: float) -> timedelta:
    """A duration as a statement's interval: the microseconds the file store's ``now + ttl`` adds."""
    return timedelta(seconds=seconds)


def checkpoint_params(given: Any, ranged: bool = False) -> dict[str, Any]:
    """A step's checkpoint parameters: whether to set it, its text, the model it makes a write carry on.

    ``given`` and ``ranged`` as ``jobctl.store.contract._given_ranged`` says.
    """
    if given is UNSET:
        return {"set_checkpoint": False, "checkpoint": None, "carry": None}
    if given is None:
        return {"set_checkpoint": True, "checkpoint": None, "carry": None}
    return {"set_checkpoint": True, "checkpoint": given.text, "carry": RANGES if ranged else None}


def listing(rows: Iterable[Row], out: Listing | None = None) -> Listing:
    """The records of ``rows``; a row this reader cannot read is named unreadable, with why."""
    found = Listing() if out is None else out
    for got in rows:
        try:
            found.append(record_of(got))
        except JobError as exc:
            found.unreadable.append((got[0], exc))
    return found


def open_listing(open_rows: list[Row], ended: Iterable[Row], why: Callable[[str], JobError]) -> OpenListing:
    """The open jobs' records and every job's state, from the open rows and ``(id, state, readable)`` of the ended.

    The open rows were read first: a row among them that the ended ones
    name finished meanwhile, which it stays. A finished row this reader
    cannot read is named unreadable (``why`` reads its own words) and left
    out of ``states``, as the file store leaves out a record it cannot read.
    """
    out = OpenListing()
    states = out.states
    for job_id, state, readable in ended:
        if readable:
            states[job_id] = state
        else:
            out.unreadable.append((job_id, why(job_id)))
    for got in sorted(open_rows, key=lambda got: got[0]):
        if got[0] in states:
            continue  # finished after the open rows were read
        try:
            rec = record_of(got)
        except JobError as exc:
            out.unreadable.append((got[0], exc))
            continue
        states[rec.id] = rec.state
        out.append(rec)
    out.unreadable.sort(key=lambda pair: pair[0])
    return out
