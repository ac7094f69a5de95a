"""``jobctl submit``: write a new job, with jobctl's scheduling choices if asked."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import click

from ..errors import Invalid
from ..record import Progress, Record, parse_time
from . import render
from .main import COUNT, JSON_TEXT, TEXT, JobCommand, State, common, default_by, pass_state, raw_json

__all__ = ["submit", "parse_when"]

_DELAY = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)\Z")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_when(text: str, now: datetime) -> datetime:
    """``--not-before``: an RFC 3339 instant, or a delay from now (``90``, ``90s``, ``15m``, ``2h``, ``1d``)."""
    match = _DELAY.match(text.strip())
    if match is not None:
        return now + timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    when = parse_time(text, "--not-before")
    if when is None:
        raise Invalid("--not-before wants a time")
    return when


def _codes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not 0 <= int(part) <= 255:
            raise Invalid(f"--no-retry-on: {part!r} is not an exit code 0..255")
        out.append(int(part))
    return out


@click.command(cls=JobCommand, short_help="Submit a job; print its id.")
@click.option("--kind", type=TEXT, required=True, help="What the job is: who can read its spec.")
@click.option(
    "--spec",
    type=JSON_TEXT,
    default="{}",
    show_default=True,
    help="The job's spec: a JSON object, inline, @FILE, or - for stdin. Kept byte for byte.",
)
@click.option(
    "--total", type=COUNT, metavar="N", default=0, show_default=True, help="Total work, in the kind's own units."
)
@click.option("--requires", type=TEXT, metavar="A,B", help="Capabilities an implementation must have, comma-separated.")
@click.option(
    "--id", "job_id", type=TEXT, metavar="ID", help="Use this id instead of minting one (refused if it exists)."
)
@click.option("--hold", is_flag=True, help="Submit paused: nothing adopts it until `jobctl intent ID run`.")
@click.option(
    "--retries", type=COUNT, metavar="N", help="Retry a failed run this many times (jobctl run / jobctl worker)."
)
@click.option(
    "--retry-intervals",
    type=TEXT,
    metavar="S,S,…",
    help="Seconds to wait before each retry. [default: $JOB_RETRY_INTERVALS or 10,30,60,120,240,…]",
)
@click.option("--no-retry-on", type=TEXT, metavar="CODE,…", help="Exit codes that fail the job at once.")
@click.option(
    "--after", multiple=True, type=TEXT, metavar="ID", help="Start only once job ID is complete (repeatable)."
)
@click.option("--pipeline", type=TEXT, metavar="NAME", help="The pipeline this job belongs to (for display).")
@click.option("--stage", type=TEXT, metavar="NAME", help="Its stage in that pipeline. [default: the kind]")
@click.option(
    "--not-before", type=TEXT, metavar="WHEN", help="Do not start before WHEN: RFC 3339, or a delay (90s, 15m, 2h)."
)
@click.option("--by", type=TEXT, help="Who holds it (with --hold). [default: jobctl@HOST:PID]")
@common
@pass_state
def submit(
    state: State,
    kind: str,
    spec: str,
    total: int,
    requires: str | None,
    job_id: str | None,
    hold: bool,
    retries: int | None,
    retry_intervals: str | None,
    no_retry_on: str | None,
    after: tuple[str, ...],
    pipeline: str | None,
    stage: str | None,
    not_before: str | None,
    by: str | None,
) -> None:
    """Submit a job and print its id.

    The spec is opaque to jobctl: it is validated as JSON and kept token for
    token. The job starts pending, with no lease; any worker may claim it.
    The scheduling options (--retries, --after, --pipeline, --not-before,
    --hold) are jobctl's own extension keys, carried untouched by every other
    implementation.

    \b
    Examples:
      jobctl submit --kind download --spec '{"url": "https://example.com/a.iso"}'
      jobctl submit --kind report --spec @report.json --after "$FETCH_ID" --retries 3
      id=$(jobctl submit --kind backup --hold) && jobctl approve "$id"
    """
    if stage and not pipeline:
        raise click.UsageError("--stage needs --pipeline")
    rec = Record(id=job_id or "", kind=kind, spec=raw_json(spec, "--spec"), progress=Progress(total=total))
    if requires:
        rec.requires = requires.split(",")
    scheduled = any(value is not None for value in (retries, retry_intervals, no_retry_on, pipeline, stage, not_before))
    if scheduled or after or hold:
        from .. import schedule

        schedule.plan(
            rec,
            retries=retries,
            intervals=None
            if retry_intervals is None
            else schedule.parse_intervals(retry_intervals, "--retry-intervals"),
            no_retry_on=() if no_retry_on is None else _codes(no_retry_on),
            after=after,
            pipeline=pipeline,
            stage=stage,
            start_after=None if not_before is None else parse_when(not_before, state.now()),
            hold=hold,
            by=by or default_by(),
        )
    store = state.store(create=True)
    new_id = store.submit(rec)
    if state.json:
        render.out_json(render.job_json(store.load(new_id), state.now()))
    else:
        render.out(new_id)
