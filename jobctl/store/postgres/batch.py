"""The PostgreSQL store's batch claims: the oldest runnable jobs, several jobs, a finish and the next claim.

Each is one statement (or one transaction of two); whatever it passes over
or refuses is judged by the contract's rules as the single step would
judge it (:class:`.steps.RowSteps`), and named as the directory store's
pick names it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from ... import ids
from ...errors import Invalid, JobError, LockBusy
from ...exclusive import exclusive_of
from ...limits import INT64_MAX
from ...priority import pick_key
from ...record import STATES, Record, is_orphan, known_models, prepare
from ...schedule import blocked_by
from ..base import OpenListing, Records, Skipped, Verdicts
from ..contract import NO_CONTENT, Content, _claim_terms, _epoch, claiming, finishing, holding, verdict
from . import row
from .handle import Row, Rows, first
from .keys import KEYS
from .schema import Q
from .session import read, retried
from .steps import RowSteps

__all__ = ["BatchClaims", "finish_terms"]

Answers = list[Sequence[Any] | None]


class BatchClaims(RowSteps):
    """``claim_some``, ``claim_each`` and ``finish_and_claim`` of :class:`jobctl.store.postgres.store.PostgresStore`."""

    @retried
    def claim_some(
        self,
        owner: str,
        ttl: float,
        limit: int,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> Records:
        """Claim up to ``limit`` of the oldest runnable jobs in one statement (pgqueuer's batch dequeue).

        Jobs with an exclusive key are read with the pick and claimed with
        their keys (:meth:`_claim_keyed`) for the slots the other runnable
        jobs leave free.

        Runnable as :func:`jobctl.schedule.runnable` says; ``FOR UPDATE SKIP
        LOCKED`` passes over rows other pickers hold, so pickers never wait on
        each other. Oldest first. Jobs never picked for their row (unreadable
        scheduling data, a critical model this reader does not know) are named
        in ``skipped`` and ``unreadable`` when lists are given, by a query that
        travels with the pick (in the same round trip).
        """
        ttl_delta = _claim_terms("", owner, ttl, self.max_ttl)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Invalid(f"a claim takes at least one job, not {limit!r}")
        wanted = None if kinds is None else sorted(set(kinds))
        params = {
            "owner": row.text_fit(owner, "owner"),
            "ttl": row.interval(ttl_delta),
            "now": self._now(),
            "understood": self._models(),
            "kinds": wanted,
            "limit": limit,
        }
        # One statement, or two in one transaction: one round trip either way.
        if skipped is None and unreadable is None:
            rows, unpicked = self.session.all(Q["claim_next"], params), []
        else:
            looks = {"understood": params["understood"], "now": params["now"]}
            rows, unpicked = self.session.all_together([(Q["claim_next"], params), (Q["unpickable"], looks)])
        if unpicked:
            self._name_unpicked(sorted(unpicked, key=first), wanted, skipped, unreadable, (owner, ttl))
        claimed: Records = []
        for got in rows:
            self._held.wrote(got[0], got[row.REVISION])
            claimed.append(self._holding(got))
        if len(claimed) < limit:  # slots left: the open jobs with a key take them, each with its key
            looks = {"now": params["now"], "kinds": wanted}
            waiting = self.session.all(Q["keyed_open"], looks)
            if waiting:
                claimed += self._claim_keyed(owner, ttl, limit - len(claimed), wanted, skipped, waiting)
        claimed.sort(key=pick_key)  # the order the statements picked them in
        return claimed

    def _claim_keyed(
        self, owner: str, ttl: float, limit: int, wanted: list[str] | None, skipped: Skipped | None, rows: Rows
    ) -> Records:
        """The oldest runnable jobs with an exclusive key whose key is free, up to ``limit``: each claimed with its key.

        ``rows`` are the open jobs with a key nobody holds (``keyed_open``),
        with the time of the look last. The pick's statement passes them over, so they
        take the slots it leaves; here each is judged as the
        directory's pick judges it (:func:`.picking.claim_some`), under its
        row lock and its key's lock (:mod:`.keys`): a key another job holds
        passes its jobs over, and one job a key is tried.
        """
        from ...schedule import runnable
        from ..picking import Claimer, claim_some

        opened: list[Record] = []
        for got in rows:
            with contextlib.suppress(JobError):  # a row no reader here can read: named by the pick's own look
                opened.append(row.record_of(got))
        states = _States(self)
        found: list[Record] = []
        keys: set[str] = set()
        for rec in runnable(opened, rows[0][-1], wanted, None, states):
            key = exclusive_of(rec)
            if key is not None and key not in keys:  # the oldest runnable job of each key is the one to try
                keys.add(key)
                found.append(rec)
        # The store is the whole PostgresStore; this call never needs its list_open (the records are given).
        store = cast("Claimer", self)
        return claim_some(store, owner, ttl, limit, wanted, records=OpenListing(found), skipped=skipped, states=states)

    def _name_unpicked(
        self,
        rows: Iterable[Row],
        kinds: Iterable[str] | None,
        skipped: Skipped | None,
        unreadable: Skipped | None,
        claimer: tuple[str, float],
    ) -> None:
        """What the pick left out for what is at the row, named as the directory's pick names it.

        A row this reader cannot read, in ``unreadable``; an orphan of the
        wanted kinds that :func:`jobctl.schedule.blocked_by` cannot judge
        (its scheduling data cannot be read), in ``skipped`` with that
        refusal -- judged as the directory's pick judges it, dependencies
        first, so one that waits or is paused is not named; one whose epoch
        no claim can raise, in ``skipped`` with the refusal the claim's rules
        give (``claimer``: the owner and TTL asked for).
        """
        wanted = None if kinds is None else set(kinds)
        for got in rows:
            job_id = got[0]
            try:
                rec = row.record_of(got)
            except JobError as exc:
                if unreadable is not None:
                    unreadable.append((job_id, exc))
                continue
            if skipped is None or (wanted is not None and rec.kind not in wanted) or not is_orphan(rec, got[-1]):
                continue
            try:
                if blocked_by(rec, _States(self), got[-1])[0] or exclusive_of(rec) is not None:
                    continue  # it waits, or the keyed jobs' own claims judge it (_claim_keyed)
                if rec.lease.epoch >= INT64_MAX:  # what the directory's pick meets in the claim itself
                    claiming(job_id, *claimer)(rec, got[-1])
                    prepare(rec, settle=True)
            except JobError as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                skipped.append((job_id, exc))

    @read
    def _state(self, job_id: str) -> str | None:
        """A job's state, None when there is none this reader can read (what a listing's states say)."""
        got = self.session.one(Q["state_of"], {"id": job_id})
        if got is None or not known_models().issuperset(got[1]):
            return None
        return str(got[0])

    @retried
    def claim_each(self, job_ids: Sequence[str], owner: str, ttl_seconds: float) -> Verdicts:
        """Claim each job as ``claim(..., wait=False)`` would, in one statement: a record or its refusal each.

        The statement claims every job its preconditions allow; each one it
        passed over is judged by the rules as ``claim`` judges it (a row that
        moved meanwhile may be claimed there). A row another transaction
        holds past the lock patience makes them claims of their own.
        """
        apart = super().claim_each
        if len(job_ids) < 2 or len(set(job_ids)) < len(job_ids):
            return apart(job_ids, owner, ttl_seconds)  # one job, or one twice: as claims of their own
        try:
            ttl = _claim_terms("", owner, ttl_seconds, self.max_ttl)
            params = {
                "owner": row.text_fit(owner, "owner"),
                "ttl": row.interval(ttl),
                "ids": [ids.check(j) for j in job_ids],
            }
        except JobError:  # each claim on its own says what is wrong, as a claim of one job would
            return apart(job_ids, owner, ttl_seconds)
        params["now"], params["understood"] = self._now(), self._models()
        try:
            rows = self.session.all(Q["claim"], params, wait=False)
        except LockBusy:
            return apart(job_ids, owner, ttl_seconds)
        got = {found[0]: found for found in rows}
        out: Verdicts = []
        for job_id in job_ids:
            found, rules = got.get(job_id), claiming(job_id, owner, ttl, keys=KEYS)
            out.append(verdict(job_id, self._concluded, job_id, "claim", found, rules, None, None, wait=False))
        return out

    def finish_and_claim(
        self,
        job_id: str,
        epoch: int,
        state: str,
        *,
        error: str | None = None,
        next_id: str,
        owner: str,
        ttl_seconds: float,
    ) -> tuple[Record | JobError, Record | JobError]:
        """``finish``, and ``claim(next_id, wait=False)``: one transaction, one round trip; each its own verdict.

        The two statements run in the order of their ids, so two workers each
        finishing the job the other would claim next cannot wait on each
        other. When one of them waits past the lock patience, or the server
        ends it as one of two transactions waiting on each other, they run
        apart (the finish waiting, the claim not).
        """
        held = self._held.get(job_id)
        got: Answers | None = None
        finish: dict[str, Any] | None = None
        if held is not None and next_id != job_id:
            try:
                _epoch(epoch)
                ttl = _claim_terms(next_id, owner, ttl_seconds, self.max_ttl)
                claim = {"owner": row.text_fit(owner, "owner", next_id), "ttl": row.interval(ttl)}
                self._stepping(next_id, claim)
                finish = finish_terms(epoch, state, error, NO_CONTENT)
                if finish is not None:
                    self._stepping(job_id, finish)
            except JobError:  # terms the steps refuse, each in its own words
                finish = None
        if finish is not None:
            with contextlib.suppress(LockBusy):  # a row held past the lock patience: the steps apart
                got = self._together([(job_id, Q["finish"], finish), (next_id, Q["claim"], claim)])
        if got is None:
            return super().finish_and_claim(
                job_id, epoch, state, error=error, next_id=next_id, owner=owner, ttl_seconds=ttl_seconds
            )
        rules = holding(job_id, epoch, finishing(job_id, state, error))
        done = verdict(job_id, self._concluded, job_id, "finish", got[0], rules, held, None, wait=True)
        rules = claiming(next_id, owner, ttl, keys=KEYS)
        return done, verdict(next_id, self._concluded, next_id, "claim", got[1], rules, None, None, wait=False)

    @retried
    def _together(self, steps: Sequence[tuple[str, str, dict[str, Any]]]) -> Answers:
        """The steps' statements as one transaction (:meth:`.session.Session.together`), rows locked in id order."""
        order = sorted(range(len(steps)), key=lambda i: steps[i][0])
        answers = self.session.together([(steps[i][1], steps[i][2]) for i in order])
        out: Answers = [None] * len(steps)
        for i, answer in zip(order, answers, strict=True):
            out[i] = answer
        return out


def finish_terms(epoch: int, state: str, error: Any, given: Content) -> dict[str, Any] | None:
    """The ``finish`` statement's terms; None for a state, an error or content it cannot take.

    The rules then word the refusal, in the contract's order: the record's
    verdicts (terminal, stale epoch, lapsed lease) before the mutation's own.
    """
    if state not in STATES or given.refusal or (error is not None and not (isinstance(error, str) and row.fits(error))):
        return None
    params = {"epoch": epoch, "state": state, "done": given.done, "error": error}
    return {**params, **row.checkpoint_params(given.checkpoint, given.ranged)}


class _States(Mapping[str, str]):
    """The states of jobs a judgement of dependencies asks for, each read when asked (few: an odd row's)."""

    def __init__(self, store: BatchClaims) -> None:
        self._store = store

    def __getitem__(self, job_id: str) -> str:
        state = self._store._state(job_id)
        if state is None:
            raise KeyError(job_id)
        return state

    def __iter__(self) -> Iterator[str]:
        return iter(())  # never walked: only looked up

    def __len__(self) -> int:
        return 0
