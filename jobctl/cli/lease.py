"""The holder's commands: ``claim``, ``progress``, ``checkpoint``, ``renew``, ``release``, ``finish``.

Every write but ``claim`` presents the epoch its claim returned; the store
refuses a stale one (``stale_epoch``) and a lapsed lease (``lease_expired``)
[JOB-L1] [JOB-L5]. ``JOB_ID`` and ``JOB_EPOCH`` in the environment stand in
for the id and ``--epoch``, so a command run under a lease needs neither.
"""

from __future__ import annotations

import contextlib
from typing import Any

import click

from .. import limits
from ..errors import JobError, NotFound
from ..record import Record
from ..store.base import UNSET
from . import render
from .main import (
    PATH_TEXT,
    STATE_CHOICE,
    STATES_HELP,
    TEXT,
    JobCommand,
    State,
    common,
    complete_ids,
    count,
    default_by,
    epoch_option,
    job_id_argument,
    json_given,
    pass_state,
    ttl_option,
)

__all__ = ["claim", "progress", "checkpoint", "renew", "release", "finish"]


class NothingToClaim(NotFound):
    """``claim --next`` found no runnable job: the not_found class, with its own advice."""

    hint = "nothing to do now; submit a job, or try again later"


def _emit(state: State, rec: Record, line: str) -> None:
    if state.json:
        render.out_json(render.job_json(rec, state.now()))
    else:
        render.out(line)


def _claim_next(state: State, owner: str, ttl: float, kinds: tuple[str, ...]) -> Record:
    """Claim the first runnable orphan (of those kinds), by priority then age: the cron consumer's one step."""
    store = state.lease_store(ttl)
    # A record with malformed scheduling data is left out (and named) so that
    # it cannot stop every other job from being claimed. Its dependents wait.
    skipped: list[tuple[str, JobError]] = []
    unreadable: list[tuple[str, JobError]] = []
    claimed = store.claim_next(owner, ttl, kinds or None, skipped=skipped, unreadable=unreadable)
    if unreadable:
        click.echo(render.unreadable_line(unreadable), err=True)
    for job_id, exc in skipped:
        click.echo(f"jobctl: {job_id}: skipped: {exc.message}", err=True)
    if claimed is not None:
        return claimed
    what = f" of kind {', '.join(kinds)}" if kinds else ""
    raise NothingToClaim(f"no runnable job{what}")


@click.command(cls=JobCommand, short_help="Take a job's lease; print its epoch and checkpoint.")
@click.argument("job_id", metavar="[ID]", envvar="JOB_ID", type=TEXT, required=False, shell_complete=complete_ids)
@click.option("--next", "take_next", is_flag=True, help="Claim the first runnable orphan (priority, then age).")
@click.option("--kind", multiple=True, type=TEXT, metavar="K", help="With --next: only jobs of kind K (repeatable).")
@click.option(
    "--owner",
    type=TEXT,
    envvar="JOB_OWNER",
    show_envvar=True,
    help="Who is taking it. [default: jobctl@HOST:PID]",
)
@ttl_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["line", "env", "json"]),
    default="line",
    show_default=True,
    help="line: `epoch=N state=S checkpoint=C`; env: JOB_ID=… JOB_EPOCH=… for eval; json: as --json.",
)
@click.option(
    "--quiet", "-q", is_flag=True, help="With --next: nothing runnable exits 3 and prints nothing (errors still print)."
)
@common
@pass_state
@click.pass_context
def claim(
    ctx: click.Context,
    state: State,
    job_id: str | None,
    take_next: bool,
    kind: tuple[str, ...],
    owner: str | None,
    ttl: float,
    fmt: str,
    quiet: bool,
) -> None:
    """Take the lease of job ID (or, with --next, of the first runnable orphan).

    The epoch rises by one; present it on every later write. The checkpoint
    printed is what the previous holder left for a successor. A job another
    owner holds is refused (lease_held); so is one that has ended (terminal).

    With --next, the job is the orphan of the highest priority (submit
    --priority), the oldest among equals, whose dependencies are complete,
    whose not-before time has passed and that is not paused; the line
    starts with its id. Nothing runnable exits 3 (not_found); with -q
    it says nothing, so cron mails only real errors. A claim whose line
    nobody can read (stdout closed, `| head -0`) is given back at once and
    exits 141: nobody has its epoch.

    \b
    Examples:
      jobctl claim 1787202430967-a752f9a9c2c77b123ffd --owner "$HOSTNAME" --ttl 60
      vars=$(jobctl claim --next -q --kind backup --format env) || exit 0
      eval "export $vars"
    """
    from_env = ctx.get_parameter_source("job_id") == click.core.ParameterSource.ENVIRONMENT
    if take_next:
        if job_id and not from_env:
            raise click.UsageError("--next chooses the job itself; name no ID with it")
    else:
        if not job_id:
            raise click.UsageError("claim needs a job id (or --next)")
        if kind:
            raise click.UsageError("--kind only narrows --next")
    who = owner or default_by()
    if quiet and not take_next:
        raise click.UsageError("-q/--quiet goes with --next")
    if take_next:
        try:
            rec = _claim_next(state, who, ttl, kind)
        except NothingToClaim:
            if not quiet:
                raise
            ctx.exit(NothingToClaim.exit_code)
    else:
        assert job_id is not None
        rec = state.lease_store(ttl).claim(job_id, who, ttl)
    try:
        if fmt == "json" or state.json:
            render.out_json(render.job_json(rec, state.now()))
        elif fmt == "env":
            render.out(render.env_line(rec))
        else:
            render.out(render.next_line(rec) if take_next else render.claim_line(rec))
    except BrokenPipeError:
        # Nobody read the epoch, so nobody can work under this lease: give it back at once
        # rather than leave the job stranded for its TTL. Exits 141 all the same.
        with contextlib.suppress(JobError, OSError):
            state.lease_store(ttl).release(rec.id, rec.lease.epoch)
        raise


