"""After a job ends: run it again as a new job (``retry``), or remove it (``collect``, the ``gc`` command).

A terminal record is never reopened [JOB-T1]: a retry is a new job that
copies the old one's kind, spec and jobctl scheduling keys and carries a link
back, under jobctl's extension key ``jobctl.run/retry-of@1``
(``{"job": "<id>"}``, docs/reference/scheduling.md). Removing is the one
deletion jobctl does: only ended records, each under its own lock, and never
one that a job staying in the store still depends on.

An ended job has at most one replacement, and the store decides which: the
replacement's id is derived from the ended job's (:func:`replacement_id`),
so two retries racing submit the same id and the store's own create (the
file that refuses an existing name, the table's primary key) lets one of
them through; the other is answered with that one (:class:`Resubmitted`
with ``created`` false).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .errors import CancelledByDependency, Exists, Invalid, JobError, Refused
from .priority import PRIORITY
from .record import AFTER, PIPELINE, RETRY, ZERO_TIME, Intent, Record
from .schedule import APPROVAL, RETRY_OF, after_of, gated, retry_of, retry_of_link
from .store.base import Store
from .store.contract import asker
from .timeout import TIMEOUT
from .wire import Raw

__all__ = [
    "RETRY_OF",
    "RETRYABLE",
    "Resubmitted",
    "retry",
    "retry_of_link",
    "replacement_id",
    "replacement_of",
    "replacements",
    "doomed_by",
    "Collection",
    "collect",
]

#: The states a job may be retried from: a completed job is done, a live one is not over.
RETRYABLE = ("failed", "cancelled")


@dataclass(frozen=True)
class Resubmitted:
    """One job a retry answers with: ``new`` does the work of ``old``; ``created`` false when it was there already."""

    new: str
    old: str
    created: bool


def replacement_id(old: Record) -> str:
    """The id of ``old``'s replacement, the same for every retry of it.

    The minted form ``<ms>-<hex20>`` (so any reader takes it): the time
    ``old`` ended (its last change, which no write moves again [JOB-T1]) in
    Unix milliseconds, then 20 hex digits of SHA-256 over the retry-of key
    and ``old``'s id.
    """
    when = old.updated_at or old.created_at
    ms = int(when.timestamp() * 1000) if when is not None else 0
    digest = hashlib.sha256(f"{RETRY_OF}\0{old.id}".encode()).hexdigest()[:20]
    return f"{max(0, ms):013d}-{digest}"


def replacement_of(store: Store, rec: Record) -> str | None:
    """The id of ``rec``'s replacement when the store has it (:func:`replacement_id`), else None."""
    if rec.state not in RETRYABLE:
        return None
    try:
        there = store.load(replacement_id(rec))
    except JobError:
        return None
    return there.id if retry_of_link(there) == rec.id else None


def replacements(records: Iterable[Record]) -> dict[str, str]:
    """Among ``records``: each retried job's id to its replacement's (the newest, should there be several)."""
    out: dict[str, tuple[datetime, str]] = {}
    for rec in records:
        old = retry_of_link(rec)
        if old is None:
            continue
        mark = (rec.created_at or ZERO_TIME, rec.id)
        if old not in out or mark > out[old]:
            out[old] = mark
    return {old: mark[1] for old, mark in out.items()}


def doomed_by(rec: Record) -> str | None:
    """The dependency because of which a worker cancelled ``rec`` (its words, slots.py), or None.

    ``cancelled: dependency <id> ended failed`` (or ``ended cancelled``, or
    ``does not exist``), for one of the ids ``rec`` waits for.
    """
    if rec.state != "cancelled" or not rec.error.startswith("cancelled: dependency "):
        return None
    try:
        deps = after_of(rec)
    except JobError:
        return None
    for dep in deps:
        if any(rec.error == f"cancelled: dependency {dep} {end}" for end in _DOOMED_ENDS):
            return dep
    return None


_DOOMED_ENDS = ("ended failed", "ended cancelled", "does not exist")


