"""Which jobs a listing shows: the filters ``jobctl list`` and ``GET /api/jobs`` share, read one way.

``--state running,pending`` and ``?state=running,pending`` are one list,
parsed here, so the command line and the API take and refuse the same text.
Standard library only: ``list`` imports this, and its start-up is a script's latency.
"""

from __future__ import annotations

from .errors import Invalid
from .record import STATES

__all__ = ["parse_states"]


def parse_states(text: str, what: str = "state") -> frozenset[str]:
    """The states a comma-separated list names (``running,pending``); ``invalid`` naming ``what`` otherwise.

    Spaces around a name are ignored; an empty list, an empty name between
    commas and a word that is not a state are refused, so that a typo never
    widens a listing to every job.
    """
    names = [part.strip() for part in text.split(",")]
    if not any(names):
        raise Invalid(f"{what} names no state (give one or more of {', '.join(STATES)}, separated by commas)")
    for name in names:
        if name not in STATES:
            shown = "an empty name" if not name else repr(name)
            raise Invalid(f"{what} {text!r}: {shown} is not one of {', '.join(STATES)}")
    return frozenset(names)
