"""After a job ends: ``retry`` (a new job doing the same work) and ``gc`` (remove old ended jobs)."""

from __future__ import annotations

import click

from .. import limits
from . import render
from .main import TEXT, JobCommand, State, by_option, common, default_by, job_id_argument, pass_state

__all__ = ["retry", "gc"]


@click.command(cls=JobCommand, short_help="Submit a failed or cancelled job again, as a new job.")
@job_id_argument
@click.option(
    "--with-dependents",
    is_flag=True,
    help="Also resubmit the jobs cancelled because this one failed, waiting for the new ids.",
)
@by_option
@common
@pass_state
def retry(state: State, job_id: str, with_dependents: bool, by: str | None) -> None:
    """Submit job ID (failed or cancelled) again as a new job; print `<new id> <old id>`.

    The new job has the old one's kind, spec, total and requires, and its
    scheduling: retry policy (with a fresh count), dependencies, pipeline and
    stage. It links back to ID under the extension key jobctl.run/retry-of@1.
    ID itself is not touched: an ended job is never reopened. A job that was
    held for approval (submit --hold) is held again, by --by, whether it was
    rejected, cancelled or failed after its approval: it needs a new approval.

    A job has one replacement. Its id is derived from ID, so a second retry,
    even one racing this one from another process, makes nothing: it prints
    `<replacement id> <old id>` and exits 19 (retried), naming the
    replacement on stderr.

    --with-dependents also resubmits every job that was cancelled because ID
    failed or was cancelled (and theirs, down the pipeline), each waiting for
    the new ids, so a pipeline resumes from its failed stage; the stages that
    completed are not redone. One line a new job, ID's first. A job that is
    pending, running or complete is refused (10). A job a worker cancelled
    because a dependency ended is refused (20, cancelled_by_dependency): the
    line names the job to retry with --with-dependents instead.

    \b
    Examples:
      jobctl retry 1787202430967-a752f9a9c2c77b123ffd
      new=$(jobctl retry "$ID" | cut -d' ' -f1) && jobctl wait "$new"
      jobctl retry "$FETCH" --with-dependents   # fetch, then the stages it cancelled
    """
    from ..errors import Retried
    from ..lifecycle import retry as resubmit

    store = state.store()
    answers = resubmit(store, job_id, with_dependents, by or default_by())
    for answer in answers:
        if state.json:
            render.out_json(render.job_json(store.load(answer.new), state.now()))
        else:
            render.out(f"{answer.new} {answer.old}")
    first = answers[0]
    if not first.created:
        raise Retried(f"job {first.old} was retried already, as job {first.new}; nothing new was made", first.new)


#: The states a job can end in, in the order the help names them.
ENDED = ("complete", "failed", "cancelled")


def _states(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    if not chosen:  # `--state ,` would remove nothing and say nothing: an empty value, as `--state ''` is
        raise click.BadParameter(f"{text!r} names no state ({', '.join(ENDED)})", param_hint="--state")
    for name in chosen:
        if name not in ENDED:
            raise click.BadParameter(f"{name!r} is not an ended state ({', '.join(ENDED)})", param_hint="--state")
    return chosen


@click.command(cls=JobCommand, short_help="Remove old ended jobs: records, work directories, attempt logs.")
@click.option(
    "--older-than",
    type=TEXT,
    required=True,
    metavar="DURATION",
    help="Only jobs last changed longer ago than this: 90s, 15m, 2h, 7d (at most 3650d, else invalid).",
)
@click.option(
    "--state",
    "states",
    type=TEXT,
    default="complete,failed,cancelled",
    show_default=True,
    metavar="S,…",
    help="Only jobs that ended in these states.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@common
@pass_state
def gc(state: State, older_than: str, states: str, dry_run: bool) -> None:
    """Remove ended jobs last changed more than --older-than ago; print `<id> <state>` for each.

    For each: its attempt logs, its work directory (work/ID), then its
    record, under the record's lock (on a database: its row only; the
    logs and work directories stay on the hosts that ran it). Never
    removed: a job that has not ended, and one that a job staying in the
    store still depends on (--after); those are named on stderr. The lock
    file stays (a record's lock is never deleted). With --dry-run, the same
    lines and nothing removed. With --json, one object a job: id, state,
    removed.

    \b
    Examples:
      jobctl gc --older-than 7d
      jobctl gc --older-than 1d --state complete --dry-run
    """
    from ..lifecycle import collect
    from .submit import parse_duration

    span = parse_duration(older_than, "--older-than", limits.OLDER_THAN)
    store = state.store()
    result = collect(store, span, _states(states), dry_run)
    for rec in result.removed:
        if state.json:
            render.out_json({"id": rec.id, "state": rec.state, "removed": not dry_run})
        else:
            render.out(f"{rec.id} {rec.state}")
    for rec, why in result.kept:
        click.echo(f"jobctl: gc: kept {rec.id}: {why}", err=True)
