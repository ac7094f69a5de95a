"""Asking a holder from outside: ``intent``, ``approve``, ``recall``, ``cancel``.

None of these needs the lease: whoever wants a job paused, resumed or
stopped is not the process doing it [JOB-I3].
"""

from __future__ import annotations

from typing import Any

import click

from .. import limits
from ..record import WANTS, Record
from . import render
from .main import (
    COUNT,
    TEXT,
    JobCommand,
    State,
    by_option,
    common,
    complete_ids,
    default_by,
    job_id_argument,
    pass_state,
    seconds,
)

__all__ = ["intent", "approve", "recall", "cancel"]


def _emit(state: State, rec: Record, line: str) -> None:
    if state.json:
        render.out_json(render.job_json(rec, state.now()))
    else:
        render.out(line)


def _complete_intent(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """The first word is a job id (or, with $JOB_ID set, already the intent); after it, run, pause or cancel."""
    from click.shell_completion import CompletionItem

    given = ctx.params.get("args") or ()
    wants = [CompletionItem(w) for w in WANTS if w.startswith(incomplete)]
    if given:
        return wants if len(given) == 1 else []
    return complete_ids(ctx, param, incomplete) + wants


@click.command(cls=JobCommand, short_help="Say what should happen to a job: run, pause or cancel.")
@click.argument("args", nargs=-1, metavar="[ID] run|pause|cancel", shell_complete=_complete_intent)
@by_option
@common
@pass_state
def intent(state: State, args: tuple[str, ...], by: str | None) -> None:
    """Record what should happen to ID (default $JOB_ID): run, pause or cancel.

    The holder reads the intent before it starts and at every checkpoint:
    pause makes it release the job, cancel makes it end it. A paused job is
    not an orphan, so nothing adopts it until somebody asks for run again.

    \b
    Examples:
      jobctl intent 1787202430967-a752f9a9c2c77b123ffd pause --by ops
      jobctl intent 1787202430967-a752f9a9c2c77b123ffd run
    """
    if len(args) == 2:
        job_id, want = args
    elif len(args) == 1:
        job_id, want = state.env.get("JOB_ID", ""), args[0]
        if not job_id:
            raise click.UsageError("intent needs a job id and run|pause|cancel")
    elif not args:
        raise click.UsageError("intent needs a job id and run|pause|cancel")
    else:
        raise click.UsageError(f"intent does not know what to do with {args[2]!r}")
    if job_id == "":
        raise click.BadParameter("wants a value, not an empty string", param_hint="ID")
    if want not in WANTS:
        raise click.BadParameter(f"{want!r} is not run, pause or cancel", param_hint="WANT")
    rec = state.store().set_intent(job_id, want, by or default_by())
    _emit(state, rec, render.intent_line(rec))


@click.command(cls=JobCommand, short_help="Let a held (paused) job run: `intent ID run`.")
@job_id_argument
@by_option
@common
@pass_state
def approve(state: State, job_id: str, by: str | None) -> None:
    """Let job ID run: the same as `jobctl intent ID run`.

    The way to release a job submitted with --hold, once somebody has looked.

    \b
    Example:
      jobctl approve 1787202430967-a752f9a9c2c77b123ffd --by alice
    """
    rec = state.store().set_intent(job_id, "run", by or default_by())
    _emit(state, rec, render.intent_line(rec))


@click.command(cls=JobCommand, short_help="Ask the holder to give the lease back within a grace period.")
@job_id_argument
@click.option(
    "--epoch",
    type=COUNT,
    metavar="N",
    help=(
        f"The epoch you saw ({limits.EPOCH.text()}); a recall decided against it never lands on a later holder. "
        "[default: the current one]"
    ),
)
@click.option("--reason", type=TEXT, required=True, help="Why, in words the holder can act on.")
@click.option(
    "--grace",
    type=seconds(limits.RECALL_GRACE),
    default=30.0,
    show_default=True,
    help=f"Seconds the holder has to give it back ({limits.RECALL_GRACE.text()}).",
)
@by_option
@common
@pass_state
def recall(state: State, job_id: str, epoch: int | None, reason: str, grace: float, by: str | None) -> None:
    """Ask the holder of ID for the lease back within --grace seconds.

    The holder may checkpoint and release until then; after that its lease
    has lapsed and its writes are refused. Prints when the grace ends.

    \b
    Example:
      jobctl recall 1787202430967-a752f9a9c2c77b123ffd --epoch 3 --reason "host going down" --grace 60
    """
    store = state.store()
    if epoch is None:
        epoch = store.load(job_id).lease.epoch
    rec = store.recall(job_id, epoch, reason, by or default_by(), grace)
    _emit(state, rec, render.recall_line(rec))


@click.command(cls=JobCommand, short_help="Stop a job: now if nobody holds it, else ask its holder.")
@job_id_argument
@by_option
@click.option("--reason", type=TEXT, help="Why: in the error the job ends with, whoever ends it.")
@common
@pass_state
def cancel(state: State, job_id: str, by: str | None, reason: str | None) -> None:
    """Cancel job ID and print its state.

    If nobody holds it, it is cancelled at once. If somebody does, the intent
    cancel is recorded and the holder ends it at its next checkpoint; the
    state printed is then still the holder's. Cancelling a cancelled job is
    not an error.

    The job ends with the error `cancelled at the request of BY`, then
    `: REASON` with --reason, whether this command or its holder ends it. A
    job held for approval (submit --hold) is claimed before its intent is set,
    so no worker starts it in between.

    \b
    Examples:
      jobctl cancel 1787202430967-a752f9a9c2c77b123ffd
      jobctl cancel "$ID" --by alice --reason "wrong voice"
    """
    rec = state.store().cancel(job_id, by or default_by(), reason=reason or "")
    _emit(state, rec, render.cancel_line(rec))
