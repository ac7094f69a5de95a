"""``jobctl submit``: write a new job, with jobctl's scheduling choices if asked."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from typing import Any

import click

from .. import limits
from ..errors import Exists, Invalid
from ..record import Progress, Record, parse_time
from ..submitter import default_submitter, set_submitter
from ..wire import lazy_pattern
from . import render
from .main import JSON_TEXT, TEXT, JobCommand, State, common, count, not_utf8, pass_state, raw_json
from .params import env_option, signed

__all__ = ["submit", "parse_when", "parse_duration", "kind_and_spec"]

_DELAY: re.Pattern[str] = lazy_pattern(globals(), "_DELAY", r"(\d+(?:\.\d+)?)([smhd]?)\Z")  # only --not-before
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, what: str, bounds: limits.Range) -> timedelta:
    """A span of time in ``bounds``: ``90``, ``90s``, ``15m``, ``2h``, ``7d``; ``invalid`` naming ``what`` otherwise.

    The range is checked on the number, before a ``timedelta`` is made of it:
    ``99999999999999999999d`` is a refusal, never ``OverflowError``.
    """
    return timedelta(seconds=limits.duration(text, what, bounds))


def parse_when(text: str, now: datetime) -> datetime:
    """``--not-before``: an RFC 3339 instant, or a delay from now (``90``, ``90s``, ``15m``, ``2h``, ``1d``)."""
    match = _DELAY.match(text.strip())
    if match is not None:
        delay = float(match.group(1)) * _UNITS[match.group(2)]
        limits.NOT_BEFORE_DELAY.check(delay, "--not-before delay (seconds)")
        return limits.later(now, delay, "--not-before delay")
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


def _env_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name or "\0" in pair:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--env")
        env[name] = value
    return env


@click.command(cls=JobCommand, short_help="Submit a job (or a command: submit -- CMD...); print its id.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD...]")
@click.option(
    "--kind",
    type=TEXT,
    help=(
        "What the job is: who can read its spec (printable text; shell only spelt so). "
        "[default: shell with -- CMD; else required]"
    ),
)
@click.option(
    "--spec",
    type=JSON_TEXT,
    help="The job's spec: a JSON object, inline, @FILE, or - for stdin. Kept byte for byte. [default: {}]",
)
@env_option
@click.option(
    "--total",
    type=count(limits.TOTAL),
    metavar="N",
    default=0,
    show_default=True,
    help=f"Total work, in the kind's own units ({limits.TOTAL.text()}).",
)
@click.option("--requires", type=TEXT, metavar="A,B", help="Capabilities an implementation must have, comma-separated.")
@click.option(
    "--id",
    "job_id",
    type=TEXT,
    metavar="ID",
    help="Use this id instead of minting one (refused if it exists: exit 15).",
)
@click.option(
    "--exists-ok", is_flag=True, help="With --id: when that job exists, print its id and exit 0, changing nothing."
)
@click.option("--hold", is_flag=True, help="Submit paused: nothing adopts it until `jobctl intent ID run`.")
@click.option(
    "--retries",
    type=count(limits.RETRIES),
    metavar="N",
    help=(
        f"Retry a failed run this many times, jobctl run / jobctl worker ({limits.RETRIES.text()}). "
        "[default: one a $JOB_RETRY_INTERVALS interval when set, else 0]"
    ),
)
@click.option(
    "--retry-intervals",
    type=TEXT,
    metavar="S,S,…",
    help=(
        f"Seconds to wait before each retry, at most {limits.RETRY_INTERVALS_MAX} of them, "
        f"each {limits.RETRY_INTERVAL.text().replace('interval', 'S')}; out of range: invalid. "
        "[default: $JOB_RETRY_INTERVALS or 10,30,60,120,240,…]"
    ),
)
@click.option("--no-retry-on", type=TEXT, metavar="CODE,…", help="Exit codes that fail the job at once.")
@click.option(
    "--after", multiple=True, type=TEXT, metavar="ID", help="Start only once job ID is complete (repeatable)."
)
@click.option("--pipeline", type=TEXT, metavar="NAME", help="The pipeline this job belongs to (for display).")
@click.option("--stage", type=TEXT, metavar="NAME", help="Its stage in that pipeline. [default: the kind]")
@click.option(
    "--not-before",
    type=TEXT,
    metavar="WHEN",
    help="Do not start before WHEN: RFC 3339, or a delay (90s, 15m, 2h; at most 3650d, else invalid).",
)
@click.option(
    "--by",
    type=TEXT,
    metavar="NAME",
    help="Who submits it, kept as its submitter (list --by finds it); with --hold, who holds it. [default: $USER@HOST]",
)
@click.option(
    "--priority",
    type=signed(limits.PRIORITY),
    metavar="N",
    default=0,
    show_default=True,
    help=f"Higher runs first; equal ones oldest first ({limits.PRIORITY.text()}; else a usage error).",
)
@click.option(
    "--timeout",
    type=TEXT,
    metavar="DURATION",
    help="Stop an attempt that runs longer (90s, 15m, 2h): a failed attempt, retried as --retries says.",
)
@click.option(
    "--exclusive",
    type=TEXT,
    metavar="KEY",
    help="Run it only while no other job with KEY runs (on any worker); it waits its turn, oldest first.",
)
@common
@pass_state
def submit(
    state: State,
    command: tuple[str, ...],
    kind: str | None,
    spec: str | None,
    env_pairs: tuple[str, ...],
    total: int,
    requires: str | None,
    job_id: str | None,
    exists_ok: bool,
    hold: bool,
    retries: int | None,
    retry_intervals: str | None,
    no_retry_on: str | None,
    after: tuple[str, ...],
    pipeline: str | None,
    stage: str | None,
    not_before: str | None,
    by: str | None,
    priority: int,
    timeout: str | None,
    exclusive: str | None,
) -> None:
    """Submit a job and print its id.

    The spec is opaque to jobctl: it is validated as JSON and kept token for
    token. The job starts pending, with no lease; any worker may claim it.
    The scheduling options (--retries, --after, --pipeline, --not-before,
    --hold) are jobctl's own extension keys, carried untouched by every other
    implementation.

    With words after --, a `shell` job runs them: its spec is
    {"argv": [the words], "cwd": this directory, "env": {--env pairs}}, so a
    relative command runs where it was submitted. A `shell` spec given with
    --spec is checked here (argv a non-empty list of strings, cwd a string,
    env an object of strings, timeout a positive number; no empty command,
    no NUL character, no env name with '=') and refused `invalid` (exit 9)
    rather than failing later in a worker.

    --priority and --timeout are jobctl's extension keys
    jobctl.run/priority@1 and jobctl.run/timeout@1. Workers, claim --next and
    run --next take the runnable job of the highest priority first, the
    oldest among equals. An attempt that runs past its --timeout is stopped
    (SIGTERM to its process group, then SIGKILL after the worker's --grace)
    and fails "timed out after ..."; a --timeout of 0, a negative one or one
    that is no duration is refused `invalid` (exit 9).

    The job keeps who submitted it (--by, else $USER@HOST) under jobctl's
    extension key jobctl.run/submitted-by@1; show and list --json print it
    as submitted_by, and list --by NAME chooses by it. A held job's hold is
    in the same name.

    With --exclusive KEY, at most one job with KEY runs at a time across
    every worker of the store; the others stay pending and run one after
    another, oldest first (jobctl.run/exclusive@1; show prints it as
    exclusive). A KEY that is blank, longer than 200 bytes or holds a
    control character is refused `invalid` (exit 9).

    --after ID may name a job that does not exist yet. An --id that --after
    would make wait for itself (ID waits, through the jobs in the store, for
    the new job) is refused `invalid` (exit 9), naming the cycle; a worker
    cancels the jobs of a cycle that came in another way.

    An --id that is already in the store is refused `exists` (exit 15);
    with --exists-ok its id is printed and the exit is 0, so a producer that
    runs twice enqueues the work once. The existing job is not compared
    with this request, nor changed; a record there that cannot be read is
    refused as `show` refuses it (nothing would run).

    \b
    Examples:
      jobctl submit -- ./convert.sh in.mkv
      jobctl submit --env LANG=C.UTF-8 --retries 2 -- make -C ~/site publish
      jobctl submit --kind download --spec '{"url": "https://example.com/a.iso"}'
      jobctl submit --kind report --spec @report.json --after "$FETCH_ID" --retries 3
      jobctl submit --id "backup-$(date +%F)" --exists-ok -- ./backup.sh
      id=$(jobctl submit --kind backup --hold --by alice) && jobctl approve "$id"
      jobctl submit --priority 10 --timeout 15m --retries 2 -- ./nightly-report.sh
      jobctl submit --exclusive db-migrate -- ./migrate.sh
    """
    from ..shell import SHELL, check_kind

    if stage and not pipeline:
        raise click.UsageError("--stage needs --pipeline")
    _labels(pipeline, stage)
    if exists_ok and not job_id:
        raise click.UsageError("--exists-ok needs --id")
    kind, spec = kind_and_spec(command, kind, spec, env_pairs)
    check_kind(kind, "--kind")  # the rule POST /api/jobs applies too
    # Only a --spec not given at all is {}: an empty file or stdin is JSON that does not parse, as a checkpoint's.
    body_text = "{}" if spec is None else spec
    rec = Record(id=job_id or "", kind=kind, spec=raw_json(body_text, "--spec"), progress=Progress(total=total))
    if kind == SHELL:
        from ..shell import parse

        parse(rec.spec, job_id or "")
    who = _extensions(rec, requires, by, priority, timeout, exclusive)
    _plan(state, rec, who, retries, retry_intervals, no_retry_on, after, pipeline, stage, not_before, hold)
    _submit(state, rec, exists_ok)


def _plan(
    state: State,
    rec: Record,
    who: str,
    retries: int | None,
    retry_intervals: str | None,
    no_retry_on: str | None,
    after: tuple[str, ...],
    pipeline: str | None,
    stage: str | None,
    not_before: str | None,
    hold: bool,
) -> None:
    """jobctl's scheduling extensions (retries, dependencies, pipeline, not-before, hold), when any is asked for."""
    scheduled = any(value is not None for value in (retries, retry_intervals, no_retry_on, pipeline, stage, not_before))
    configured = bool(os.environ.get("JOB_RETRY_INTERVALS", "").strip())  # a schedule to use (schedule.plan)
    if scheduled or after or hold or configured:
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
            by=who,
        )