@click.command(cls=JobCommand, short_help="Record work done (and a checkpoint) as the holder.")
@job_id_argument
@epoch_option
@click.option(
    "--done",
    type=count(limits.DONE),
    metavar="N",
    default=0,
    show_default=True,
    help=f"Work done, in the kind's own units ({limits.DONE.text()}).",
)
@click.option(
    "--checkpoint", type=PATH_TEXT, metavar="JSON", help="What a successor needs to resume: JSON, @FILE or -."
)
@common
@pass_state
def progress(state: State, job_id: str, epoch: int, done: int, checkpoint: str | None) -> None:
    """Record how far the holder of ID got, and optionally a new checkpoint.

    As upstream: --done defaults to 0 and is always written. To record a
    checkpoint without touching done, use `jobctl checkpoint`.

    \b
    Example:
      jobctl progress "$JOB_ID" --epoch "$JOB_EPOCH" --done 4096 --checkpoint '{"offset": 4096}'
    """
    # Read now, judged by the store after the record's verdicts (terminal, stale epoch, lapsed lease).
    value: Any = UNSET if checkpoint is None else json_given(checkpoint, "--checkpoint")
    rec = state.store().progress(job_id, epoch, done, checkpoint=value)
    _emit(state, rec, render.progress_line(rec))


@click.command(cls=JobCommand, short_help="Record what a successor needs to resume.")
@click.argument("args", nargs=-1, metavar="[ID] CHECKPOINT")
@epoch_option
@click.option(
    "--done",
    type=count(limits.DONE),
    metavar="N",
    help=f"Also record the work done ({limits.DONE.text()}). [default: leave it]",
)
@common
@pass_state
def checkpoint(state: State, args: tuple[str, ...], epoch: int, done: int | None) -> None:
    """Replace the checkpoint of ID (default $JOB_ID) with CHECKPOINT, as its holder.

    CHECKPOINT is JSON (inline, @FILE, or - for stdin), kept token for
    token. A successor's claim prints it, so it should say everything the
    next holder needs to resume.

    \b
    Example (under a lease, with JOB_ID and JOB_EPOCH exported):
      jobctl checkpoint '{"offset": 4096}' --done 4096
    """
    if len(args) == 1:
        job_id, text = state.env.get("JOB_ID", ""), args[0]
        if not job_id:
            raise click.UsageError("checkpoint needs a job id: name it, or set JOB_ID")
    elif len(args) == 2:
        job_id, text = args
    elif not args:
        raise click.UsageError("checkpoint needs the checkpoint JSON")
    else:
        raise click.UsageError(f"checkpoint does not know what to do with {args[2]!r}")
    if job_id == "":
        raise click.BadParameter("wants a value, not an empty string", param_hint="ID")
    value = json_given(PATH_TEXT.convert(text, None, None), "CHECKPOINT")
    store = state.store()
    if done is None:

        def put(rec: Record) -> None:
            rec.checkpoint = value.raw(job_id)  # the mutation's own error: after the record's verdicts

        rec = store.update(job_id, epoch, put)
    else:
        rec = store.progress(job_id, epoch, done, checkpoint=value)
    _emit(state, rec, render.progress_line(rec))


