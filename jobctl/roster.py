"""What running workers handle: a worker's own word kept current, and the judgement a view makes of all of them.

A worker announces the kinds it runs (:meth:`jobctl.store.base.Store.announce`)
with an expiry, renews the word from its loop, at most every third of it, and
takes it back when it stops claiming; a worker killed outright leaves it to
expire. :class:`Roster` is what the live words say of a pending job: that no
running worker handles its kind -- only when at least one worker has said
what it handles, since a store where none has cannot tell.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from .errors import JobError
from .record import Record
from .store.base import Announcement

__all__ = [
    "Roster",
    "UNKNOWN",
    "Announcer",
    "AnnounceStore",
    "roster_of",
    "roster_for",
    "announce_ttl",
    "unhandled_note",
]

#: The longest an announcement lasts past its last renewal: a killed worker is forgotten this soon at most.
LONGEST = 60.0


class AnnounceStore(Protocol):
    def announce(self, owner: str, kinds: Iterable[str], ttl_seconds: float) -> None: ...
    def withdraw(self, owner: str) -> None: ...


class ReadStore(Protocol):
    def announcements(self) -> list[Announcement]: ...


def announce_ttl(lease_ttl: float, poll_interval: float) -> float:
    """How long a worker's word lasts: its lease TTL, at most :data:`LONGEST`, and at least three polls.

    A worker's loop comes round at least once a poll interval, and renews at
    a third of this: a live worker's word never lapses between two renewals.
    """
    return max(min(lease_ttl, LONGEST), 3 * poll_interval)


def unhandled_note(kind: str) -> str:
    return f"no running worker handles kind {kind}"


@dataclass(frozen=True)
class Roster:
    """The kinds the live announcements cover; ``kinds`` None when no worker has announced (nothing is said)."""

    kinds: frozenset[str] | None = None

    @classmethod
    def of(cls, announcements: Iterable[Announcement]) -> Roster:
        words = list(announcements)
        if not words:
            return cls(None)
        return cls(frozenset().union(*(a.kinds for a in words)))

    def unhandled(self, rec: Record) -> bool:
        """Whether ``rec`` is pending and workers have announced, none of them handling its kind."""
        return self.judge(rec) is True

    def judge(self, rec: Record) -> bool | None:
        """The ``unhandled`` of a job's JSON: None when nothing can be said (no word, or not pending)."""
        if self.kinds is None or rec.state != "pending":
            return None
        return rec.kind not in self.kinds


#: What a view knows when it has read nothing: no worker's word, so nothing to say.
UNKNOWN = Roster(None)


def roster_of(store: ReadStore) -> Roster:
    """The store's live announcements, read once; a store that cannot say answers :data:`UNKNOWN`."""
    try:
        return Roster.of(store.announcements())
    except (JobError, OSError):
        return UNKNOWN


def roster_for(store: ReadStore, records: Iterable[Record]) -> Roster:
    """:func:`roster_of` when one of ``records`` is pending (the only jobs it speaks of); else :data:`UNKNOWN`."""
    if any(rec.state == "pending" for rec in records):
        return roster_of(store)
    return UNKNOWN


class Announcer:
    """One worker's word on a store: made, renewed when a third of it has passed, taken back.

    ``said`` gets one line the first time the word cannot be written (a link
    planted at its name, an older PostgreSQL schema); the worker goes on, and
    tries again at each renewal, silently, until a write succeeds.
    """

    def __init__(
        self,
        store: AnnounceStore,
        owner: str,
        kinds: Iterable[str],
        ttl: float,
        said: Callable[[str], None],
    ) -> None:
        self.store = store
        self.owner = owner
        self.kinds = sorted(set(kinds))
        self.ttl = float(ttl)
        self._said = said
        self._due = -1.0  # time.monotonic() of the next write; -1: never written, +inf: withdrawn
        self._failing = False

    def tick(self, now_mono: float | None = None) -> None:
        """Write the word when it is due (the first call, then every third of its TTL); otherwise nothing."""
        now_mono = time.monotonic() if now_mono is None else now_mono
        if now_mono < self._due:
            return
        try:
            self.store.announce(self.owner, self.kinds, self.ttl)
        except (JobError, OSError) as exc:
            if not self._failing:
                hint = getattr(exc, "hint", "")
                self._said(f"cannot say what this worker handles: {exc}" + (f" ({hint})" if hint else ""))
            self._failing = True
            self._due = now_mono + self.ttl / 3
            return
        self._failing = False
        self._due = now_mono + self.ttl / 3

    def withdraw(self) -> None:
        """Take the word back (once); a store that cannot be reached lets it expire."""
        if self._due == float("inf"):
            return
        self._due = float("inf")
        try:
            self.store.withdraw(self.owner)
        except (JobError, OSError):
            pass  # it expires within its TTL
