"""Claiming the first runnable jobs of one listing: ``claim --next`` on a store that has no statement for it.

First is higher priority, then older (:func:`jobctl.priority.pick_key`).

The directory store picks this way (:meth:`jobctl.store.file.FileStore.claim_some`);
the PostgreSQL store picks with one statement and judges what it passed over
with the same rules. What may start is :func:`jobctl.schedule.runnable`'s to
say; this module claims it, judging each record again as found under its lock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Protocol

from ..errors import Invalid, JobError, LeaseHeld, NotFound, Terminal
from ..record import Record
from ..schedule import blocked_by, is_orphan, runnable
from .base import Listing, OpenListing
from .contract import _claim_terms

__all__ = ["Claimer", "claim_next", "claim_some"]


class Claimer(Protocol):
    """What :func:`claim_next` needs of a store."""

    def now(self) -> datetime: ...
    def list_open(self) -> OpenListing: ...
    def claim(
        self,
        job_id: str,
        owner: str,
        ttl_seconds: float,
        *,
        vet: Callable[[Record, datetime], None] | None = None,
        wait: bool = True,
    ) -> Record: ...


def claim_next(
    store: Claimer,
    owner: str,
    ttl: float,
    kinds: Iterable[str] | None = None,
    *,
    records: Listing | None = None,
    skipped: list[tuple[str, JobError]] | None = None,
) -> Record | None:
    """Claim the first runnable job (of ``kinds``); None when nothing may start now (:func:`claim_some` of one)."""
    got = claim_some(store, owner, ttl, 1, kinds, records=records, skipped=skipped)
    return got[0] if got else None


def claim_some(
    store: Claimer,
    owner: str,
    ttl: float,
    limit: int,
    kinds: Iterable[str] | None = None,
    *,
    records: Listing | None = None,
    skipped: list[tuple[str, JobError]] | None = None,
    states: Mapping[str, str] | None = None,
) -> list[Record]:
    """Claim up to ``limit`` runnable jobs (of ``kinds``): higher priority first, then oldest first.

    Reads the open records once (or takes ``records``, the caller's
    :meth:`list_open`, or a whole :meth:`list`): this is ``jobctl claim --next`` and ``jobctl run
    --next``, not the worker's loop. Finished records are known by their
    states only [JOB-T1].

    The listing is only where to look: each claim judges the record again
    as found under its lock (paused since, a not-before time set since by a
    failed attempt's retry, moved to ``transferred``), and a record that is
    no longer runnable is passed over with nothing written. A job somebody
    else claims in the meantime is passed over, and so is one whose lock
    another writer holds past :data:`jobctl.limits.LOCK_PATIENCE` (a writer
    stopped in the middle of a write would hold every claim behind it). A record the
    claim refuses for what is at its name (a link or odd file at its lock, a
    damaged record) is named in ``skipped``, as one :func:`runnable` leaves
    out is, and the next one is tried.
    """
    # The request first, as every claim judges it before reading anything: a blank owner or a TTL over
    # the store's max_ttl is the caller's error, not a record's to be passed over.
    _claim_terms("", owner, ttl, getattr(store, "max_ttl", math.inf))
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise Invalid(f"a claim takes at least one job, not {limit!r}")
    listing = store.list_open() if records is None else records
    if states is None:
        states = listing.states if isinstance(listing, OpenListing) else {r.id: r.state for r in listing}
    vet = _still_runnable(states)
    claimed: list[Record] = []
    for rec in runnable(listing, store.now(), kinds, skipped, states):
        try:
            claimed.append(store.claim(rec.id, owner, ttl, vet=vet, wait=False))
        except (LeaseHeld, Terminal, NotFound):
            continue  # another consumer was quicker, or the record moved: try the next one
        except JobError as exc:
            # Not ours to run (docs/security.md), or unreadable at its lock or record: the next one may be.
            if skipped is not None:
                skipped.append((rec.id, exc))
            continue
        if len(claimed) == limit:
            break
    return claimed


def _still_runnable(states: Mapping[str, str]) -> Callable[[Record, datetime], None]:
    """A claim's ``vet``: refuse (``LeaseHeld``) a record that is no longer runnable as found under the lock.

    The contract's own checks (terminal, held, moved) come first; this adds
    what :func:`runnable` judged from the listing: stranded [JOB-I11]
    [JOB-I12] [JOB-T2], not paused, its not-before time passed and its
    dependencies complete (their states as listed: a finished one stays
    finished [JOB-T1]).
    """

    def vet(rec: Record, now: datetime) -> None:
        if not is_orphan(rec, now):
            why = "transferred" if rec.state == "transferred" else "paused"
            raise LeaseHeld(f"job {rec.id} is {why} since it was read; passed over", rec.id)
        reason, detail = blocked_by(rec, states, now)
        if reason:
            raise LeaseHeld(f"job {rec.id} changed since it was read ({detail}); passed over", rec.id)

    return vet
