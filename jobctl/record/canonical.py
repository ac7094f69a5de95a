"""The canonical layout read by regular expression [JOB-E1]: the fastest path of the decoder.

A record every conforming writer wrote has its own members at fixed places;
they are matched by pattern, and only the opaque values (spec, checkpoint,
extensions) go through the strict scanner. Anything else returns None.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime
from typing import Any, NamedTuple

from .. import wire
from . import roster
from .checks import _INT64
from .model import Intent, Lease, Progress, Record
from .roster import _NEVER_CRITICAL
from .times import _EPOCH, _MICROSECOND, _Z, _fromiso, _offset_iso, _time

_new_record = object.__new__
_new_parts = tuple.__new__


# The canonical layout [JOB-E1], piece by piece, for the common shape. A string here has no
# escape and no control character, so its text is its value; a number is a JSON integer.
_S = r'"([^"\\\x00-\x1f]*)"'
_N = "(0|[1-9][0-9]*)"
# An instant as jobctl and the other conforming writers spell it: what _time reads with one call.
_T = r'"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z)"'
_NAMES_BLOCK = r'\[\n((?:    "[^"\\\x00-\x1f]*",\n)*    "[^"\\\x00-\x1f]*")\n  \],\n'
# What follows "id" in the head: the id, the kind and the state.
_ID_ON = rf'{_S},\n  "kind": {_S},\n  "state": "(pending|running|transferred|complete|failed|cancelled)",\n  "spec": '
_HEAD: re.Pattern[str] = wire.lazy_pattern(
    globals(), "_HEAD", rf'\{{\n  "content": {_NAMES_BLOCK}(?:  "critical": {_NAMES_BLOCK})?  "id": {_ID_ON}'
)
_AFTER_HEAD: re.Pattern[str] = wire.lazy_pattern(globals(), "_AFTER_HEAD", _ID_ON)
_BODY: re.Pattern[str] = wire.lazy_pattern(
    globals(),
    "_BODY",
    rf',\n  "progress": \{{\n    "done": {_N},\n(?:    "total": {_N},\n)?    "updated_at": {_T}\n  \}},\n'
    rf'  "lease": \{{\n    "owner": {_S},\n    "epoch": {_N},\n    "expires_at": {_T}\n  \}},\n'
    rf'(?:  "requires": {_NAMES_BLOCK})?(?:  "error": {_S},\n)?'
    rf'(?:  "intent": \{{\n    "want": "(run|pause|cancel)"(?:,\n    "by": {_S})?(?:,\n    "at": {_S})?\n  \}},\n)?',
)
_TAIL: re.Pattern[str] = wire.lazy_pattern(globals(), "_TAIL", rf'  "created_at": {_T},\n  "updated_at": {_T}\n\}}\n\Z')
# A finished record's (:func:`_ended_fields`): after the id's quote, the id, the kind and a terminal state;
# after the spec, the rest as _BODY and _TAIL match it, with neither checkpoint nor extensions.
_ENDED_ON: re.Pattern[str] = wire.lazy_pattern(
    globals(), "_ENDED_ON", rf'{_S},\n  "kind": {_S},\n  "state": "(complete|failed|cancelled)",\n  "spec": '
)
_ENDED_REST: re.Pattern[str] = wire.lazy_pattern(
    globals(),
    "_ENDED_REST",
    rf',\n  "progress": \{{\n    "done": {_N},\n(?:    "total": {_N},\n)?    "updated_at": {_T}\n  \}},\n'
    rf'  "lease": \{{\n    "owner": {_S},\n    "epoch": {_N},\n    "expires_at": {_T}\n  \}},\n'
    rf'(?:  "requires": {_NAMES_BLOCK})?(?:  "error": {_S},\n)?'
    rf'(?:  "intent": \{{\n    "want": "(?:run|pause|cancel)"(?:,\n    "by": {_S})?(?:,\n    "at": {_S})?\n  \}},\n)?'
    rf'  "created_at": {_T},\n  "updated_at": {_T}\n\}}\n\Z',
)


_CHECKPOINT_AT = ',\n  "checkpoint": '
_EXTENSIONS_AT = '  "extensions": '


def _block(names: str) -> list[str]:
    """The names of a ``_NAMES_BLOCK`` as matched: ``    "a",\n    "b"``."""
    return [line[5:-1] for line in names.split(",\n")]


#: What :func:`_blocks` made of each head seen (``{\n  "content": [...],\n``, the critical block if any, up
#: to the newline before ``"id"``), by its text: a store holds few combinations of models, so most records'
#: heads are found here, and only the id, kind and state after them are matched (:data:`_AFTER_HEAD`).
_HEADS_SEEN: dict[str, tuple[tuple[str, ...], tuple[str, ...], bool]] = {}
_ID_AT = '\n  "id": '


def _blocks(content_block: str, critical_block: str | None) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """``(content, critical kept, every kept one in content)`` of the two names blocks as :data:`_HEAD` matched them."""
    content = _block(content_block)
    critical = [] if critical_block is None else _block(critical_block)
    kept = tuple(name for name in critical if name not in _NEVER_CRITICAL)
    return tuple(content), kept, all(name in content for name in kept)


def _models(got: tuple[tuple[str, ...], tuple[str, ...], bool]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``(content, critical)`` as :func:`_decode` makes them of a head's :func:`_blocks`; None: it would refuse them."""
    # Asked every time: what this process understands is not the blocks' to say (understand()).
    if not got[2] or not roster._UNDERSTOOD.issuperset(got[1]):
        return None
    return got[0], got[1]


