"""The record: its model, its validation, and its exact bytes on disk.

Pure: no I/O. :func:`decode` turns a file's bytes into a :class:`Record` (or
refuses with ``Invalid``/``UnknownSchema``); :func:`encode` turns a record back
into the canonical bytes every upstream writer produces [JOB-E1] [JOB-E6],
re-deriving ``content``/``critical`` on the way [JOB-D2].
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, NamedTuple

from . import wire
from .errors import Invalid, UnknownSchema

__all__ = [
    "Record",
    "Progress",
    "Step",
    "Lease",
    "Recall",
    "Delegation",
    "Intent",
    "Envelope",
    "STATES",
    "TERMINAL",
    "WANTS",
    "MODELS",
    "BASE",
    "decode",
    "encode",
    "prepare",
    "Prepared",
    "given_checkpoint",
    "restore",
    "format_time",
    "parse_time",
    "ZERO_TIME",
    "GO_ZERO_TIME",
    "is_zero",
    "known_models",
    "understand",
    "held",
]

UTC = timezone.utc
#: The unset instant jobctl writes (a never-claimed lease's ``expires_at``): the
#: Unix epoch, as upstream's Python and C++ writers spell it. Go writes year one
#: instead, which the C++ reader refuses (DIGEST §10.4); a year-one value read
#: from disk is kept as read, but jobctl never creates one.
ZERO_TIME = datetime(1970, 1, 1, tzinfo=UTC)
#: Go's spelling of the unset instant; read, never written by jobctl.
GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)

STATES = ("pending", "running", "transferred", "complete", "failed", "cancelled")
TERMINAL = frozenset(("complete", "failed", "cancelled"))
WANTS = ("run", "pause", "cancel")

BASE = "abstraction.job/base@1"
INTENT = "abstraction.job/intent@1"
DELEGATION = "abstraction.job/delegation@1"
ENVELOPE = "abstraction.job/envelope@1"
STEP = "abstraction.job/step@1"
TERMINAL_MODEL = "abstraction.job/terminal@1"
RECALL = "abstraction.job/recall@1"
RANGES = "abstraction.download/ranges@1"

#: The normative roster: name -> may it be critical. [JOB-D1]..[JOB-D10]
MODELS: dict[str, bool] = {
    BASE: True,
    INTENT: True,
    DELEGATION: True,
    ENVELOPE: True,
    STEP: False,
    TERMINAL_MODEL: True,
    RECALL: True,
    RANGES: False,
}
#: jobctl's own extension keys (see jobctl.schedule). Dependencies are declared
#: critical, so a reader that does not understand them refuses the job rather
#: than running it before what it waits for.
RETRY = "jobctl.run/retry@1"
AFTER = "jobctl.run/after@1"
PIPELINE = "jobctl.run/pipeline@1"
RESULT = "jobctl.run/result@1"
_NEVER_CRITICAL = frozenset(name for name, ok in MODELS.items() if not ok)
_CARRIED = (RANGES,)
# Extension names this process understands well enough to honour when they are
# marked critical. jobctl's own scheduling keys register here.
_UNDERSTOOD: set[str] = {*MODELS, AFTER}

_TOP_KEYS = frozenset(
    (
        "content",
        "critical",
        "id",
        "kind",
        "envelope",
        "state",
        "spec",
        "checkpoint",
        "progress",
        "lease",
        "delegation",
        "requires",
        "error",
        "intent",
        "extensions",
        "created_at",
        "updated_at",
        "schema",
    )
)
_LEGACY = {
    3: ([BASE], [BASE]),
    4: ([BASE, INTENT], [BASE, INTENT]),
    5: ([BASE, INTENT, STEP], [BASE, INTENT]),
}
_INT64 = (1 << 63) - 1
_CANONICAL_START = '{\n  "content": [\n'
_OPAQUE_AT: re.Pattern[str] = wire.lazy_pattern(globals(), "_OPAQUE_AT", r'\n  "(spec|checkpoint|extensions)": ')
_OPAQUE_NAMES = frozenset(("spec", "checkpoint", "extensions"))


def understand(name: str) -> None:
    """Declare that this process honours the extension ``name`` when it is critical."""
    _UNDERSTOOD.add(name)
    _KNOWN.clear()


#: known_models()'s answer while nothing more is understood (one frozenset, not one a call).
_KNOWN: list[frozenset[str]] = []


def known_models() -> frozenset[str]:
    """The critical models this process understands; the same object until :func:`understand` adds one."""
    if not _KNOWN:
        _KNOWN.append(frozenset(_UNDERSTOOD))
    return _KNOWN[0]


# -- timestamps [JOB-E5] ---------------------------------------------------

_RFC3339: re.Pattern[str] = wire.lazy_pattern(
    globals(),
    "_RFC3339",
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})"
    r"(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})\Z",
)


def parse_time(text: Any, what: str) -> datetime | None:
    """Read an RFC 3339 instant leniently; ``""``/``null`` mean unset (None)."""
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise Invalid(f"{what} is not a timestamp")
    if len(text) == 27 and text[26] == "Z" and text[10] == "T" and text[19] == ".":
        try:
            return datetime.fromisoformat(text[:26] + "+00:00")
        except ValueError:
            pass
    m = _RFC3339.match(text)
    if m is None:
        raise Invalid(f"{what} {text!r} is not an RFC 3339 timestamp")
    year, month, day, hour, minute, second, frac, zone = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    try:
        when = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=UTC)
        if zone not in ("Z", "z"):
            sign = 1 if zone[0] == "+" else -1
            when -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    except (ValueError, OverflowError):
        raise Invalid(f"{what} {text!r} is not a valid instant") from None
    return when


def is_zero(when: datetime | None) -> bool:
    """Whether ``when`` is an unset instant in any writer's spelling (absent, 1970 or year one)."""
    return when is None or when in (ZERO_TIME, GO_ZERO_TIME)


