"""The names a record may carry: states, intents, the models of the contract and jobctl's own keys.

What this process *understands* -- the critical models it honours -- is
kept here too (:func:`understand`, :func:`known_models`): the decoders and the
encoder ask it each time, so a model declared later is honoured at once.
"""

from __future__ import annotations

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


def understand(name: str) -> None:
    """Declare that this process honours the extension ``name`` when it is critical."""
    _UNDERSTOOD.add(name)
    _KNOWN.clear()


_KNOWN: list[frozenset[str]] = []


def known_models() -> frozenset[str]:
    """The critical models this process understands; the same object until :func:`understand` adds one."""
    if not _KNOWN:
        _KNOWN.append(frozenset(_UNDERSTOOD))
    return _KNOWN[0]