class _Parts(NamedTuple):
    """The values of a record in the canonical layout, as :func:`_canonical_parts` checked them."""

    models: tuple[tuple[str, ...], tuple[str, ...]]
    id: str
    kind: str
    state: str
    spec: Any
    checkpoint: Any
    done: int
    total: int
    progress_updated: datetime
    owner: str
    epoch: int
    expires: datetime
    requires: str | None  # the names block as matched (see _block)
    error: str | None
    intent: Intent | None
    extensions: Any
    created: datetime
    updated: datetime


def _canonical_parts(text: str) -> _Parts | None:
    """The values of a record in the canonical layout, every check of :func:`_canonical` made (None: it gives None).

    Each member of the record's own is matched where the layout puts it, at
    most once (so no name can be a duplicate); ``spec``, ``checkpoint`` and
    ``extensions`` are scanned by the strict scanner, which refuses duplicate
    names inside them. Every instant is read here, so that one a regular
    expression passes but the calendar has not (a 13th month) raises
    ValueError here, as the record built from these parts would.
    """
    # A head seen before: the same text up to "id" is the same blocks (their names hold no quote, so
    # the first _ID_AT is the id's), and the rest of what _HEAD matches is matched after it.
    id_at = text.find(_ID_AT)
    blocks = _HEADS_SEEN.get(text[:id_at]) if id_at > 0 else None
    if blocks is not None:
        m = _AFTER_HEAD.match(text, id_at + len(_ID_AT))
        if m is None:
            return None
        job_id, kind, state = m.groups()
    else:
        m = _HEAD.match(text)
        if m is None:
            return None
        content_block, critical_block, job_id, kind, state = m.groups()
        blocks = _blocks(content_block, critical_block)
        if len(_HEADS_SEEN) < 256:
            _HEADS_SEEN[text[: m.start(3) - 1 - len(_ID_AT)]] = blocks  # the id's quote, _ID_AT, before it
    # The depth limit counts the record itself [JOB-E8]: an opaque value (and extensions)
    # holding fewer than MAX_DEPTH brackets, strings' included, cannot pass it.
    start = m.end()
    spec, end = wire._scan(text, start)
    if spec is None or text.count("{", start, end) + text.count("[", start, end) >= wire.MAX_DEPTH:
        return None
    checkpoint = None
    if text.startswith(_CHECKPOINT_AT, end):
        start = end + len(_CHECKPOINT_AT)
        checkpoint, end = wire._scan(text, start)
        if text.count("{", start, end) + text.count("[", start, end) >= wire.MAX_DEPTH:
            return None
    b = _BODY.match(text, end)
    if b is None:
        return None
    done, total, p_updated, owner, epoch, expires, requires, error, want, by, at = b.groups()
    end = b.end()
    extensions = None
    if text.startswith(_EXTENSIONS_AT, end):
        start = end + len(_EXTENSIONS_AT)
        extensions, end = wire._scan(text, start)
        if type(extensions) is not dict or not text.startswith(",\n", end):
            return None
        if text.count("{", start, end) + text.count("[", start, end) >= wire.MAX_DEPTH:
            return None
        for name in extensions:
            if not name.strip():
                return None
        end += 2
    t = _TAIL.match(text, end)
    if t is None:
        return None
    if "\\" in text:  # an escaped lone surrogate can only be in an opaque value here
        wire.check_surrogates(text, [spec, checkpoint, extensions])
    models = _models(blocks)
    if models is None:
        return None
    if not job_id.strip() or not kind.strip():
        return None
    done_n, epoch_n = int(done), int(epoch)
    total_n = 0 if total is None else int(total)
    if done_n > _INT64 or total_n > _INT64 or epoch_n > _INT64:
        return None
    iso = _fromiso if _Z == "Z" else _offset_iso  # a ValueError (a 13th month) sends the record to _decode
    created, updated = t.groups()
    intent = None if want is None else Intent(want, by or "", _time(at, "intent.at"))
    values = (
        models,
        job_id,
        kind,
        state,
        spec,
        checkpoint,
        done_n,
        total_n,
        iso(p_updated),
        owner,
        epoch_n,
        iso(expires),
        requires,
        error,
        intent,
        extensions,
        iso(created),
        iso(updated),
    )
    parts: _Parts = _new_parts(_Parts, values)  # tuple.__new__: the NamedTuple's own is a Python function
    return parts