@lru_cache(maxsize=1024)
def format_time(when: datetime | None) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC, six digits always; None is :data:`ZERO_TIME` (1970)."""
    if when is None:
        when = ZERO_TIME
    if when.tzinfo is None:
        raise Invalid("timestamps must be timezone-aware")
    if when.utcoffset():
        when = when.astimezone(UTC)
    return (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}T"
        f"{when.hour:02d}:{when.minute:02d}:{when.second:02d}.{when.microsecond:06d}Z"
    )


# -- the model ------------------------------------------------------------


class _Model:
    """Plain slotted classes with value equality, a repr and ``replace``.

    Not dataclasses: generating nine of them costs more than the rest of a
    piped ``jobctl submit`` start-up, and these are simple enough to write out.
    """

    __slots__: tuple[str, ...] = ()
    _repr: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable values

    def __repr__(self) -> str:
        names = self._repr or self.__slots__
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"

    def replace(self, **changes: Any) -> Any:
        """A shallow copy with ``changes`` applied."""
        clone = object.__new__(type(self))
        for name in self.__slots__:
            object.__setattr__(clone, name, changes.pop(name) if name in changes else getattr(self, name))
        if changes:
            raise TypeError(f"{type(self).__name__} has no field {next(iter(changes))!r}")
        return clone


class Step(_Model):
    __slots__ = ("name", "ordinal", "of", "done", "total")

    def __init__(self, name: str, ordinal: int, of: int = 0, done: int = 0, total: int = 0) -> None:
        self.name = name
        self.ordinal = ordinal
        self.of = of
        self.done = done
        self.total = total


class Progress(_Model):
    __slots__ = ("done", "total", "updated_at", "step")

    def __init__(
        self, done: int = 0, total: int = 0, updated_at: datetime | None = None, step: Step | None = None
    ) -> None:
        self.done = done
        self.total = total
        self.updated_at = updated_at
        self.step = step


class Recall(_Model):
    __slots__ = ("reason", "at", "until", "by")

    def __init__(self, reason: str, at: datetime | None = None, until: datetime | None = None, by: str = "") -> None:
        self.reason = reason
        self.at = at
        self.until = until
        self.by = by


class Lease(_Model):
    __slots__ = ("owner", "epoch", "expires_at", "recall")

    def __init__(
        self, owner: str = "", epoch: int = 0, expires_at: datetime | None = None, recall: Recall | None = None
    ) -> None:
        self.owner = owner
        self.epoch = epoch
        self.expires_at = expires_at
        self.recall = recall


class Delegation(_Model):
    __slots__ = ("system", "external_id", "delivered")

    def __init__(self, system: str, external_id: str, delivered: bool = False) -> None:
        self.system = system
        self.external_id = external_id
        self.delivered = delivered


class Intent(_Model):
    __slots__ = ("want", "by", "at")

    def __init__(self, want: str, by: str = "", at: datetime | None = None) -> None:
        self.want = want
        self.by = by
        self.at = at


class Envelope(_Model):
    __slots__ = ("schema", "actions")

    def __init__(self, schema: str, actions: list[str] | None = None) -> None:
        self.schema = schema
        self.actions = [] if actions is None else actions


class Record(_Model):
    """One job. ``spec``, ``checkpoint`` and ``extensions`` values are opaque.

    A caller may set them to ordinary dicts and lists. Values read from disk
    keep their exact bytes until they are replaced or changed in place.
    ``content`` and ``critical`` are the lists as read; they are re-derived on
    every write and need not be set by a caller. Records compare by identity.
    """

    __slots__ = (
        "id", "kind", "spec", "checkpoint", "state", "progress", "lease", "intent", "error", "extensions",
        "requires", "delegation", "envelope", "created_at", "updated_at", "content", "critical",
        # slot -> the value's text as read ("spec", "checkpoint", or "x:" + extension
        # key), filled from _text on first need: a listing never pays for it.
        "_raw", "_text", "_error_present",
        # The opaque objects decode handed out, and whether anybody outside the
        # store may hold them. While nobody does, an identical object is known
        # unchanged and its text is reused without a comparison.
        "_orig", "_exposed",
    )  # fmt: skip
    _repr = __slots__[:17]

    def __init__(
        self,
        id: str = "",
        kind: str = "",
        spec: Any = None,
        checkpoint: Any = None,
        state: str = "pending",
        progress: Progress | None = None,
        lease: Lease | None = None,
        intent: Intent | None = None,
        error: str = "",
        extensions: dict[str, Any] | None = None,
        requires: list[str] | None = None,
        delegation: Delegation | None = None,
        envelope: Envelope | None = None,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
        content: list[str] | None = None,
        critical: list[str] | None = None,
    ) -> None:
        self.id = id
        self.kind = kind
        self.spec = spec
        self.checkpoint = checkpoint
        self.state = state
        self.progress = Progress() if progress is None else progress
        self.lease = Lease() if lease is None else lease
        self.intent = intent
        self.error = error
        self.extensions: dict[str, Any] = {} if extensions is None else extensions
        self.requires: list[str] = [] if requires is None else requires
        self.delegation = delegation
        self.envelope = envelope
        self.created_at = created_at
        self.updated_at = updated_at
        self.content: list[str] = [] if content is None else content
        self.critical: list[str] = [] if critical is None else critical
        self._raw: dict[str, str] = {}
        self._text: str | None = None
        self._error_present = False
        self._orig: dict[str, Any] = {}
        self._exposed = True

    __eq__ = object.__eq__  # a record is a handle on a job, not a value
    __hash__ = object.__hash__  # type: ignore[assignment]

    def _load_raw(self) -> None:
        text, self._text = self._text, None
        if text is None:
            return
        spans: dict[str, tuple[int, int]] = {}
        if text.startswith(_CANONICAL_START):
            # Every conforming writer puts top-level members at two spaces, and
            # a raw newline cannot occur inside a string, so these are the
            # members themselves; the C scanner finds where each value ends.
            for m in _OPAQUE_AT.finditer(text):
                name = m.group(1)
                if name in spans:
                    spans.clear()
                    break
                value, end = wire.scan_value(text, m.end())
                if value != (self._orig.get(name) if name != "extensions" else self._ext_orig()):
                    spans.clear()
                    break
                spans[name] = (m.end(), end)
        if not spans:
            members, _ = wire.parse_object_members(text, wire._WS.match(text).end(), "record")  # type: ignore[union-attr]
            spans = {name: (start, end) for name, _v, start, end in members if name in _OPAQUE_NAMES}
        for name, (start, end) in spans.items():
            if name != "extensions":
                self._raw[name] = text[start:end]
            elif text[start] == "{":
                for key, _v, vs, ve in wire.parse_object_members(text, start, "extensions")[0]:
                    self._raw["x:" + key] = text[vs:ve]

    def _ext_orig(self) -> dict[str, Any]:
        return {k[2:]: v for k, v in self._orig.items() if k.startswith("x:")}

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def want(self) -> str:
        """The intent's word; absent intent reads ``run`` [JOB-I2]."""
        return self.intent.want if self.intent is not None else "run"

    @property
    def paused(self) -> bool:
        return self.want == "pause" and not self.terminal

    def opaque_text(self, slot: str) -> str | None:
        """The compact text of ``spec``, ``checkpoint`` or ``x:<extension key>``.

        Exactly as read when the value is unchanged; freshly serialised when the
        caller replaced or changed it. None when the field is absent.
        """
        got = self._opaque(slot)
        return None if got is None else wire.compact(got[0]) if got[1] else got[0]

    def _opaque(self, slot: str) -> tuple[str, bool] | None:
        """``(text, as_read)``: the span as read (any whitespace) when unchanged, else compact."""
        if slot == "spec":
            value = self.spec
        elif slot == "checkpoint":
            value = self.checkpoint
        else:
            value = self.extensions.get(slot[2:], _ABSENT)
            if value is _ABSENT:
                return None
        if value is None and slot != "spec" and slot[:2] != "x:":
            return None
        if isinstance(value, wire.Raw):
            return value.text, False
        if self._text is not None:
            self._load_raw()
        raw = self._raw.get(slot)
        if raw is not None:
            if not self._exposed and value is self._orig.get(slot):
                return raw, True
            if _same_value(raw, value):
                return raw, True
        return wire.dumps_compact(value), False

    def checkpoint_text(self) -> str | None:
        """The checkpoint compact (spelling kept), or None when there is none."""
        return self.opaque_text("checkpoint")


