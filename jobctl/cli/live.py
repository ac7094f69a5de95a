"""Following jobs over time: ``watch`` and ``wait``.

Both learn of changes as the worker does -- inotify on Linux
(:mod:`jobctl.notices`), polling elsewhere: ``watch`` through
:class:`jobctl.watch.Watch`, whose notices carry only visible changes -- a
renewal is not one [JOB-N1] -- and ``wait`` by reading the awaited records
again after each change, which is cheaper than listing a large store.
"""

from __future__ import annotations

import time

import click

from ..notices import Changes
from ..record import Record
from ..watch import INSURANCE_SECONDS, POLL_SECONDS, Watch
from . import render
from .main import (
    EXIT_CANCELLED,
    EXIT_ENDED_OTHERWISE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    SECONDS,
    STATE_CHOICE,
    STATES_HELP,
    TEXT,
    JobCommand,
    State,
    common,
    complete_ids,
    pass_state,
)

__all__ = ["watch", "wait", "wait_code"]

#: How often a terminal view is redrawn: lease time left ticks even when nothing changes.
REDRAW_SECONDS = 1.0


@click.command(cls=JobCommand, short_help="Follow jobs as they change: a live table, or a line per change.")
@click.argument("ids", nargs=-1, metavar="[ID]...", type=TEXT, shell_complete=complete_ids)
@click.option("--kind", type=TEXT, metavar="K", help="Only jobs of kind K.")
@click.option(
    "--quiet-after",
    type=SECONDS,
    metavar="SECONDS",
    help="Report quiet once nothing visible has changed for this long (again each period).",
)
@click.option("--exit-on-quiet", is_flag=True, help="Exit 0 at the first quiet (needs --quiet-after).")
@common
@pass_state
def watch(state: State, ids: tuple[str, ...], kind: str | None, quiet_after: float | None, exit_on_quiet: bool) -> None:
    """Follow jobs (all, those of --kind, or the IDs given) until interrupted.

    On a terminal: a live table (state, progress bar, owner, lease time
    left, intent, recall) redrawn within a second of a change. Piped: first
    one line a job for the present, then one line for every visible change:
    `<id> kind=K state=S done=N total=T owner=O [error=E]`, or `<id> gone`.
    A renewal is not a visible change. With --json, one event a line.

    \b
    Examples:
      jobctl watch --kind download
      jobctl watch "$ID" --quiet-after 300 --exit-on-quiet && echo "stalled for 5 minutes"
    """
    if exit_on_quiet and quiet_after is None:
        raise click.UsageError("--exit-on-quiet needs --quiet-after")
    store = state.store()
    screen = state.screen()
    wanted = set(ids)
    subscription = Watch(store, kind)
    seen: dict[str, str] = {}
    shown: list[Record] = []
    mark = time.monotonic()
    first = True
    try:
        with render.LiveTable(screen) if screen.terminal else _Nothing() as view:
            while True:
                waits = []
                if screen.terminal:
                    waits.append(REDRAW_SECONDS)
                if quiet_after is not None:
                    waits.append(max(0.0, mark + quiet_after - time.monotonic()))
                notice = subscription.next(min(waits) if waits else None)
                changed = False
                if notice is not None and notice.what == "changed":
                    shown = [rec for rec in notice.records if not wanted or rec.id in wanted]
                    changed = _report(state, screen.terminal, shown, seen, first)
                    if changed or first:
                        mark = time.monotonic()
                    first = False
                if screen.terminal and (screen.live or changed):
                    title = "jobs" + (f" of kind {kind}" if kind else "") + " (Ctrl-C to stop)"
                    view.show(render.watch_table(shown, state.now(), title))
                if quiet_after is not None and time.monotonic() - mark >= quiet_after:
                    if state.json:
                        render.out_json({"event": "quiet", "seconds": quiet_after})
                    if exit_on_quiet:
                        return
                    mark = time.monotonic()
    except KeyboardInterrupt:
        return  # the way to stop watching, not a failure


class _Nothing:
    """The view of a piped watch: lines are printed as they come, nothing is drawn."""

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def show(self, renderable: object) -> None:
        return None


def _report(state: State, terminal: bool, records: list[Record], seen: dict[str, str], first: bool) -> bool:
    """Print what became visible since the last notice; True when anything did."""
    changed = False
    now = state.now()
    present = set()
    for rec in records:
        present.add(rec.id)
        line = render.watch_line(rec)
        if seen.get(rec.id) == line:
            continue
        seen[rec.id] = line
        changed = True
        if state.json:
            render.out_json({"event": "change", "job": render.job_json(rec, now)})
        elif not terminal:
            render.out(line)
    for job_id in [job_id for job_id in seen if job_id not in present]:
        del seen[job_id]
        changed = True
        if state.json:
            render.out_json({"event": "gone", "id": job_id})
        elif not terminal:
            render.out(f"{job_id} gone")
    return changed or first