#: The spec texts the strict scanner has passed in a finished record's place (:func:`_ended_fields`):
#: the same text passes again, so a store whose jobs repeat their specs scans each once. Bounded, as
#: :data:`_HEADS_SEEN` is; only a spec's text is kept, never its value (a record's own, and mutable).
_SPECS_PASSED: set[str] = set()
_REST_AT = ',\n  "progress": {\n'
#: The head of the last finished record :func:`_ended_fields` read with its blocks (one pair, replaced
#: whole: a thread reading it meanwhile never sees one's head with another's blocks), and its spec text:
#: the next record is mostly the same, and compared in place costs no copy of either.
_LAST: list[Any] = [("", None), ""]


def _ended_fields(text: str, job_id: str) -> tuple[Any, ...] | None:
    """A finished record's summary fields as ``summary_or_record`` gives them, read with one pattern less.

    For a record in the canonical layout whose head :func:`_canonical_parts`
    has met (:data:`_HEADS_SEEN`), named ``job_id``, in a terminal state,
    with neither checkpoint nor extensions nor any backslash: the fields
    ``jobctl.record.summary_tuple`` makes of its parts. Every check that
    function's reader makes is made here too -- the models understood, the
    spec scanned strictly (or its very text passed before), the depth, the
    integers' range, each of the four instants read by the calendar (a 13th
    month raises ValueError) and the intent's time -- and anything else
    returns None: the caller asks :func:`_canonical_parts`, which decides.
    Only the two instants a summary keeps become numbers, and no datetime,
    record or spec value is kept. tests/property/test_fast_decode.py compares
    the answers on mutated records.
    """
    last = _LAST
    head, blocks = last[0]
    # The last head again: _ID_AT right after it is the first in the text (the head holds none, and
    # its only newline is its first character), as text.find would find it.
    if head and text.startswith(head) and text.startswith(_ID_AT, len(head)):
        id_at = len(head)
    else:
        id_at = text.find(_ID_AT)
        blocks = _HEADS_SEEN.get(text[:id_at]) if id_at > 0 else None
        if blocks is None:
            return None
        last[0] = (text[:id_at], blocks)
    m = _ENDED_ON.match(text, id_at + len(_ID_AT))
    if m is None:
        return None
    read_id, kind, state = m.groups()
    if read_id != job_id or not job_id.strip() or not kind.strip() or "\\" in text:
        return None
    start = m.end()
    spec_text = last[1]
    if spec_text and text.startswith(spec_text, start) and text.startswith(_REST_AT, start + len(spec_text)):
        end = start + len(spec_text)  # the last spec passed, compared in place
    else:
        end = text.find(_REST_AT, start)
        if end < 0:
            return None
        spec_text = text[start:end]
        if spec_text not in _SPECS_PASSED:
            spec, end = wire._scan(text, start)
            if spec is None or text.count("{", start, end) + text.count("[", start, end) >= wire.MAX_DEPTH:
                return None
            if end != start + len(spec_text):
                spec_text = ""  # a spec holding the rest's opening: not remembered
            elif len(_SPECS_PASSED) < 256:
                _SPECS_PASSED.add(spec_text)  # the whole value, ended where the rest begins
        last[1] = spec_text
    r = _ENDED_REST.match(text, end)
    # _models' judgement, without the pair it makes: asked every time (understand()).
    if r is None or not blocks[2] or not roster._UNDERSTOOD.issuperset(blocks[1]):
        return None
    done, total, p_updated, owner, epoch, expires, _, error, _, at, created, updated = r.groups()
    done_n, epoch_n = int(done), int(epoch)
    total_n = 0 if total is None else int(total)
    if done_n > _INT64 or total_n > _INT64 or epoch_n > _INT64:
        return None
    iso = _fromiso if _Z == "Z" else _offset_iso  # a ValueError (a 13th month): the caller decides
    iso(p_updated)
    iso(updated)
    if at is not None:
        _time(at, "intent.at")
    intern = sys.intern
    return (
        job_id, intern(kind), intern(state), done_n, total_n, intern(owner), epoch_n, intern(error or ""), None,
        (iso(created) - _EPOCH) // _MICROSECOND, (iso(expires) - _EPOCH) // _MICROSECOND,
    )  # fmt: skip


def _canonical(text: str) -> Record | None:
    """:func:`_fast_decode` for a record in the canonical layout: fixed text by regex, opaque values by the scanner."""
    p = _canonical_parts(text)
    if p is None:
        return None
    models = p.models
    rec: Record = _new_record(Record)
    rec.content = list(models[0])
    rec.critical = list(models[1])
    rec.id = p.id
    rec.kind = p.kind
    rec.state = p.state
    rec.spec = spec = p.spec
    rec.checkpoint = checkpoint = p.checkpoint
    orig = rec._orig = {"spec": spec, "checkpoint": checkpoint}
    rec.progress = Progress(p.done, p.total, p.progress_updated)
    rec.lease = Lease(p.owner, p.epoch, p.expires)
    rec.intent = p.intent
    rec.envelope = rec.delegation = None
    rec.requires = [] if p.requires is None else _block(p.requires)
    error = p.error
    rec.error = error or ""
    rec._error_present = error == ""
    rec.extensions = {}
    extensions = p.extensions
    if extensions:
        for name, value in extensions.items():
            rec.extensions[name] = orig["x:" + name] = value
    rec.created_at = p.created
    rec.updated_at = p.updated
    rec._raw = {}
    rec._text = text
    rec._exposed = True
    return rec