_ABSENT = object()


def _same_value(raw: str, value: Any) -> bool:
    try:
        return wire.strict_equal(wire.parse_value(raw), value)
    except Exception:
        return False


def held(lease: Lease, now: datetime) -> bool:
    """A lease is held while it has an owner and has not expired."""
    return lease.owner != "" and lease.expires_at is not None and now < lease.expires_at


# -- decode ---------------------------------------------------------------


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


_new_record = object.__new__
_new_parts = tuple.__new__
_fromiso = datetime.fromisoformat


#: From 3.11 ``fromisoformat`` reads the ``Z`` itself; before, it must be spelt as an offset.
_Z = "Z" if sys.version_info >= (3, 11) else "+00:00"


def _offset_iso(value: str) -> datetime:
    return _fromiso(value[:26] + "+00:00")


def _time(value: Any, what: str) -> datetime | None:
    """:func:`parse_time`, its common case (every conforming writer's spelling) inlined."""
    if type(value) is str and len(value) == 27 and value[26] == "Z" and value[10] == "T" and value[19] == ".":
        # The same instant parse_time reads from value[:26] + "+00:00"; a ValueError sends
        # the record to _decode, which says why.
        return _fromiso(value if _Z == "Z" else value[:26] + _Z)
    return parse_time(value, what)


