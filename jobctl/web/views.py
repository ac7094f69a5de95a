"""What the HTTP API says about a job and a pipeline: plain JSON shapes (docs/reference/http.md).

Pure functions over :class:`~jobctl.record.Record`: no I/O and no web
framework, so the shapes are tested on their own and the change stream and
the endpoints say the same thing about a job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ..errors import JobError
from ..exclusive import exclusive_of
from ..lifecycle import RETRYABLE, doomed_by, replacements, retry_of_link
from ..limits import duration_text
from ..priority import priority_of
from ..record import ZERO_TIME, Record, format_time, held, is_zero
from ..results import has_result, result_of
from ..roster import UNKNOWN, Roster
from ..schedule import after_of, not_before, pipeline_of, pipeline_stages, pipeline_state, retry_of, shown_attempt
from ..submitter import submitter_of
from ..timeout import timeout_of

__all__ = ["STEPS", "step", "job_view", "pipeline_view", "pipeline_names", "changed_views", "changed_pipelines"]

#: What a step indicator shows for a job, in the order a pipeline moves through them.
STEPS = ("pending", "held", "running", "done", "failed", "cancelled")


def step(rec: Record, now: datetime) -> str:
    """The job's step: ``done``, ``failed``, ``cancelled``, ``running``, ``held`` or ``pending``.

    ``held`` is a job that waits for approval (intent ``pause``, submitted
    with ``hold``) and that nobody runs; ``running`` is a job somebody holds
    or that an external system finishes (``transferred``), or one whose
    lapsed lease the next worker adopts.
    """
    if rec.state == "complete":
        return "done"
    if rec.terminal:
        return rec.state
    if rec.state in ("running", "transferred") or held(rec.lease, now):
        return "running"
    if rec.want == "pause":
        return "held"
    return "pending"


def _time(when: datetime | None) -> str | None:
    return None if when is None or is_zero(when) else format_time(when)


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def job_view(rec: Record, now: datetime, replaced_by: str | None = None, roster: Roster = UNKNOWN) -> dict[str, Any]:
    """The ``job`` object of the HTTP API: what a page shows of one job.

    ``roster``: what running workers handle (:func:`jobctl.roster.roster_for`,
    read once for every job of an answer), for ``unhandled``.

    ``replaced_by``: the id of the job a retry made of this one, when there
    is one (:func:`jobctl.lifecycle.replacements`). ``retryable`` says
    whether a retry of this very job would make a new one: it has ended
    ``failed`` or ``cancelled``, has no replacement yet, and was not
    cancelled because a dependency ended (``cancelled_for``: retry that one).
    """
    try:
        membership = pipeline_of(rec)
        after = after_of(rec)
        attempt = shown_attempt(rec)
        start = not_before(rec)
    except JobError:  # malformed scheduling data: shown as absent, never a failed request
        membership, after, attempt, start = None, [], 1, None
    doomed = doomed_by(rec)
    try:
        policy = retry_of(rec)
    except JobError:
        policy = None
    failures = policy.failures if policy is not None else 0
    # A job between two attempts, or running a later one: its error is the last failed attempt's (its
    # progress too, until the next attempt starts), not the job's as it stands.
    waiting_retry = not rec.terminal and failures > 0
    previous = None
    if waiting_retry:
        previous = {"attempt": failures, "error": rec.error}
        if rec.state == "pending":
            previous.update(done=rec.progress.done, total=rec.progress.total)
    return {
        "id": rec.id,
        "kind": rec.kind,
        "submitted_by": submitter_of(rec),
        "exclusive": exclusive_of(rec),
        "state": rec.state,
        "step": step(rec, now),
        "spec": _json(rec.opaque_text("spec")),
        "done": rec.progress.done,
        "total": rec.progress.total,
        "has_result": has_result(rec),
        "result": result_of(rec),
        "error": rec.error,
        "attempt": attempt,
        "pipeline": None if membership is None else {"name": membership[0], "stage": membership[1] or rec.kind},
        "after": after,
        "intent": rec.want,
        "owner": rec.lease.owner,
        "epoch": rec.lease.epoch,
        "held": held(rec.lease, now),
        "retry_of": retry_of_link(rec),
        "replaced_by": replaced_by,
        "cancelled_for": doomed,
        "retryable": rec.state in RETRYABLE and replaced_by is None and doomed is None,
        "unhandled": roster.judge(rec),
        "not_before": None if rec.terminal else _time(start),
        "next_attempt_at": _time(start) if waiting_retry and start is not None and now < start else None,
        "previous_attempt": previous,
        **_limits(rec),
        "created_at": _time(rec.created_at),
        "updated_at": _time(rec.updated_at),
    }


def _limits(rec: Record) -> dict[str, Any]:
    """Its priority (0 when not set) and the seconds an attempt may run, and those as words (null: no limit)."""
    seconds = timeout_of(rec)
    return {
        "priority": priority_of(rec),
        "timeout": seconds,
        "timeout_text": None if seconds is None else duration_text(seconds),
    }


def pipeline_view(
    records: Iterable[Record], name: str, now: datetime, roster: Roster = UNKNOWN
) -> dict[str, Any] | None:
    """Pipeline ``name``: its state and its stages in order, or None if it has none.

    Each stage is its newest run (:func:`jobctl.schedule.pipeline_stages`);
    ``history`` names the runs it replaces, newest first.
    """
    stages = pipeline_stages(records, name, now)
    if not stages:
        return None
    return {
        "name": name,
        "state": pipeline_state(stages, now),
        "stages": [
            {
                "stage": stage.stage,
                "status": stage.status,
                "step": step(stage.record, now),
                "detail": stage.detail,
                "after": stage.after,
                "job": job_view(stage.record, now, roster=roster),
                "history": [{"id": run.id, "state": run.state, "error": run.error} for run in stage.history],
            }
            for stage in stages
        ],
    }


def pipeline_names(records: Iterable[Record]) -> list[str]:
    """The pipelines the records belong to, the one with the newest job first."""
    newest: dict[str, tuple[datetime, str]] = {}
    for rec in records:
        try:
            membership = pipeline_of(rec)
        except JobError:
            continue
        if membership is None:
            continue
        mark = (rec.created_at or ZERO_TIME, rec.id)
        if membership[0] not in newest or mark > newest[membership[0]]:
            newest[membership[0]] = mark
    return sorted(newest, key=lambda name: newest[name], reverse=True)


def changed_views(
    seen: Mapping[str, str], records: Iterable[Record], now: datetime, roster: Roster = UNKNOWN
) -> tuple[dict[str, str], list[dict[str, Any]], list[str]]:
    """For the change stream: ``(what is seen now, the jobs whose view changed, the ids gone)``.

    ``seen`` maps ids to the view last sent, as JSON text; a job is sent
    again only when its view differs from that.
    """
    now_seen: dict[str, str] = {}
    changed: list[dict[str, Any]] = []
    listed = list(records)
    replaced = replacements(listed)
    for rec in listed:
        view = job_view(rec, now, replaced.get(rec.id), roster)
        text = json.dumps(view, sort_keys=True)
        now_seen[rec.id] = text
        if seen.get(rec.id) != text:
            changed.append(view)
    gone = sorted(set(seen) - set(now_seen))
    return now_seen, changed, gone


def changed_pipelines(
    seen: Mapping[str, str], records: Iterable[Record], now: datetime, roster: Roster = UNKNOWN
) -> tuple[dict[str, str], list[dict[str, Any]], list[str]]:
    """As :func:`changed_views`, of pipelines: ``(what is seen now, the pipelines whose view changed, the names gone)``.

    Each view is :func:`pipeline_view`'s over the whole store, made from the
    pipeline's own jobs and the jobs they wait for (whose states a stage's
    detail names), so that one read costs what the store holds, not that
    times the number of pipelines.
    """
    listed = list(records)
    by_id = {rec.id: rec for rec in listed}
    groups: dict[str, list[Record]] = {}
    for rec in listed:
        try:
            membership = pipeline_of(rec)
        except JobError:
            continue
        if membership is not None:
            groups.setdefault(membership[0], []).append(rec)
    now_seen: dict[str, str] = {}
    changed: list[dict[str, Any]] = []
    for name, members in groups.items():
        near = {rec.id for rec in members}
        waited = []
        for rec in members:
            try:
                deps = after_of(rec)
            except JobError:
                continue
            for dep in deps:
                if dep not in near and dep in by_id:
                    near.add(dep)
                    waited.append(by_id[dep])
        view = pipeline_view(members + waited, name, now, roster)
        if view is None:
            continue
        text = json.dumps(view, sort_keys=True)
        now_seen[name] = text
        if seen.get(name) != text:
            changed.append(view)
    gone = sorted(set(seen) - set(now_seen))
    return now_seen, changed, gone
