"""After a job ends: run it again as a new job (``retry``), or remove it (``collect``, the ``gc`` command).

A terminal record is never reopened [JOB-T1]: a retry is a new job that
copies the old one's kind, spec and jobctl scheduling keys and carries a link
back, under jobctl's extension key ``jobctl.run/retry-of@1``
(``{"job": "<id>"}``, docs/reference/scheduling.md). Removing is the one
deletion jobctl does: only ended records, each under its own lock, and never
one that a job staying in the store still depends on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .errors import Invalid, JobError, Refused
from .record import AFTER, PIPELINE, RETRY, ZERO_TIME, Record
from .schedule import after_of, retry_of
from .store.base import Store
from .wire import Raw

__all__ = ["RETRY_OF", "RETRYABLE", "retry", "retry_of_link", "Collection", "collect"]

#: The link from a retry to the job it retries: ``{"job": "<id>"}``.
RETRY_OF = "jobctl.run/retry-of@1"
#: The states a job may be retried from: a completed job is done, a live one is not over.
RETRYABLE = ("failed", "cancelled")


def retry_of_link(rec: Record) -> str | None:
    """The id of the job ``rec`` retries, or None."""
    link = rec.extensions.get(RETRY_OF)
    job = link.get("job") if isinstance(link, dict) else None
    return job if isinstance(job, str) else None


def _doomed_by(rec: Record, dep: str) -> bool:
    """Whether ``rec`` was cancelled because dependency ``dep`` ended failed or cancelled (the worker's words)."""
    return rec.state == "cancelled" and rec.error.startswith(f"cancelled: dependency {dep} ended ")


def _again(old: Record, rewire: dict[str, str]) -> Record:
    """A new pending record doing ``old``'s work: same kind, spec, total, requires and scheduling keys."""
    spec = old.opaque_text("spec")
    rec = Record(id="", kind=old.kind, spec=Raw(spec) if spec is not None else {})
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
    rec.extensions[RETRY_OF] = {"job": old.id}
    return rec


def retry(store: Store, job_id: str, with_dependents: bool = False) -> list[tuple[str, str]]:
    """Submit ``job_id`` (failed or cancelled) again; return ``(new id, old id)`` pairs, the job's first.

    ``with_dependents`` also resubmits, in dependency order, every job that
    was cancelled because this one (or another job so resubmitted) failed or
    was cancelled, wired to the new ids; jobs that completed are not redone.
    """
    old = store.load(job_id)
    if old.state not in RETRYABLE:
        raise Refused(f"job {job_id} is {old.state}; only a failed or cancelled job is retried", job_id)
    chosen = [old]
    if with_dependents:
        listing = store.list()
        chosen_ids = {old.id}
        grew = True
        while grew:  # the cancellation spreads down a pipeline one level a pass
            grew = False
            for rec in sorted(listing, key=lambda r: (r.created_at or ZERO_TIME, r.id)):
                if rec.id in chosen_ids:
                    continue
                try:
                    deps = after_of(rec)
                except JobError:
                    continue
                if any(dep in chosen_ids and _doomed_by(rec, dep) for dep in deps):
                    chosen.append(rec)
                    chosen_ids.add(rec.id)
                    grew = True
    rewire: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    pending = list(chosen)
    while pending:  # a job after the jobs it waits for, so its new dependencies exist
        ready = [rec for rec in pending if not any(dep in {p.id for p in pending} for dep in after_of(rec))]
        for rec in ready or pending[:1]:
            new_id = store.submit(_again(rec, rewire))
            rewire[rec.id] = new_id
            out.append((new_id, rec.id))
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
    the store lists in its dependencies (``--after``). For each job: its
    attempt logs, its work directory, then its record, under the record's
    lock and only if the record read there has ended. The lock file stays
    [JOB-L3]: deleting it could split two lockers onto two inodes.
    """
    from .runner import log_dir  # the attempt logs' place is the runner's to say

    now = store.now() if now is None else now
    wanted = set(states)
    listing = store.list()
    try:
        cutoff = now - older_than
    except OverflowError:  # a span reaching back before year 1: refused, as limits.later refuses one past 9999
        raise Invalid(f"older_than {older_than} reaches back before the first time a record can hold") from None
    candidates = {
        rec.id: rec
        for rec in listing
        if rec.terminal and rec.state in wanted and (rec.updated_at or ZERO_TIME) <= cutoff
    }
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
    for rec in sorted(candidates.values(), key=lambda r: (r.created_at or ZERO_TIME, r.id)):
        if not dry_run:
            _remove_tree(store.root, log_dir(store, rec.id))
            _remove_tree(store.root, store.work_path(rec.id))
            if not store.remove(rec.id):
                continue
        result.removed.append(rec)
    return result