@click.command(cls=JobCommand, short_help="Extend the lease you hold.")
@job_id_argument
@epoch_option
@ttl_option
@common
@pass_state
def renew(state: State, job_id: str, epoch: int, ttl: float) -> None:
    """Extend the lease of ID to --ttl seconds from now (never past a recall's deadline).

    A renewal is not a visible change: watchers are not woken by it.

    \b
    Example:
      while sleep 20; do jobctl renew --ttl 60 || break; done &
    """
    rec = state.lease_store(ttl).renew(job_id, epoch, ttl)
    _emit(state, rec, render.renew_line(rec))


@click.command(cls=JobCommand, short_help="Give the lease up; the job becomes an orphan.")
@job_id_argument
@epoch_option
@common
@pass_state
def release(state: State, job_id: str, epoch: int) -> None:
    """Give up the lease of ID: running becomes pending and any worker may claim it.

    The checkpoint stays for the next holder.

    \b
    Example:
      jobctl release "$JOB_ID" --epoch "$JOB_EPOCH"
    """
    rec = state.store().release(job_id, epoch)
    _emit(state, rec, render.state_line(rec))


def _need_state(ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    # Upstream's jobctl defaults to transferred: a job nobody then runs or
    # finishes, which nobody who types `finish` means. So there is no default.
    if value is None and not ctx.resilient_parsing:
        raise click.UsageError(f"finish needs --state: one of {STATES_HELP}", ctx=ctx)
    return value or ""


@click.command(cls=JobCommand, short_help="Set the job's state as its holder (complete, failed, …).")
@job_id_argument
@epoch_option
@click.option(
    "--state",
    "new_state",
    type=STATE_CHOICE,
    metavar="STATE",
    callback=_need_state,
    help=f"The state to set: {STATES_HELP}. Required (upstream's jobctl defaults to transferred).",
)
@click.option("--error", type=TEXT, help="Why it failed, in the same write.")
@click.option(
    "--checkpoint", type=PATH_TEXT, metavar="JSON", help="The last checkpoint, in the same write: JSON, @FILE or -."
)
@click.option(
    "--done",
    type=count(limits.DONE),
    metavar="N",
    help=f"The final work done, in the same write ({limits.DONE.text()}).",
)
@common
@pass_state
def finish(
    state: State,
    job_id: str,
    epoch: int,
    new_state: str,
    error: str | None,
    checkpoint: str | None,
    done: int | None,
) -> None:
    """Set the state of ID as its holder; --error, --checkpoint and --done travel in the same write.

    Once complete, failed or cancelled, a job refuses every later write, so
    whatever must be recorded goes in this one [JOB-T4].

    --state is required. This differs from upstream's jobctl, where `finish`
    without --state sets transferred (handed to an external system): such a
    job is neither runnable nor finished, `claim --next` passes it over and
    `wait` waits for it until its timeout. Say --state transferred to mean it.

    \b
    Examples:
      jobctl finish --state complete --done 1048576
      jobctl finish "$JOB_ID" --epoch "$JOB_EPOCH" --state failed --error "exit 3 from rsync"
    """
    # Read now, judged by the store after the record's verdicts (terminal, stale epoch, lapsed lease).
    value: Any = UNSET if checkpoint is None else json_given(checkpoint, "--checkpoint")
    rec = state.store().finish(job_id, epoch, new_state, error=error, checkpoint=value, done=done)
    _emit(state, rec, render.state_line(rec))