def _extensions(
    rec: Record, requires: str | None, by: str | None, priority: int, timeout: str | None, exclusive: str | None
) -> str:
    """Set ``--requires``, the submitter, ``--priority``, ``--timeout`` and ``--exclusive`` on ``rec``; who submits."""
    if requires:
        from ..schedule import check_label

        names = requires.split(",")
        if not all(name.strip() for name in names):
            raise Invalid(f"--requires {requires!r} names an empty capability (give names separated by single commas)")
        rec.requires = [check_label(name, "--requires") for name in names]
    who = by or default_submitter()
    set_submitter(rec, who, "--by")  # the hold's `by` too: one name says who asked
    if priority:  # 0 is no priority: a new record has none to remove
        from ..priority import set_priority

        set_priority(rec, priority, "--priority")
    if timeout is not None:
        from ..timeout import set_timeout

        set_timeout(rec, limits.duration(timeout, "--timeout", limits.JOB_TIMEOUT), "--timeout")
    if exclusive is not None:
        from ..exclusive import set_exclusive

        set_exclusive(rec, exclusive, "--exclusive")
    return who


def kind_and_spec(
    command: tuple[str, ...], kind: str | None, spec: str | None, env_pairs: tuple[str, ...]
) -> tuple[str, str | None]:
    """The job's kind and spec text: a ``shell`` job's from the words after ``--``, else as given."""
    from ..shell import SHELL

    if command:
        if spec is not None:
            raise click.UsageError("give the command after -- or a --spec, not both")
        if kind is not None and kind != SHELL:
            raise click.UsageError(f"a command after -- makes a {SHELL} job, not --kind {kind}")
        import json

        for number, word in enumerate(command, start=1):
            byte = not_utf8(word)
            if byte is not None:  # a spec is JSON, UTF-8: the word would be run spelt otherwise
                raise click.UsageError(f"word {number} of the command after -- is not UTF-8 (byte {byte})")
        cwd = os.getcwd()
        if not_utf8(cwd) is not None:
            raise Invalid(f"this directory's path is not UTF-8, so a spec cannot hold it as its cwd: {cwd!r}")
        body: dict[str, object] = {"argv": list(command), "cwd": cwd}
        if env_pairs:
            body["env"] = _env_pairs(env_pairs)
        return SHELL, json.dumps(body, ensure_ascii=False)
    if kind is None:
        raise click.UsageError("give --kind (or a command after --)")
    if env_pairs:
        raise click.UsageError("--env goes with a command after --")
    return kind, spec


