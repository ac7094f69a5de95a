"""Looking without touching: ``show``, ``list``, ``orphans``. None of these takes a lock."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import click

from ..errors import JobError
from ..record import Record, encode
from ..store.base import Listing
from ..store.file import is_orphan
from ..summary import Summary
from . import render
from .main import EXIT_FAILURE, STATE_CHOICE, STATES_HELP, TEXT, JobCommand, State, common, job_id_argument, pass_state

__all__ = ["show", "list_jobs", "orphans"]


def _dependency_states(state: State, rec: Record) -> dict[str, str]:
    """The states of the jobs ``rec`` waits for, read one by one (a missing one is left out)."""
    from .. import schedule

    states = {rec.id: rec.state}
    try:
        deps = schedule.after_of(rec)
    except JobError:
        return states
    store = state.store()
    for dep in deps:
        try:
            states[dep] = store.load(dep).state
        except JobError:
            pass
    return states


@click.command(cls=JobCommand, short_help="Print one job: its record, or a readable view on a terminal.")
@job_id_argument
@common
@pass_state
def show(state: State, job_id: str) -> None:
    """Print job ID.

    Piped, the record re-encoded canonically: the exact bytes every
    implementation writes. On a terminal, the fields in words (lease time
    left, attempt, what it waits for); with --json, the job object.

    \b
    Example:
      jobctl show 1787202430967-a752f9a9c2c77b123ffd | grep '"state"'
    """
    rec = state.store().load(job_id)
    screen = state.screen()
    if state.json:
        render.out_json(render.job_json(rec, state.now(), _dependency_states(state, rec)))
    elif screen.terminal:
        render.print_job(screen, rec, state.now(), _dependency_states(state, rec))
    else:
        click.echo(encode(rec), nl=False)


def _print_records(
    state: State, records: Iterable[Record], line: Callable[[Record], str], states: dict[str, str], listing: Listing
) -> None:
    """Records as the screen wants them; then, as Go's jobctl, the unreadable ones on stderr and exit 1."""
    recs = list(records)
    screen = state.screen()
    now = state.now()
    if state.json:
        for rec in recs:
            render.out_json(render.job_json(rec, now, states))
    elif screen.terminal:
        render.print_jobs(screen, recs, now, states)
    else:
        for rec in recs:
            render.out(line(rec))
    if listing.unreadable:
        click.echo(render.unreadable_line(listing.unreadable), err=True)
        click.get_current_context().exit(EXIT_FAILURE)


@click.command("list", cls=JobCommand, short_help="List jobs, one line each.")
@click.option("--kind", multiple=True, type=TEXT, metavar="K", help="Only jobs of kind K (repeatable).")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=STATE_CHOICE,
    metavar="STATE",
    help=f"Only jobs in STATE: {STATES_HELP} (repeatable).",
)
@click.option("--owner", type=TEXT, help="Only jobs whose lease names this owner.")
@click.option("--orphans", "only_orphans", is_flag=True, help="Only jobs nobody holds that a worker may adopt.")
@common
@pass_state
def list_jobs(
    state: State, kind: tuple[str, ...], states: tuple[str, ...], owner: str | None, only_orphans: bool
) -> None:
    """List jobs, oldest first: `<id> kind=K state=S done=N checkpoint=C` a line.

    Records that cannot be read are named on stderr after the others, and
    the exit code is then 1, so a half-blind listing never looks complete.

    \b
    Examples:
      jobctl list --state running --kind download
      jobctl list --json | jq -r 'select(.orphan) | .id'
    """
    store = state.store()
    if state.screen().terminal:  # a table is drawn whole: read everything first
        listing = store.list()
        now = store.now()
        every = {rec.id: rec.state for rec in listing}
        chosen = [
            rec
            for rec in listing
            if (not kind or rec.kind in kind)
            and (not states or rec.state in states)
            and (owner is None or rec.lease.owner == owner)
            and (not only_orphans or is_orphan(rec, now))
        ]
        _print_records(state, chosen, render.list_line, every, listing)
        return
    # Piped: a line as each record is read, so the first comes before the scan
    # ends; finished records from the summary cache when it vouches for them.
    now = store.now()
    every = store.list_open().states if state.json else {}  # what dependencies are in, for the JSON
    unreadable: list[tuple[str, JobError]] = []
    lines = render.Lines()
    try:
        for item in store.scan(unreadable, summaries=not state.json):
            if isinstance(item, Summary):
                if (kind and item.kind not in kind) or (states and item.state not in states) or only_orphans:
                    continue  # a summary is of a finished record: never an orphan
                if owner is None or item.owner == owner:
                    lines.out(render.summary_line(item))
                continue
            if (
                (not kind or item.kind in kind)
                and (not states or item.state in states)
                and (owner is None or item.lease.owner == owner)
                and (not only_orphans or is_orphan(item, now))
            ):
                if state.json:
                    lines.out_json(render.job_json(item, now, every))
                else:
                    lines.out(render.list_line(item))
    finally:
        lines.flush()
    if unreadable:
        click.echo(render.unreadable_line(unreadable), err=True)
        click.get_current_context().exit(EXIT_FAILURE)


@click.command(cls=JobCommand, short_help="List jobs nobody holds that a worker may adopt.")
@click.option("--kind", multiple=True, type=TEXT, metavar="K", help="Only jobs of kind K (repeatable).")
@common
@pass_state
def orphans(state: State, kind: tuple[str, ...]) -> None:
    """List orphans: `<id> kind=K state=S checkpoint=C` a line.

    An orphan is not ended, not held, not transferred and not paused (unless
    it was still running when its holder vanished): a new job nobody has
    claimed yet, or one whose holder died or let go. Its checkpoint is where
    the next holder resumes. Unreadable records: as for list.

    \b
    Example:
      jobctl orphans --kind backup | while read -r id rest; do echo "stranded: $id"; done
    """
    store = state.store()
    # The open records, and every record's state: the states of what orphans
    # wait for are shown too, without decoding the finished records [JOB-T1].
    listing = store.list_open()
    now = store.now()
    chosen = [rec for rec in listing if is_orphan(rec, now) and (not kind or rec.kind in kind)]
    _print_records(state, chosen, render.orphan_line, listing.states, listing)
