"""The record's model: plain slotted classes, a record's opaque values kept as read.

Pure: no I/O and no validation (:mod:`.checks` says what a value must be).
A record read from disk keeps the text it came from, so an opaque value a
caller leaves alone is written back byte for byte.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from .. import wire
from .roster import TERMINAL

#: How every conforming writer opens a record: the canonical layout [JOB-E1].
_CANONICAL_START = '{\n  "content": [\n'
#: Records decoded before the canonical path (:mod:`.canonical`) is taken: compiling its patterns
#: costs a millisecond, more than it saves a command that reads a record or two (cron, shell loops).
_UNTIL_CANONICAL = [16]
_OPAQUE_AT: re.Pattern[str] = wire.lazy_pattern(globals(), "_OPAQUE_AT", r'\n  "(spec|checkpoint|extensions)": ')
_OPAQUE_NAMES = frozenset(("spec", "checkpoint", "extensions"))


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


def is_orphan(rec: Record, now: datetime) -> bool:
    """The adoption rule of [JOB-I11] [JOB-I12] [JOB-T2], for one record at ``now``."""
    if rec.terminal or held(rec.lease, now) or rec.state == "transferred":
        return False
    return not rec.paused or rec.state == "running"
