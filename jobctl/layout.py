"""Which names under a store root belong to the file binding [JOB-W2]."""

from __future__ import annotations

__all__ = ["reserved", "root_name"]


def _segments(rel: str) -> list[str]:
    out: list[str] = []
    for part in rel.replace("\\", "/").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            else:
                return []  # popping past the root names nothing
            continue
        out.append(part)
    return out


def _fold(segment: str) -> str:
    # The same on every OS: a name Windows would treat as the reserved one
    # ("JOBS", "jobs. ") must be reserved everywhere.
    trimmed = segment.strip()
    stripped = trimmed.rstrip(". ")
    return (stripped or trimmed).lower()


def reserved(owner: str, rel: str) -> bool:
    """Whether ``rel`` (relative to the root) names part of the binding's own layout.

    ``jobs/`` is reserved, and ``work/`` except ``work/<owner>/...``; an empty
    owner reserves all of ``work/``. Like Go (and unlike upstream's Python), the
    root's ``services.json`` is reserved too.
    """
    segments = [_fold(s) for s in _segments(rel)]
    if not segments:
        return False
    first = segments[0]
    if first == "jobs":
        return True
    if first == "work":
        owner_folded = _fold(owner) if owner else ""
        return not (owner_folded and len(segments) > 1 and segments[1] == owner_folded)
    return len(segments) == 1 and first == "services.json"


def root_name(rel: str) -> str:
    """The single folded segment when ``rel`` names something directly in the root, else ``""``."""
    segments = _segments(rel)
    return _fold(segments[0]) if len(segments) == 1 else ""
