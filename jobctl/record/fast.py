"""The decoder's fast path: the common shape of record, read with fewer checks to make.

Every record jobctl reads goes through here first. It answers only when it
is sure :func:`jobctl.record.decoder._decode` would give the same record;
otherwise None, and the strict decoder decides (tests/property/test_fast_decode.py
holds the two to the same answers).
"""

from __future__ import annotations

from typing import Any

from .. import wire
from . import roster
from .canonical import _canonical
from .checks import _INT64, _INTENT_KEYS, _LEASE_KEYS, _PROGRESS_KEYS, _names, _str
from .model import _CANONICAL_START, _UNTIL_CANONICAL, Intent, Lease, Progress, Record
from .roster import _NEVER_CRITICAL, _TOP_KEYS, STATES, WANTS
from .times import _time

_new_record = object.__new__


def _fast_decode(text: str) -> Record | None:
    """The record :func:`_decode` gives for ``text``, or None when this path is not sure it would.

    Every record jobctl reads goes through here first: ``claim --next``,
    ``orphans`` and ``list`` on a store without a summary cache decode every
    record file. This path takes the common shape only -- a text that starts
    with ``{``, no more brackets than the depth limit allows, no envelope,
    step, recall or delegation, no legacy ``schema`` -- and runs the same
    scanner (duplicate names refused at every depth [JOB-E9]) and the same
    field helpers as :func:`_decode`, without the generality that costs a
    function call per absent field. Anything it does not expect, and every
    refusal, returns None: :func:`_decode` then decides, so its verdicts and
    their messages are the only ones there are. tests/property/test_fast_decode.py
    compares the two on the contract's vectors and on mutated records.
    """
    try:
        if text.startswith(_CANONICAL_START):
            if _UNTIL_CANONICAL[0]:
                _UNTIL_CANONICAL[0] -= 1
            else:
                rec = _canonical(text)
                if rec is not None:
                    return rec
        if text[:1] != "{" or text.count("{") + text.count("[") > wire.MAX_DEPTH:
            return None  # a deeper text needs check_text's exact count
        top, end = wire._scan(text, 0)
        if end != len(text) and text[end:].strip(" \t\n\r"):
            return None
        if "\\" in text:
            wire.check_surrogates(text, top)  # an escaped lone surrogate needs a backslash
        return _fast_fields(top, text)
    # Whatever goes wrong here -- a refusal, a number past int_max_str_digits, a nesting
    # the C scanner's recursion guard stops -- _decode meets again and reports in its words.
    except Exception:
        return None


def _fast_fields(top: Any, text: str) -> Record | None:
    """The fields of :func:`_decode` for the common shape of record (see :func:`_fast_decode`)."""
    if type(top) is not dict:
        return None
    get = top.get
    models = _fast_models(top)
    if models is None:
        return None
    content, critical = models

    rec: Record = _new_record(Record)
    rec.content = content
    rec.critical = critical
    rec._raw = {}
    rec._text = text
    rec._exposed = True
    rec.envelope = rec.delegation = None
    intent = get("intent")
    if intent is not None:
        if type(intent) is not dict or not _INTENT_KEYS.issuperset(intent):
            return None
        want = intent.get("want")
        if want not in WANTS:
            return None
        rec.intent = Intent(want, _str(intent.get("by"), "intent.by"), _time(intent.get("at"), "intent.at"))
    else:
        rec.intent = None
    job_id = get("id")
    kind = get("kind")
    state = get("state")
    if type(job_id) is not str or type(kind) is not str or not job_id.strip() or not kind.strip():
        return None
    if state not in STATES:
        return None
    rec.id = job_id
    rec.kind = kind
    rec.state = state
    spec = get("spec")
    if spec is None:
        return None
    checkpoint = get("checkpoint")
    rec.spec = spec
    rec.checkpoint = checkpoint
    orig = rec._orig = {"spec": spec, "checkpoint": checkpoint}

    progress = get("progress")
    if progress is None:
        progress = {}
    elif type(progress) is not dict or not _PROGRESS_KEYS.issuperset(progress) or progress.get("step") is not None:
        return None
    done = progress.get("done", 0)
    total = progress.get("total", 0)
    if type(done) is not int or type(total) is not int or not 0 <= done <= _INT64 or not 0 <= total <= _INT64:
        return None  # null among them too: _decode reads it as 0
    rec.progress = Progress(done, total, _time(progress.get("updated_at"), "progress.updated_at"))
    lease = get("lease")
    if lease is None:
        lease = {}
    elif type(lease) is not dict or not _LEASE_KEYS.issuperset(lease) or lease.get("recall") is not None:
        return None
    owner = lease.get("owner", "")
    epoch = lease.get("epoch", 0)
    if type(owner) is not str or type(epoch) is not int or not 0 <= epoch <= _INT64:
        return None
    rec.lease = Lease(owner, epoch, _time(lease.get("expires_at"), "lease.expires_at"))
    requires = get("requires")
    rec.requires = [] if requires is None else list(_names(requires, "requires"))
    error = get("error")
    if error is None:
        rec.error = ""
    elif type(error) is str:
        rec.error = error
    else:
        return None
    rec._error_present = "error" in top and not rec.error
    extensions = get("extensions")
    rec.extensions = {}
    if extensions is not None:
        if type(extensions) is not dict:
            return None
        for name, value in extensions.items():
            if not name.strip():
                return None
            rec.extensions[name] = orig["x:" + name] = value
    rec.created_at = _time(get("created_at"), "created_at")
    rec.updated_at = _time(get("updated_at"), "updated_at")
    return rec


def _fast_models(top: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """``content`` and the ``critical`` kept, as :func:`_decode` judges them, for the common shape; else None."""
    get = top.get
    content = get("content")
    if type(content) is not list or not content:
        return None  # a legacy record, or one that says nothing of its content
    for name in content:
        if type(name) is not str:
            return None
    given = get("critical")
    if given is None:
        given = []
    elif type(given) is not list:
        return None
    critical = []
    for name in given:
        if type(name) is not str:
            return None
        if name in _NEVER_CRITICAL:
            continue
        if name not in roster._UNDERSTOOD or name not in content:
            return None
        critical.append(name)
    if not _TOP_KEYS.issuperset(top):
        return None
    for rare in ("envelope", "delegation"):
        if get(rare) is not None:
            return None
    return content, critical