def _cause(store: Store, rec: Record, dep: str) -> str:
    """The job to retry for ``rec``: up the chain of jobs cancelled for a dependency, the first that was not."""
    seen = {rec.id}
    while dep not in seen:
        seen.add(dep)
        try:
            up = doomed_by(store.load(dep))
        except JobError:
            return dep  # missing or unreadable: that one is the cause
        if up is None:
            return dep
        dep = up
    return dep


def _again(old: Record, rewire: dict[str, str], by: str) -> Record:
    """``old``'s replacement: a new pending record doing its work, under :func:`replacement_id`.

    Same kind, spec, total, requires and scheduling keys; a gate
    (:func:`jobctl.schedule.gated`) is held again, for a new approval.
    """
    spec = old.opaque_text("spec")
    rec = Record(id=replacement_id(old), kind=old.kind, spec=Raw(spec) if spec is not None else {})
    rec.progress.total = old.progress.total
    rec.requires = list(old.requires)
    retry = retry_of(old)
    if retry is not None:  # the same policy, a fresh count: this is attempt 1 of a new job
        retry.failures, retry.not_before = 0, None
        rec.extensions[RETRY] = retry.to_json()
    deps = after_of(old)
    if deps:
        rec.extensions[AFTER] = {"jobs": [rewire.get(dep, dep) for dep in deps]}
        rec.critical.append(AFTER)  # [JOB-D1]: a reader that cannot honour it must not adopt it
    if PIPELINE in old.extensions:
        rec.extensions[PIPELINE] = old.extensions[PIPELINE]
    for key in (PRIORITY, TIMEOUT):  # its place in the pick order and its attempts' limit, as they were
        if key in old.extensions:
            rec.extensions[key] = old.extensions[key]
    if gated(old):  # whether it was rejected, cancelled or failed after its approval: a new approval
        rec.extensions[APPROVAL] = {"required": True}
        rec.intent = Intent("pause", by or "jobctl retry")
    rec.extensions[RETRY_OF] = {"job": old.id}
    return rec


def _dependents(store: Store, old: Record) -> list[Record]:
    """``old`` and every job cancelled because it (or another so chosen) ended, down the chain."""
    chosen = [old]
    chosen_ids = {old.id}
    listing = sorted(store.list(), key=lambda r: (r.created_at or ZERO_TIME, r.id))
    grew = True
    while grew:  # the cancellation spreads down a pipeline one level a pass
        grew = False
        for rec in listing:
            if rec.id not in chosen_ids and doomed_by(rec) in chosen_ids:
                chosen.append(rec)
                chosen_ids.add(rec.id)
                grew = True
    return chosen


def _submit_once(store: Store, rec: Record, old: Record) -> bool:
    """Submit ``old``'s replacement ``rec``; False when the store has it already (another retry came first)."""
    try:
        store.submit(rec)
    except Exists:
        there = store.load(rec.id)
        if retry_of_link(there) != old.id:  # a job submitted by hand under that very id
            raise Refused(f"job {rec.id} is in the way of the replacement of job {old.id}", old.id) from None
        return False
    return True


def retry(store: Store, job_id: str, with_dependents: bool = False, by: str = "") -> list[Resubmitted]:
    """Submit ``job_id`` (failed or cancelled) again; the job's replacement first, then its dependents'.

    Each ended job has one replacement (:func:`replacement_id`): when it
    exists already the answer names it with ``created`` false, and nothing
    new is made for it. ``with_dependents`` also resubmits, in dependency
    order, every job that was cancelled because this one (or another job so
    resubmitted) ended, wired to the new ids, each once in the same way (so
    a retry that died half-way is completed by the next); jobs that
    completed are not redone. A gate is held again, by ``by``.

    Refused: a job not ended ``failed`` or ``cancelled`` (``Refused``); one
    a worker cancelled because a dependency ended, without a replacement
    yet (``CancelledByDependency``, naming the job to retry instead).
    """
    by = asker(by, job_id)  # a gate's `by`, as an intent's
    old = store.load(job_id)
    if old.state not in RETRYABLE:
        raise Refused(f"job {job_id} is {old.state}; only a failed or cancelled job is retried", job_id)
    dep = doomed_by(old)
    if dep is not None:
        there = replacement_of(store, old)  # made by a retry of the cause with its dependents
        if there is not None:
            return [Resubmitted(there, old.id, False)]
        ended = old.error.removeprefix(f"cancelled: dependency {dep} ")
        cause = _cause(store, old, dep)
        raise CancelledByDependency(
            f"job {job_id} was cancelled because its dependency {dep} {ended}; retried alone, it would be again",
            job_id,
            cause,
        )
    chosen = _dependents(store, old) if with_dependents else [old]
    rewire: dict[str, str] = {}
    out: list[Resubmitted] = []
    pending = list(chosen)
    while pending:  # a job after the jobs it waits for, so its new dependencies exist
        waiting = {p.id for p in pending}
        ready = [rec for rec in pending if not any(d in waiting for d in after_of(rec))]
        for rec in ready or pending[:1]:
            new = _again(rec, rewire, by)
            created = _submit_once(store, new, rec)
            rewire[rec.id] = new.id
            out.append(Resubmitted(new.id, rec.id, created))
            pending.remove(rec)
    return out