#: Records decoded before the canonical path is taken: compiling its patterns costs a
#: millisecond, more than it saves a command that reads a record or two (cron, shell loops).
_UNTIL_CANONICAL = [16]


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
    if not got[2] or not _UNDERSTOOD.issuperset(got[1]):
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


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def micros(when: datetime | None) -> int:
    """``when`` in whole microseconds since 1970 UTC; 0 for None. Orders exactly as the datetimes do."""
    return 0 if when is None else (when - _EPOCH) // _MICROSECOND


def moment(us: int) -> datetime:
    """The inverse of :func:`micros`."""
    return _EPOCH + us * _MICROSECOND


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
            text = data if isinstance(data, str) else wire.utf8_text(data, "record")
            parts = _canonical_parts(text) if text.startswith(_CANONICAL_START) else None
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
            return summary_tuple(
                parts.id, parts.kind, parts.state, parts.done, parts.total, parts.owner, parts.epoch,
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


def _fast_fields(top: Any, text: str) -> Record | None:
    """The fields of :func:`_decode` for the common shape of record (see :func:`_fast_decode`)."""
    if type(top) is not dict:
        return None
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
        if name not in _UNDERSTOOD or name not in content:
            return None
        critical.append(name)
    if not _TOP_KEYS.issuperset(top):
        return None
    for rare in ("envelope", "delegation"):
        if get(rare) is not None:
            return None

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
    text = wire.utf8_text(data, "record") if isinstance(data, bytes) else data
    wire.check_text(text)
    start = wire._WS.match(text).end()  # type: ignore[union-attr]
    if start >= len(text) or text[start] != "{":
        raise Invalid(_not_an_object(text, start))
    top, end = wire.scan_value(text, start)  # duplicate names refused at every depth [JOB-E9]
    if wire._WS.match(text, end).end() != len(text):  # type: ignore[union-attr]
        raise Invalid("extra data after the record")
    wire.check_surrogates(text, top)

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
        if name not in _UNDERSTOOD:
            raise UnknownSchema(f"critical model {name} is unknown to this reader")
    for name in critical:
        if name not in content:
            raise Invalid(f"critical model {name} is not in content")
    if not _TOP_KEYS.issuperset(top):
        raise Invalid(f"unknown field {next(key for key in top if key not in _TOP_KEYS)}")

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

    progress = _obj(top.get("progress"), "progress", _PROGRESS_KEYS) or {}
    rec.progress = Progress(
        _int(progress.get("done"), "progress.done"),
        _int(progress.get("total"), "progress.total"),
        parse_time(progress.get("updated_at"), "progress.updated_at"),
    )
    step = _obj(progress.get("step"), "progress.step", _STEP_KEYS)
    if step is not None:
        rec.progress.step = Step(
            _str(step.get("name"), "progress.step.name"),
            _int(step.get("ordinal"), "progress.step.ordinal"),
            _int(step.get("of"), "progress.step.of"),
            _int(step.get("done"), "progress.step.done"),
            _int(step.get("total"), "progress.step.total"),
        )
        _check_step(rec.progress.step)

    lease = _obj(top.get("lease"), "lease", _LEASE_KEYS) or {}
    rec.lease = Lease(
        _str(lease.get("owner"), "lease.owner"),
        _int(lease.get("epoch"), "lease.epoch"),
        parse_time(lease.get("expires_at"), "lease.expires_at"),
    )
    recall = _obj(lease.get("recall"), "lease.recall", _RECALL_KEYS)
    if recall is not None:
        rec.lease.recall = Recall(
            _str(recall.get("reason"), "lease.recall.reason"),
            parse_time(recall.get("at"), "lease.recall.at"),
            parse_time(recall.get("until"), "lease.recall.until"),
            _str(recall.get("by"), "lease.recall.by"),
        )
        _check_recall(rec.lease.recall)

    delegation = _obj(top.get("delegation"), "delegation", _DELEGATION_KEYS)
    if delegation is not None:
        delivered = delegation.get("delivered")
        if delivered is not None and not isinstance(delivered, bool):
            raise Invalid("delegation.delivered is not a boolean")
        rec.delegation = Delegation(
            _str(delegation.get("system"), "delegation.system"),
            _str(delegation.get("external_id"), "delegation.external_id"),
            bool(delivered),
        )
        _check_delegation(rec.delegation)

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


# -- validation shared by decode and encode ---------------------------------


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


# -- encode -----------------------------------------------------------------


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


class Prepared(NamedTuple):
    """A record's values as :func:`encode` writes them, every check made: what the layout and a store need.

    ``spec``, ``checkpoint`` and each extension value are compact texts
    (spelling kept); ``*_kept`` says the text is the one read (so the value a
    caller holds may be kept); ``ranged`` that the checkpoint carries
    ``verified`` ranges [JOB-C1]; ``content``/``critical`` are the lists to
    write (derived afresh unless the encode is faithful).
    """

    spec: str
    spec_kept: bool
    checkpoint: str | None
    checkpoint_kept: bool
    ranged: bool
    extensions: list[tuple[str, str, bool]]  # (key, compact text, kept), sorted by key
    content: list[str]
    critical: list[str]


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
        if name not in _UNDERSTOOD:
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
            if name not in _UNDERSTOOD:
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
