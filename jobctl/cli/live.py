"""Following jobs over time: ``watch`` and ``wait``.

Both learn of changes as the worker does -- inotify on Linux
(:mod:`jobctl.notices`), polling elsewhere: ``watch`` through
:class:`jobctl.watch.Watch`, whose notices carry only visible changes -- a
renewal is not one [JOB-N1] -- and ``wait`` by reading the awaited records
again after each change, which is cheaper than listing a large store.
"""

from __future__ import annotations

import os
import time
from typing import Any

import click

from .. import limits
from ..ids import safe as safe_id
from ..notices import Changes
from ..record import Record
from ..store.base import Store
from ..store.file import FileStore
from ..watch import INSURANCE_SECONDS, POLL_SECONDS, Watch
from . import render
from .main import (
    EXIT_CANCELLED,
    EXIT_ENDED_OTHERWISE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    STATE_CHOICE,
    STATES_HELP,
    TEXT,
    JobCommand,
    State,
    common,
    complete_ids,
    pass_state,
    seconds,
)
from .view import STATE_LIST

__all__ = ["watch", "wait", "wait_code"]

#: How often a terminal view is redrawn: lease time left ticks even when nothing changes.
REDRAW_SECONDS = 1.0


@click.command(cls=JobCommand, short_help="Follow jobs as they change: a live table, or a line per change.")
@click.argument("ids", nargs=-1, metavar="[ID]...", type=TEXT, shell_complete=complete_ids)
@click.option("--kind", "kinds", multiple=True, type=TEXT, metavar="K", help="Only jobs of kind K (repeatable).")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=STATE_LIST,
    metavar="STATE[,STATE…]",
    help=f"Only jobs in these states: {STATES_HELP} (a comma list, or repeat the option).",
)
@click.option("--pipeline", type=TEXT, metavar="NAME", help="Only jobs of pipeline NAME.")
@click.option("--active", is_flag=True, help="Only jobs that have not ended (running, pending, held).")
@click.option(
    "--quiet-after",
    type=seconds(limits.QUIET_AFTER),
    metavar="SECONDS",
    help=(
        f"Report quiet once nothing visible has changed for this long, again each period ({limits.QUIET_AFTER.text()})."
    ),
)
@click.option("--exit-on-quiet", is_flag=True, help="Exit 0 at the first quiet (needs --quiet-after).")
@common
@pass_state
def watch(
    state: State,
    ids: tuple[str, ...],
    kinds: tuple[str, ...],
    states: Any,
    pipeline: str | None,
    active: bool,
    quiet_after: float | None,
    exit_on_quiet: bool,
) -> None:
    """Follow jobs (all, those the filters choose, or the IDs given) until interrupted.

    On a terminal: a live table redrawn within a second of a change, fitted
    to the screen: running jobs first, then pending and held ones (oldest
    first), then ended ones (most recently ended first). When the jobs do not all fit, the
    rows at the end are left out and the caption says how many. Piped: first
    one line a job for the present, then one line for every visible change:
    `<id> kind=K state=S done=N total=T owner=O [error=E]`, or `<id> gone`
    when its record is removed. A job that a filter (--state, --active)
    stops choosing gets the line of that change, then no more. A renewal is
    not a visible change. With --json, one event a line. A record that
    cannot be read is named once on stderr (id, path, why), and so is each
    job that waits for one (blocked).

    \b
    Examples:
      jobctl watch --kind download --active
      jobctl watch --pipeline nightly
      jobctl watch "$ID" --quiet-after 300 --exit-on-quiet && echo "stalled for 5 minutes"
    """
    from .view import chosen_states, pipeline_filter

    states = chosen_states(states)
    if exit_on_quiet and quiet_after is None:
        raise click.UsageError("--exit-on-quiet needs --quiet-after")
    store = state.store()
    screen = state.screen()
    wanted = set(ids)
    belongs = pipeline_filter(pipeline)

    def chosen(rec: Record) -> bool:
        return (
            (not wanted or rec.id in wanted)
            and (not kinds or rec.kind in kinds)
            and (not states or rec.state in states)
            and (not active or not rec.terminal)
            and belongs(rec)
        )

    subscription = Watch(store, kinds[0] if len(kinds) == 1 else None)
    seen: dict[str, str] = {}
    said: set[str] = set()
    shown: list[Record] = []
    mark = time.monotonic()
    first = True
    what = " ".join(
        part
        for part in (
            f"of kind {', '.join(kinds)}" if kinds else "",
            f"in pipeline {pipeline}" if pipeline else "",
            f"in state {', '.join(states)}" if states else "",
            "not ended" if active else "",
        )
        if part
    )
    title = "jobs" + (f" {what}" if what else "") + " (Ctrl-C to stop)"
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
                    present = [rec for rec in notice.records if not wanted or rec.id in wanted]
                    shown = [rec for rec in present if chosen(rec)]
                    _say_unreadable(store, subscription, notice.records, said)
                    changed = _report(state, screen.terminal, present, shown, seen, first)
                    if changed or first:
                        mark = time.monotonic()
                    first = False
                if screen.terminal and (screen.live or changed):
                    console = view.console
                    view.show(render.watch_table(shown, state.now(), title, console.width, console.height))
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

    console: Any = None

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def show(self, renderable: object) -> None:
        return None


