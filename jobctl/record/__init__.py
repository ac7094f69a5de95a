"""The record: its model, its validation, and its exact bytes on disk.

Pure: no I/O. :func:`decode` turns a file's bytes into a :class:`Record` (or
refuses with ``Invalid``/``UnknownSchema``); :func:`encode` turns a record back
into the canonical bytes every upstream writer produces [JOB-E1] [JOB-E6],
re-deriving ``content``/``critical`` on the way [JOB-D2].

One idea a module, in the order they import one another:

- :mod:`.roster`: states, intents, model names; what this process understands;
- :mod:`.times`: instants as a record spells them;
- :mod:`.model`: :class:`Record` and its parts;
- :mod:`.checks`: what a value must be, shared by decoder and encoder;
- :mod:`.canonical` and :mod:`.fast`: the decoder's fast paths (the canonical
  layout by regular expression, then the common shape);
- :mod:`.decoder`: the strict decoder, whose verdicts are the only ones;
- :mod:`.finished`: a finished record's summary fields straight from its text;
- :mod:`.encoder`: the one encoder of the canonical bytes;
- :mod:`.stored`: a record from the values a store keeps in columns.

Every name is re-exported here: callers import from ``jobctl.record``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # The private names the decoder tests reach (tests/property/test_fast_decode.py), re-exported as they were.
    from .canonical import _HEADS_SEEN as _HEADS_SEEN
    from .canonical import _ID_AT as _ID_AT
    from .canonical import _canonical as _canonical
    from .canonical import _canonical_parts as _canonical_parts
    from .checks import BASE_ACTIONS, ask, canonical_ranges, check_envelope, split_action, valid_schema
    from .decoder import _decode as _decode
    from .decoder import decode
    from .encoder import Prepared, derive, encode, given_checkpoint, prepare
    from .fast import _fast_decode as _fast_decode
    from .finished import summary_or_record, summary_tuple
    from .model import _UNTIL_CANONICAL as _UNTIL_CANONICAL
    from .model import Delegation, Envelope, Intent, Lease, Progress, Recall, Record, Step, held, is_orphan
    from .model import _Model as _Model
    from .roster import (
        AFTER,
        BASE,
        DELEGATION,
        ENVELOPE,
        INTENT,
        MODELS,
        PIPELINE,
        RANGES,
        RECALL,
        RESULT,
        RETRY,
        STATES,
        STEP,
        TERMINAL,
        TERMINAL_MODEL,
        WANTS,
        known_models,
        understand,
    )
    from .stored import restore
    from .times import GO_ZERO_TIME, UTC, ZERO_TIME, format_time, is_zero, micros, moment, parse_time

#: Where each name lives: loaded on first use (PEP 562), so that a command
#: which only encodes (``submit``) does not import the decoder's fast paths,
#: and one that only decodes does not import the encoder.
_FROM = {
    "_HEADS_SEEN": "canonical",
    "_ID_AT": "canonical",
    "_canonical": "canonical",
    "_canonical_parts": "canonical",
    "BASE_ACTIONS": "checks",
    "ask": "checks",
    "canonical_ranges": "checks",
    "check_envelope": "checks",
    "split_action": "checks",
    "valid_schema": "checks",
    "_decode": "decoder",
    "decode": "decoder",
    "Prepared": "encoder",
    "derive": "encoder",
    "encode": "encoder",
    "given_checkpoint": "encoder",
    "prepare": "encoder",
    "_UNTIL_CANONICAL": "model",
    "_fast_decode": "fast",
    "summary_or_record": "finished",
    "summary_tuple": "finished",
    "Delegation": "model",
    "Envelope": "model",
    "Intent": "model",
    "Lease": "model",
    "Progress": "model",
    "Recall": "model",
    "Record": "model",
    "Step": "model",
    "held": "model",
    "is_orphan": "model",
    "_Model": "model",
    "AFTER": "roster",
    "BASE": "roster",
    "DELEGATION": "roster",
    "ENVELOPE": "roster",
    "INTENT": "roster",
    "MODELS": "roster",
    "PIPELINE": "roster",
    "RANGES": "roster",
    "RECALL": "roster",
    "RESULT": "roster",
    "RETRY": "roster",
    "STATES": "roster",
    "STEP": "roster",
    "TERMINAL": "roster",
    "TERMINAL_MODEL": "roster",
    "WANTS": "roster",
    "known_models": "roster",
    "understand": "roster",
    "restore": "stored",
    "GO_ZERO_TIME": "times",
    "UTC": "times",
    "ZERO_TIME": "times",
    "format_time": "times",
    "is_zero": "times",
    "micros": "times",
    "moment": "times",
    "parse_time": "times",
}


def __getattr__(name: str) -> object:
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM))


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
    "is_orphan",
    # also imported from here across the project
    "UTC",
    "INTENT",
    "DELEGATION",
    "ENVELOPE",
    "STEP",
    "TERMINAL_MODEL",
    "RECALL",
    "RANGES",
    "RETRY",
    "AFTER",
    "PIPELINE",
    "RESULT",
    "BASE_ACTIONS",
    "ask",
    "canonical_ranges",
    "check_envelope",
    "split_action",
    "valid_schema",
    "derive",
    "micros",
    "moment",
    "summary_or_record",
    "summary_tuple",
]