def wait_code(records: list[Record], goal: str | None) -> int:
    """How a set of settled jobs ended, as ``wait`` exits: 0 when each reached the goal."""
    target = goal or "complete"
    ended = {rec.state for rec in records if rec.state != target}
    if "failed" in ended:
        return EXIT_FAILED
    if "cancelled" in ended:
        return EXIT_CANCELLED
    if ended:
        return EXIT_ENDED_OTHERWISE
    return EXIT_OK


@click.command(cls=JobCommand, short_help="Block until jobs end (or reach a state); the exit code says how.")
@click.argument("ids", nargs=-1, required=True, metavar="ID...", type=TEXT, shell_complete=complete_ids)
@click.option(
    "--state",
    "goal",
    type=STATE_CHOICE,
    metavar="STATE",
    help=f"Wait until each job is in STATE ({STATES_HELP}) or has ended.",
)
@click.option("--timeout", type=SECONDS, metavar="SECONDS", help="Give up after this long (exit 124).")
@common
@pass_state
@click.pass_context
def wait(ctx: click.Context, state: State, ids: tuple[str, ...], goal: str | None, timeout: float | None) -> None:
    """Block until every job ID has ended (or reached --state); print `<id> <state>` as each settles.

    Exit 0 when every job is complete (or in the --state asked for); 11 when
    one failed, 12 when one was cancelled, 13 when one completed without being
    seen in the --state asked for; 124 on --timeout; 3 for an unknown id. On a
    terminal, a progress bar a job.

    \b
    Examples:
      jobctl wait "$FETCH" "$BUILD" --timeout 3600 && jobctl submit --kind publish
      jobctl wait "$ID" --state running   # until somebody has claimed it
    """
    store = state.store()
    screen = state.screen()
    changes = Changes(store)  # before the first read: a change in between is seen, never missed
    ctx.call_on_close(changes.close)
    order = list(dict.fromkeys(ids))
    deadline = None if timeout is None else time.monotonic() + timeout
    # Every id is read once before anything is printed: an unknown one ends the
    # wait at once (not_found), not after the others have been reported.
    latest: dict[str, Record] = {job_id: store.load(job_id) for job_id in order}
    settled: dict[str, Record] = {}
    with render.LiveTable(screen) if screen.terminal else _Nothing() as view:
        drawn = ""
        first_pass = True
        while True:
            for job_id in order:
                if job_id in settled:
                    continue
                rec = latest[job_id] if first_pass else store.load(job_id)
                latest[job_id] = rec
                if rec.terminal or (goal is not None and rec.state == goal):
                    settled[job_id] = rec
                    if state.json:
                        render.out_json(render.job_json(rec, state.now()))
                    elif not screen.terminal:
                        render.out(f"{rec.id} {rec.state}")
            if screen.terminal:
                fingerprint = "\n".join(render.watch_line(rec) for rec in latest.values())
                if screen.live or fingerprint != drawn:
                    view.show(render.wait_table([(i, latest.get(i)) for i in order], state.now(), goal or "the end"))
                    drawn = fingerprint
            first_pass = False
            if len(settled) == len(order):
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                waiting = [job_id for job_id in order if job_id not in settled]
                click.echo(
                    f"jobctl: timeout: {len(waiting)} of {len(order)} job(s) not settled after {timeout:g}s: "
                    + ", ".join(f"{job_id} ({latest[job_id].state})" for job_id in waiting),
                    err=True,
                )
                ctx.exit(EXIT_TIMEOUT)
            # A terminal view ticks (lease time left); a piped one waits for a change.
            pause = POLL_SECONDS if screen.terminal or not changes.watching else INSURANCE_SECONDS
            if deadline is not None:
                pause = min(pause, deadline - now)
            changes.wait(max(pause, 0.0))
    ended = [settled[job_id] for job_id in order]
    code = wait_code(ended, goal)
    if code:
        target = goal or "complete"
        missed = [rec for rec in ended if rec.state != target]
        click.echo(
            f"jobctl: {len(missed)} job(s) ended without reaching {target}: "
            + ", ".join(f"{rec.id} {rec.state}" + (f" ({rec.error})" if rec.error else "") for rec in missed),
            err=True,
        )
        ctx.exit(code)
