"""``jobctl schedule add/list/remove``: recurring schedules kept in the store, fired by every worker."""

from __future__ import annotations

import click

from .. import timetable
from ..errors import Exists, NotFound
from ..recurring import Schedule
from ..store.base import Unreadable
from . import render
from .main import JSON_TEXT, TEXT, JobCommand, State, common, pass_state
from .params import env_option
from .render.schedules import print_schedules, schedule_json, schedule_line
from .submit import kind_and_spec

__all__ = ["schedule"]


class ScheduleGroup(click.Group, JobCommand):
    """A group that takes upstream's flag spellings like every other command."""


@click.group(cls=ScheduleGroup, short_help="Recurring jobs kept in the store: add, list, remove.")
def schedule() -> None:
    """Recurring jobs kept in the store, fired by every running worker.

    A schedule names a job (--kind and --spec, or a command after --) and
    when it recurs: --every DURATION, on the multiples of DURATION since
    1970-01-01 UTC, or --cron "m h dom mon dow", a cron line read in UTC.
    Every `jobctl worker` on the store, on any host, fires the slots that
    come due: each slot becomes exactly one job (its id derived from the
    schedule's name and the slot), however many workers run. Slots missed
    while no worker ran become one job, the latest of them, not one each.

    \b
    Examples:
      jobctl schedule add nightly-backup --cron "30 2 * * *" -- ./backup.sh
      jobctl schedule add heartbeat --every 5m --kind ping --spec '{"url": "https://example.com/"}'
      jobctl schedule list
      jobctl schedule remove heartbeat
    """


@schedule.command("add", cls=JobCommand, short_help="Add a recurring schedule; print it.")
@click.argument("name", type=TEXT)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD...]")
@click.option("--every", type=TEXT, metavar="DURATION", help="A slot every DURATION: 90s, 15m, 2h, 1d (1s to 365d).")
@click.option(
    "--cron",
    "cron_line",
    type=TEXT,
    metavar="LINE",
    help='A slot at each minute the cron line names, in UTC: "m h dom mon dow".',
)
@click.option("--kind", type=TEXT, help="The kind of each slot's job. [default: shell with -- CMD; else required]")
@click.option(
    "--spec", type=JSON_TEXT, help="Each job's spec: a JSON object, inline, @FILE, or - for stdin. [default: {}]"
)
@env_option
@click.option(
    "--by", type=TEXT, metavar="NAME", help="Who adds it, kept as each job's submitter. [default: $USER@HOST]"
)
@common
@pass_state
def add(
    state: State,
    name: str,
    command: tuple[str, ...],
    every: str | None,
    cron_line: str | None,
    kind: str | None,
    spec: str | None,
    env_pairs: tuple[str, ...],
    by: str | None,
) -> None:
    """Add schedule NAME and print it as `schedule list` does.

    Exactly one of --every and --cron. The job is --kind with --spec, or a
    `shell` job running the words after -- in this directory, as `submit`
    makes one. The first slot is the first at or after now (the store's
    clock). A NAME is refused as a job id would be (blank, a leading dot, a
    / or \\, a control character) or when longer than 100 characters;
    --every 0, negative, fractional or over 365d, and a cron line that
    cannot be read (the refusal names its field) are `invalid` (exit 9). A
    NAME the store has already is refused `exists` (exit 15).

    \b
    Examples:
      jobctl schedule add nightly-backup --cron "30 2 * * *" -- ./backup.sh
      jobctl schedule add weekdays --cron "0 9 * * mon-fri" --kind report --spec '{"to": "team"}'
      jobctl schedule add heartbeat --every 5m -- curl -fsS https://example.com/
    """
    from ..submitter import default_submitter

    if (every is None) == (cron_line is None):
        raise click.UsageError("give --every DURATION or --cron LINE (one of them)")
    kind, spec = kind_and_spec(command, kind, spec, env_pairs)
    store = state.store(create=True)
    try:
        sched = timetable.add(
            store, name, kind=kind, spec="{}" if spec is None else spec, every=every, cron=cron_line,
            by=by or default_submitter(),
        )  # fmt: skip
    except Exists as exc:
        exc.hint = f"nothing was changed; to replace it: jobctl schedule remove {name}, then add it again"
        raise
    _print(state, [sched])


@schedule.command("list", cls=JobCommand, short_help="List the schedules and their next slots.")
@common
@pass_state
def list_schedules(state: State) -> None:
    """List every schedule, sorted by name, with its next slot and the latest fired.

    Piped: a line a schedule, tab-separated: name, how it recurs, next slot,
    latest slot fired (- before the first), kind. With --json: an object a
    line. A schedule that cannot be read is named on stderr, and the exit is 1.

    \b
    Example:
      jobctl schedule list
    """
    store = state.store()
    unreadable: Unreadable = []
    scheds = timetable.listing(store, unreadable)
    _print(state, scheds)
    if unreadable:
        names = ", ".join(name for name, _ in unreadable)
        click.echo(f"jobctl: {len(unreadable)} schedule(s) could not be read ({names}): {unreadable[0][1]}", err=True)
        raise SystemExit(1)


@schedule.command("remove", cls=JobCommand, short_help="Remove a schedule: no worker fires it again.")
@click.argument("name", type=TEXT)
@common
@pass_state
def remove(state: State, name: str) -> None:
    """Remove schedule NAME and print its name; the jobs it fired stay.

    A NAME the store does not have is refused `not_found` (exit 3).

    \b
    Example:
      jobctl schedule remove heartbeat
    """
    if not timetable.remove(state.store(), name):
        err = NotFound(f"no schedule {name}", name)
        err.hint = "jobctl schedule list shows every schedule"
        raise err
    if state.json:
        render.out_json({"name": name, "removed": True})
    else:
        render.out(name)


def _print(state: State, scheds: list[Schedule]) -> None:
    now = state.now()
    if state.json:
        for sched in scheds:
            render.out_json(schedule_json(sched, now))
    elif state.screen().terminal:
        print_schedules(state.screen(), scheds, now)
    else:
        for sched in scheds:
            render.out(schedule_line(sched, now))