def _say_unreadable(store: Store, subscription: Watch, records: list[Record], said: set[str]) -> None:
    """One stderr line per record that cannot be read, and per job that waits for one; each once."""
    from .. import schedule
    from ..errors import JobError

    broken = {job_id: exc for job_id, exc in subscription.unreadable}
    for job_id, exc in broken.items():
        if job_id not in said:
            said.add(job_id)
            where = ""
            if isinstance(store, FileStore):
                # A file's name need not be an id load() takes ("a\nb.json"): named as it is, escaped.
                where = " " + (
                    store.path(job_id) if safe_id(job_id) else os.path.join(store.jobs_dir, job_id + ".json")
                )
            line = f"{render.word(job_id)}{render.word(where)}: {render.word(exc.message)}"
            click.echo(f"jobctl: unreadable: {line}", err=True)
    for rec in records:
        if rec.id in said or rec.terminal:
            continue
        try:
            deps = schedule.after_of(rec)
        except JobError:
            continue
        for dep in deps:
            if dep in broken:
                said.add(rec.id)
                click.echo(
                    f"jobctl: blocked: {render.word(rec.id)} waits for {render.word(dep)}, which cannot be read",
                    err=True,
                )
                break


def _report(
    state: State, terminal: bool, present: list[Record], records: list[Record], seen: dict[str, str], first: bool
) -> bool:
    """Print what became visible since the last notice; True when anything did.

    ``records`` are the jobs chosen; ``present`` every job still in the
    store. One that is present but no longer chosen gets its last change
    printed and is then forgotten; ``gone`` is only for a removed record.
    """
    changed = False
    now = state.now()
    chosen = {rec.id for rec in records}
    leaving = [rec for rec in present if rec.id in seen and rec.id not in chosen]
    for rec in [*records, *leaving]:
        line = render.watch_line(rec)
        if seen.get(rec.id) == line:
            if rec.id not in chosen:
                del seen[rec.id]
            continue
        seen[rec.id] = line
        changed = True
        if state.json:
            render.out_json({"event": "change", "job": render.job_json(rec, now)})
        elif not terminal:
            render.out(line)
        if rec.id not in chosen:
            del seen[rec.id]
    still = {rec.id for rec in present}
    for job_id in [job_id for job_id in seen if job_id not in still]:
        del seen[job_id]
        changed = True
        if state.json:
            render.out_json({"event": "gone", "id": job_id})
        elif not terminal:
            render.out(f"{render.word(job_id)} gone")
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
@click.option(
    "--timeout",
    type=seconds(limits.TIMEOUT),
    metavar="SECONDS",
    help=f"Give up after this long, exit 124 ({limits.TIMEOUT.text()}).",
)
@click.option(
    "--fail-fast", is_flag=True, help="Return as soon as one job ends failed or cancelled, not waiting for the rest."
)
@common
@pass_state
@click.pass_context
def wait(
    ctx: click.Context, state: State, ids: tuple[str, ...], goal: str | None, timeout: float | None, fail_fast: bool
) -> None:
    """Block until every job ID has ended (or reached --state); print `<id> <state>` as each settles.

    Exit 0 when every job is complete (or in the --state asked for); 11 when
    one failed, 12 when one was cancelled, 13 when one completed without being
    seen in the --state asked for; 124 on --timeout; 3 for an unknown id. On a
    terminal, a progress bar a job. With --fail-fast, the first job to end
    failed or cancelled ends the wait at once with its code (11 or 12).

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
                    if fail_fast and rec.state in ("failed", "cancelled") and rec.state != goal:
                        break
            failing = [rec for rec in settled.values() if rec.state in ("failed", "cancelled") and rec.state != goal]
            if fail_fast and failing:
                settled = {rec.id: rec for rec in failing[:1]}
                order = [failing[0].id]
                break
            if screen.terminal:
                fingerprint = "\n".join(render.watch_line(rec) for rec in latest.values())
                if screen.live or fingerprint != drawn:
                    pairs = [(i, latest.get(i)) for i in order]
                    view.show(render.wait_table(pairs, state.now(), goal or "the end", view.console.width))
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