def _labels(pipeline: str | None, stage: str | None) -> None:
    """Refuse a --pipeline or --stage that is not one line of printable text, named as the option."""
    if not pipeline:  # (jobctl.schedule only when asked for: a plain submit's start-up stays light)
        return
    from ..schedule import check_label

    for given, what in ((pipeline, "--pipeline"), (stage, "--stage")):
        if given:  # the library's check (plan) names the field; here the option
            check_label(given, what)


def _no_cycle(store: Any, rec: Record) -> None:
    """Refuse a job that would wait for itself (:func:`jobctl.schedule.refuse_cycle`)."""
    from ..record import AFTER

    if rec.id and AFTER in rec.extensions:
        from ..schedule import refuse_cycle  # (only then: a plain submit's start-up stays light)

        refuse_cycle(rec, store.load)


def _submit(state: State, rec: Record, exists_ok: bool) -> None:
    """Write the new record and print its id (or, with --json, the job); an --id already there with --exists-ok."""
    store = state.store(create=True)
    _no_cycle(store, rec)
    try:
        new_id = store.submit(rec)
    except Exists:
        if not exists_ok:
            raise
        new_id = rec.id  # already there: the work is enqueued, and that job is left exactly as it is
        if not state.json:
            store.load(new_id)  # ... if it can be read: a damaged record there enqueues nothing (invalid)
    if state.json:
        render.out_json(render.job_json(store.load(new_id), state.now()))
    else:
        render.out(new_id)
