"""What one worker may take next under its own limits.

``worker --limit KIND=N``: at most N jobs of that kind run in this worker at
once; its other slots take other kinds. Beside that, a worker never picks two
jobs of one exclusive key at once (the claim would refuse the second; picking
it would only cost a slot a refused claim). A :class:`Tally` counts what the
worker runs and has picked ahead; the loop asks it of each candidate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from .exclusive import exclusive_of
from .record import Record

__all__ = ["Quota", "Tally"]


class Quota:
    """A worker's limits by kind (``{kind: N}``, each N at least 1)."""

    def __init__(self, limits: Mapping[str, int] | None = None) -> None:
        self.limits: dict[str, int] = {}
        for kind, most in (limits or {}).items():
            if isinstance(most, bool) or not isinstance(most, int) or most < 1:
                raise ValueError(f"the limit of kind {kind!r} must be a whole number of at least 1, not {most!r}")
            self.limits[kind] = most

    def tally(self, running: Iterable[Record]) -> Tally:
        """A count of ``running`` (what the worker runs or has picked ahead), to judge the next picks by."""
        out = Tally(self.limits)
        for rec in running:
            out.add(rec)
        return out


class Tally:
    """How many jobs of each limited kind, and which exclusive keys, a worker has taken."""

    def __init__(self, limits: Mapping[str, int]) -> None:
        self._limits = limits
        self._kinds: Counter[str] = Counter()
        self._keys: set[str] = set()

    def add(self, rec: Record) -> None:
        """Count ``rec`` as taken."""
        if rec.kind in self._limits:
            self._kinds[rec.kind] += 1
        key = exclusive_of(rec)
        if key is not None:
            self._keys.add(key)

    def blocks(self, rec: Record) -> bool:
        """Whether taking ``rec`` would pass its kind's limit, or take a key this worker's jobs hold."""
        most = self._limits.get(rec.kind)
        if most is not None and self._kinds[rec.kind] >= most:
            return True
        key = exclusive_of(rec)
        return key is not None and key in self._keys