@dataclass
class Collection:
    """What ``collect`` removed (or would remove), and what it kept back and why."""

    removed: list[Record] = field(default_factory=list)
    kept: list[tuple[Record, str]] = field(default_factory=list)


def _remove_tree(root: str, path: str) -> None:
    """Remove a work or log directory under ``root``; a link is removed, never followed (:mod:`jobctl.fsio`)."""
    from . import fsio

    if os.path.relpath(path, root).startswith(".."):
        return  # a work directory configured outside the store is not gc's to remove
    fsio.remove_below(root, path)


def collect(
    store: Store,
    older_than: timedelta,
    states: Iterable[str] = ("complete", "failed", "cancelled"),
    dry_run: bool = False,
    now: datetime | None = None,
) -> Collection:
    """Remove ended jobs last changed more than ``older_than`` ago, in ``states``.

    Never removed: a job that has not ended, and a job that a job staying in
    the store lists in its dependencies (``--after``). For each job, under
    the record's lock and only if the record read there still ended in
    ``states`` longer than ``older_than`` ago: its attempt logs, its work
    directory, then its record. Judged on the record under the lock, not
    the one listed: another gc may have removed the job since, and a job of
    the same id may run now (``submit --id``), its work directory and logs
    in use. The lock file stays [JOB-L3]: deleting it could split two
    lockers onto two inodes.
    """
    from .runner import LogNames, logs_dir  # the attempt logs' place is the runner's to say

    now = store.now() if now is None else now
    wanted = set(states)
    listing = store.list()
    try:
        cutoff = now - older_than
    except OverflowError:  # a span reaching back before year 1: refused, as limits.later refuses one past 9999
        raise Invalid(f"older_than {older_than} reaches back before the first time a record can hold") from None

    def due(rec: Record) -> bool:
        return rec.terminal and rec.state in wanted and (rec.updated_at or ZERO_TIME) <= cutoff

    candidates = {rec.id: rec for rec in listing if due(rec)}
    result = Collection()
    kept: dict[str, str] = {}
    changed = True
    while changed:  # a job kept keeps what it depends on, down the chain
        changed = False
        for rec in listing:
            if rec.id in candidates:
                continue
            try:
                deps = after_of(rec)
            except JobError:
                deps = []
            for dep in deps:
                if dep in candidates:
                    del candidates[dep]
                    kept[dep] = f"job {rec.id} depends on it"
                    changed = True
    by_id = {rec.id: rec for rec in listing}
    result.kept = [(by_id[job_id], why) for job_id, why in kept.items()]
    ended = sorted(candidates.values(), key=lambda r: (r.created_at or ZERO_TIME, r.id))
    logs: LogNames | None = None
    if ended and not dry_run and not os.path.relpath(logs_dir(store, ended[0].id), store.root).startswith(".."):
        logs = LogNames(store, ended[0].id)  # logs/ read once for them all; outside the store, not gc's

    def clear(found: Record) -> bool:
        """Under the record's lock: remove the job's logs and work directory if the record read there is due."""
        if not due(found):
            return False
        if logs is not None:
            logs.remove(store, found.id)
        _remove_tree(store.root, store.work_path(found.id))
        return True

    for rec in ended:
        if not dry_run and not store.remove(rec.id, clear):
            continue
        result.removed.append(rec)
    return result
