"""Doing the work: ``run``, ``worker``, ``logs`` and ``pipeline``.

Only parsing and printing here; :mod:`jobctl.runner`, :mod:`jobctl.worker`,
:mod:`jobctl.settings` and :mod:`jobctl.schedule` do the work. The group
loads this module only when one of its commands runs (or for ``--help``), and
the library modules are imported inside the commands.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import limits
from . import render
from .main import (
    TEXT,
    TTL_HELP,
    TTL_SECONDS,
    JobCommand,
    State,
    common,
    count,
    default_by,
    echo_out,
    job_id_argument,
    pass_state,
    run_ttl_option,
    seconds,
)
from .params import KIND_LIMIT

if TYPE_CHECKING:
    from ..record import Record
    from ..runner import Outcome, Processor, Run
    from ..worker import Event

__all__ = ["run", "worker", "logs", "pipeline"]

F = TypeVar("F", bound=Callable[..., Any])


def _say(line: str) -> None:
    click.echo(line, err=True)


def _check_handlers(_ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """``--handler KIND=CMD``: a malformed one is a usage error (2), like any other bad flag value."""
    from ..errors import Invalid
    from ..settings import parse_handler

    for value in values:
        try:
            parse_handler(value)
        except Invalid as exc:
            raise click.BadParameter(exc.message, param=param) from None
    return values


def _check_app(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--app MODULE:ATTR``: a value not of that form is a usage error (2); one that does not load is invalid (9)."""
    if value is not None:
        module, sep, attribute = value.partition(":")
        if not (module and sep and attribute):
            raise click.BadParameter(f"{value!r} is not MODULE:ATTR (myapp.jobs:worker)", param=param)
    return value


def _check_url(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--on-failure-url``: anything but an http or https URL with a host is a usage error (2)."""
    if value is None:
        return None  # the webhook module (its HTTP client, a thread) only for a worker that posts alerts
    from ..webhook import check_url

    try:
        return check_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from None


#: ``--handler KIND=CMD`` (repeatable), the same on ``run`` and ``worker``.
_handler_option = click.option(
    "--handler",
    "handlers",
    multiple=True,
    type=TEXT,
    metavar="KIND=CMD",
    callback=_check_handlers,
    help="Command for a kind.",
)


# -- run -------------------------------------------------------------------------------


def _outcome_json(out: Outcome) -> dict[str, Any]:
    return {
        "id": out.job_id,
        "kind": out.kind,
        "epoch": out.epoch,
        "attempt": out.attempt,
        "state": out.state,
        "reason": out.reason,
        "exit_code": out.exit_code,
        "error": out.error,
        "retried": out.retried,
        "not_before": None if out.not_before is None else _time(out.not_before),
        "verdict": None if out.verdict is None else out.verdict.verdict,
        "log": out.log,
    }


def _time(when: Any) -> str:
    from ..record import format_time

    return format_time(when)


def _startable(store: Any, job_id: str) -> None:
    """Refuse, before claiming, a job that must not start: paused, or waiting for a dependency.

    A not-before time is not checked: asking for one job by its id is asking
    for it now (a retry by hand).
    """
    from .. import schedule
    from ..errors import JobError, Refused

    rec = store.load(job_id)
    if rec.terminal:
        return  # the claim says terminal, with its own words
    if rec.want == "pause":
        raise Refused(f"job {job_id} is paused; resume it first (jobctl intent {job_id} run)", job_id)
    states = {}
    for dep in schedule.after_of(rec):
        try:
            states[dep] = store.load(dep).state
        except JobError:
            pass
    why, detail = schedule.blocked_by(rec, states, store.now())
    if why in ("waiting", "doomed") and not detail.startswith("not before"):
        raise Refused(f"job {job_id} cannot start: {detail}", job_id)


def _processor(state: State, rec: Record, command: list[str], handlers: tuple[str, ...]) -> Processor:
    from .. import runner, settings
    from ..errors import Refused

    if command:
        argv = list(command)
        return lambda _rec: runner.Command(argv)
    resolved = settings.load(handlers=handlers, env=state.env)
    for warning in resolved.warnings:
        _say(f"jobctl: {warning}")
    table = runner.processors(resolved.handler_commands())
    if rec.kind not in table:
        raise Refused(
            f"no command for kind {rec.kind}: give one after --, or a handler (--handler {rec.kind}=CMD)", rec.id
        )
    return table[rec.kind]


def _trust_options(fn: F) -> F:
    """``--pass-env``, ``--allow-loader-env`` and ``--owned-only``: what a job from the store may see and be."""
    fn = click.option(
        "--owned-only/--any-owner",
        "owned_only",
        default=None,
        help="Run only jobs whose record file this user owns; others are named once and left alone. "
        "[default: --owned-only as root, else --any-owner]",
    )(fn)
    fn = click.option(
        "--allow-loader-env/--no-allow-loader-env",
        "allow_loader_env",
        default=None,
        help="Let a spec's env set LD_PRELOAD, LD_LIBRARY_PATH or LD_AUDIT (refused otherwise). [default: no]",
    )(fn)
    return click.option(
        "--pass-env",
        "pass_env",
        multiple=True,
        type=TEXT,
        metavar="NAME",
        help="Also pass the variable NAME to jobs (repeatable); by default they get only PATH, HOME, LANG, "
        "LC_*, TZ, TMPDIR, USER, LOGNAME, SHELL, TERM and the JOB_* variables.",
    )(fn)


def _owned_by(owned_only: bool | None) -> int | None:
    """The uid a job's record must belong to, or None: ``--owned-only`` by default when running as root."""
    uid = os.geteuid()
    if owned_only is None:
        owned_only = uid == 0
    return uid if owned_only else None


#: The signals that stop ``jobctl run``'s child and release its job: Ctrl-C, a kill, a terminal hung up
#: (an ssh session closed), Ctrl-\ -- as timeout(1) stops its command on them. At their defaults the
#: guardian would SIGKILL the child with no grace and the job would stay held until its lease lapsed.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextmanager
def _stopping(run_: Run) -> Iterator[list[int]]:
    """The signals of ``STOPPING`` stop the child and release the job; the list gets the signal's number."""
    got: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        got.append(signum)
        run_.stop(f"jobctl run got {signal.Signals(signum).name}", grace=0 if len(got) > 1 else None)

    old = {sig: signal.signal(sig, handler) for sig in STOPPING}
    try:
        yield got
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


_RUN_HELP = """Run a command under a job's lease, which jobctl keeps alive.

Claims job ID (or, with --next, the first runnable job: the highest
priority, then the oldest) and runs CMD with
JOB_STORE, JOB_ID, JOB_EPOCH, JOB_KIND, JOB_WORK, JOB_CHECKPOINT (the
predecessor's checkpoint as JSON; null when none), JOB_ATTEMPT and
JOB_RESULT in its environment, so it can call `jobctl checkpoint` with no
flags and resume. JSON that CMD leaves in the file $JOB_RESULT names is
stored as the job's result when it completes (not JSON: the attempt fails).
Without CMD the job's kind decides: a `shell` job runs its spec's argv;
another kind runs its handler (--handler KIND=CMD, or the config file).
With --next, CMD goes after --, and an ID is a usage error (2), as for
claim --next: nothing is claimed.

While CMD runs the lease is renewed every third of --ttl, and the job's
intent and recall are read: cancel, pause and recall stop CMD (SIGTERM to
its process group, SIGKILL after --grace), and so does the job's --timeout
when an attempt runs past it (the attempt fails: "timed out after 15m").
Exit 0 completes the job;
anything else fails it, or schedules the next attempt under its retry
policy. CMD's output goes to stdout and to the attempt's log (`jobctl logs
ID`); with --json only to the log, and stdout gets one object saying how the
run ended. CMD's stdin is /dev/null (a handler's: the spec), whoever runs
the job: a worker that adopts it has nothing else to give. SIGINT, SIGTERM,
SIGHUP or SIGQUIT to jobctl run stops CMD (SIGTERM, SIGKILL after --grace;
a second signal: SIGKILL at once) and releases the job, and jobctl run exits
128+N for the signal N it got (130 for Ctrl-C).

When CMD ran, the exit status is CMD's own (128+N when a signal N ended
it), as timeout(1) and env(1) do. jobctl's own codes, when CMD did not
run to its end: 1 the job's spec cannot be run by its kind (the job ends
failed, `cannot run: ...`, CMD never started); 2 usage; 3 no such job, or
(--next) nothing runnable; 4 lease_held, 7 terminal, 10 refused (paused, waiting for a dependency, no
command for its kind), all before CMD started; 5 stale_epoch or 6
lease_expired when the lease was lost to somebody else (CMD was killed at
once and nothing more was written); 126 CMD could not be run, 127 not
found, as a shell says. Each of these also prints one line on stderr;
with --json, the object's `exit_code` and `verdict` tell CMD's status
from jobctl's. -q with --next: nothing runnable exits 3 and prints nothing.

So `while jobctl run --next -q -- CMD; do :; done` runs the runnable jobs
one after another while each completes, and stops at the first that does
not (its failure on stderr) or, silently, when none is left. To go on past
failures, use `jobctl worker --drain`.

\b
Examples:
  jobctl run 1787202430967-a752f9a9c2c77b123ffd -- ./fetch.sh
  jobctl run --next --kind shell
  while jobctl run --next -q --kind resize -- ./resize.sh; do :; done
"""


class _RunCommand(JobCommand):
    """``run``: also notes how many words came after ``--``, which the parsed arguments no longer say.

    ``run ID --next -- CMD`` and ``run --next -- ID CMD`` both parse to the
    words ``ID CMD``; only the raw arguments tell the ID from the command.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["jobctl.run.command_words"] = len(args) - args.index("--") - 1 if "--" in args else 0
        return super().parse_args(ctx, args)


@click.command(cls=_RunCommand, help=_RUN_HELP, short_help="Run a command under a job's lease.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[ID] [-- CMD...]")
@click.option("--next", "next_", is_flag=True, help="Claim the first runnable job (priority, then age) instead of ID.")
@click.option("--kind", "kinds", multiple=True, type=TEXT, metavar="K", help="With --next: only kind K (repeatable).")
@click.option("--owner", type=TEXT, help="The lease owner. [default: jobctl@HOST:PID]")
@run_ttl_option
@click.option(
    "--grace",
    type=seconds(limits.GRACE),
    default=10.0,
    show_default=True,
    help=f"Seconds from SIGTERM to SIGKILL ({limits.GRACE.text()}).",
)
@_handler_option
@click.option(
    "--quiet", "-q", is_flag=True, help="With --next: nothing runnable exits 3 and prints nothing (errors still print)."
)
@_trust_options
@common
@pass_state
def run(
    state: State,
    args: tuple[str, ...],
    next_: bool,
    kinds: tuple[str, ...],
    owner: str | None,
    ttl: float,
    grace: float,
    handlers: tuple[str, ...],
    pass_env: tuple[str, ...],
    allow_loader_env: bool | None,
    owned_only: bool | None,
    quiet: bool,
) -> None:
    if next_ and len(args) > click.get_current_context().meta.get("jobctl.run.command_words", 0):
        # As claim --next: a word before -- is an ID, and run would claim
        # another job and run the ID as part of its command.
        raise click.UsageError("--next chooses the job itself; name no ID with it (the command goes after --)")
    from .. import runner, settings
    from ..errors import JobError, NotFound
    from ..jobenv import JobEnvironment

    chosen = settings.load({"pass_env": pass_env, "allow_loader_env": allow_loader_env}, env=state.env)
    environment = JobEnvironment(chosen.pass_env, chosen.allow_loader_env)
    store = state.lease_store(ttl)
    store.owned_by = _owned_by(owned_only)
    owner = owner or default_by()
    if next_:
        command = list(args)
        wanted: set[str] | None = set(kinds) or None
        if not command and wanted is None:
            wanted = set(runner.processors(settings.load(handlers=handlers, env=state.env).handler_commands()))
        skipped: list[tuple[str, JobError]] = []
        try:
            rec = runner.claim_next(store, owner, ttl, wanted, skipped)
        except NotFound as exc:  # runner.claim_next's one refusal: nothing is runnable
            if not quiet:
                raise
            click.get_current_context().exit(exc.exit_code)
        finally:
            for job_id, why in skipped:
                _say(f"jobctl: {job_id}: skipped: {why.message}")
    else:
        if quiet:
            raise click.UsageError("-q/--quiet goes with --next")
        if not args:
            raise click.UsageError("run needs a job id: name it, or pass --next")
        if kinds:
            raise click.UsageError("--kind goes with --next")
        job_id, command = args[0], list(args[1:])
        _startable(store, job_id)
        rec = store.claim(job_id, owner, ttl)
    try:
        processor = _processor(state, rec, command, handlers)
    except (JobError, OSError):
        store.release(rec.id, rec.lease.epoch)  # not ours to run after all: give it back at once
        raise
    tee = None if state.json else getattr(sys.stdout, "buffer", None)
    job = runner.Run(store, rec, processor, ttl=ttl, grace=grace, tee=tee, environment=environment)
    with _stopping(job) as signals:
        outcome = job.execute()
    if state.json:
        render.out_json(_outcome_json(outcome))
    elif outcome.verdict is not None:
        from .main import refusal_line

        _say(refusal_line(outcome.verdict))
    elif outcome.state != "complete":
        detail = outcome.error or outcome.reason
        if outcome.retried and outcome.not_before is not None:
            detail += f"; next attempt not before {_time(outcome.not_before)}"
        _say(f"jobctl: run: {outcome.job_id} {outcome.state} ({detail})")
    code = outcome.status
    if signals and not outcome.fenced:
        code = 128 + signals[0]
    click.get_current_context().exit(code)


# -- worker ------------------------------------------------------------------------------

_WORKER_HELP = """Run runnable jobs until stopped: pick, claim, run, retry, alert.

Picks the oldest runnable jobs (nobody holds them, their dependencies are
complete, their not-before time has passed, not paused, of a kind it can
run: `shell`, and every kind with a handler) and runs up to --concurrency
at once, each under its own renewed lease, its output in the job's attempt
log. Jobs whose owner died are adopted once their lease lapses; jobs whose
dependency failed or was cancelled are cancelled with a reason. A job that
finally fails runs --on-failure with JOB_ID, JOB_KIND, JOB_ERROR and
JOB_ATTEMPT in its environment, and posts a JSON message to
--on-failure-url (id, kind, error, attempt, pipeline, and a `text` that
Slack-compatible incoming webhooks take as it is) from a background thread:
tried 4 times over about 20 s, each failure said in the log, never holding
up the worker (docs/howto/workers.md, Alerts). Any number of workers may share a store:
the lease's epoch makes sure no job runs twice at once.

--limit KIND=N (repeatable): at most N jobs of KIND at once in this
worker; its other slots take other kinds. A job submitted with
--exclusive KEY waits while another job with that key runs, on any worker.

--once: one pass over what is runnable now, then exit. --drain: go on while
anything is runnable or running, and wait for the retries of the jobs it
ran (one line per wait), then exit (the cron form); it does not wait for
jobs held, paused, leased by somebody else, or not-before times of their
own. --drain exits 0 when every job it ran ended complete, and 17 when one
did not. Without either, run until stopped. SIGTERM: claim nothing more,
let running jobs finish within --shutdown-grace, stop and release the
rest; a second SIGTERM stops them at once.

While it claims, it tells the store which kinds it handles (renewed as it
loops, taken back when it stops), so that `jobctl show` can name a pending
job no running worker handles; a store that will not take the word is said
once (`unannounced`), and the worker goes on.

Each record that cannot be read is named once on stderr (id, path, why),
and so is each job that waits for one. --drain and --once name, one line
per kind, the pending jobs left because nothing here runs their kind;
--kind K with no handler for K is a usage error.

A job's command gets only PATH, HOME, LANG, LC_*, TZ, TMPDIR, USER,
LOGNAME, SHELL, TERM, the JOB_* variables and the names given with
--pass-env: the worker's other variables (secrets for --on-failure) stay
the worker's; the --on-failure command gets them all. A spec's env may not
set JOB_* names, nor LD_PRELOAD, LD_LIBRARY_PATH or LD_AUDIT without
--allow-loader-env: such a job fails at once, with the variable named.
Anyone who can write the store's jobs/ directory can make this worker run
a command as its user (docs/security.md); as root it runs only records
root owns unless told --any-owner.

--app MODULE:ATTR runs the jobctl.Worker that Python module MODULE
(searched in the current directory first) defines as ATTR: its Python
processors beside `shell` and the handlers, on the object's store (--store
and JOB_STORE do not apply). The options given to the object's constructor
stand where no flag is given, ahead of the environment and the config file.

Each setting comes from its flag, else its environment variable, else the
config file ($JOBCTL_CONFIG, or config.ini in the user config directory),
else its default; `jobctl paths` shows which. Variables:
MAX_CONCURRENT_JOBS, JOB_PROCESSOR_POLL_INTERVAL, JOBCTL_TTL, JOBCTL_GRACE,
JOBCTL_SHUTDOWN_GRACE, JOBCTL_WORKER_NAME, JOBCTL_KINDS, JOBCTL_ON_FAILURE,
JOBCTL_ON_FAILURE_URL, JOBCTL_MAX_TTL, JOBCTL_PASS_ENV, JOBCTL_ALLOW_LOADER_ENV. A number out of
its range is a usage error (exit 2) as a flag, invalid (exit 9) from the
environment or the config file.

\b
Examples:
  jobctl worker --concurrency 4
  jobctl worker --concurrency 4 --limit render=1
  jobctl worker --drain --handler fetch=./fetch.sh
  jobctl worker --app myapp.jobs:worker --concurrency 8
  jobctl worker --on-failure 'curl -fsS -d "text=$JOB_ID failed: $JOB_ERROR" "$HOOK"'
  jobctl worker --on-failure-url "$SLACK_WEBHOOK_URL"
"""

_QUIET_SHOWS = frozenset(
    ("failed", "refused", "fenced", "alert-failed", "untrusted", "unreadable", "blocked", "unhandled", "unannounced")
)


@click.command(cls=JobCommand, help=_WORKER_HELP, short_help="Run runnable jobs until stopped.")
@click.option(
    "--concurrency",
    type=count(limits.CONCURRENCY),
    metavar="N",
    help=f"Jobs at once ({limits.CONCURRENCY.text()}). [default: 1]",
)
@click.option(
    "--poll-interval",
    type=seconds(limits.POLL_INTERVAL),
    help=f"Seconds between looks when idle ({limits.POLL_INTERVAL.text()}). [default: 1]",
)
@click.option(
    "--ttl", type=TTL_SECONDS, help=f"Lease length for the jobs it runs, in seconds {TTL_HELP}. [default: 30]"
)
@click.option(
    "--grace",
    type=seconds(limits.GRACE),
    help=f"Seconds from SIGTERM to SIGKILL when stopping a job ({limits.GRACE.text()}). [default: 10]",
)
@click.option(
    "--shutdown-grace",
    type=seconds(limits.SHUTDOWN_GRACE),
    help=f"Seconds running jobs get after SIGTERM ({limits.SHUTDOWN_GRACE.text()}). [default: 30]",
)
@click.option("--name", type=TEXT, help="Lease owner prefix: NAME@HOST:PID. [default: worker]")
@click.option("--kind", "kinds", multiple=True, type=TEXT, metavar="K", help="Only kind K (repeatable).")
@click.option(
    "--limit", "kind_limits", multiple=True, type=KIND_LIMIT, metavar="KIND=N", help="At most N jobs of KIND at once."
)
@_handler_option
@click.option("--on-failure", type=TEXT, metavar="CMD", help="Shell command run when a job finally fails.")
@click.option(
    "--on-failure-url",
    type=TEXT,
    metavar="URL",
    callback=_check_url,
    help="Post a JSON message (Slack-compatible) to URL when a job finally fails.",
)
@click.option("--once", "mode", flag_value="once", help="One pass over what is runnable now, then exit.")
@click.option(
    "--drain", "mode", flag_value="drain", help="Exit once nothing it ran can still run; exit 17 unless all complete."
)
@click.option("--quiet", "-q", is_flag=True, help="Print only failures, not every start and end.")
@click.option(
    "--app",
    type=TEXT,
    metavar="MODULE:ATTR",
    callback=_check_app,
    help="Run the jobctl.Worker defined in Python as MODULE:ATTR (its store and processors).",
)
@_trust_options
@common
@pass_state
def worker(
    state: State,
    concurrency: int | None,
    poll_interval: float | None,
    ttl: float | None,
    grace: float | None,
    shutdown_grace: float | None,
    name: str | None,
    kinds: tuple[str, ...],
    kind_limits: tuple[tuple[str, int], ...],
    handlers: tuple[str, ...],
    on_failure: str | None,
    on_failure_url: str | None,
    mode: str | None,
    quiet: bool,
    app: str | None,
    pass_env: tuple[str, ...],
    allow_loader_env: bool | None,
    owned_only: bool | None,
) -> None:
    from .. import settings
    from ..jobenv import JobEnvironment
    from ..worker import Worker

    defined = None
    if app is not None:
        from .. import app as apps

        defined = apps.load(app)

    flags = {
        "concurrency": concurrency,
        "poll_interval": poll_interval,
        "ttl": ttl,
        "grace": grace,
        "shutdown_grace": shutdown_grace,
        "name": name,
        "kinds": kinds,
        "on_failure": on_failure,
        "on_failure_url": on_failure_url,
        "pass_env": pass_env,
        "allow_loader_env": allow_loader_env,
    }
    sources: dict[str, str] = {}
    if defined is not None:
        handlers = _app_options(defined, f"--app {app}", flags, sources, handlers)
    resolved = settings.load(flags, handlers, env=state.env, sources=sources)
    for warning in resolved.warnings:
        _say(f"jobctl: {warning}")
    store = state.store() if defined is None else defined.store
    store.max_ttl = resolved.max_ttl
    store.owned_by = _owned_by(owned_only)
    loop = Worker(
        store,
        name=resolved.name,
        concurrency=resolved.concurrency,
        poll_interval=resolved.poll_interval,
        ttl=resolved.ttl,
        grace=resolved.grace,
        shutdown_grace=resolved.shutdown_grace,
        handlers=resolved.handler_commands(),
        kinds=resolved.kinds or None,
        on_failure=resolved.on_failure,
        on_failure_url=resolved.on_failure_url,
        on_event=_reporter(state, quiet),
        env=state.env,
        environment=JobEnvironment(resolved.pass_env, resolved.allow_loader_env),
        functions=None if defined is None else defined.processors,
        limits={**(defined.limits if defined is not None else {}), **dict(kind_limits)},
    )
    unhandled = [kind for kind in resolved.kinds if kind not in loop.handled]
    if unhandled:
        kind = unhandled[0]
        raise click.UsageError(
            f"no handler for kind {kind}: give one with --handler {kind}=CMD or in the config file "
            f"(this worker runs: {', '.join(sorted(loop.handled)) or 'nothing'})"
        )
    if defined is not None:
        defined.declare()  # the application's schedules, kept in the store before the first pick
    if not quiet and not state.json:
        _say(
            f"jobctl worker: {loop.owner} on {store.root}: kinds {', '.join(sorted(loop.kinds)) or 'none'}, "
            f"concurrency {resolved.concurrency}, ttl {resolved.ttl:g} s, mode {mode or 'loop'}"
        )
    with loop.signals():
        summary = loop.run(mode or "loop")
    if not quiet and not state.json:
        counts = ", ".join(f"{n} {what}" for what, n in sorted(summary.counts.items()) if what != "finished")
        _say(f"jobctl worker: done ({counts or 'nothing to do'})")
    if mode == "drain" and not summary.all_complete:
        from .main import EXIT_DRAIN_INCOMPLETE

        ended = [f"{job_id} {job_state}" for job_id, job_state in summary.ran.items() if job_state != "complete"]
        _say(f"jobctl worker: {len(ended)} job(s) it ran did not end complete: {', '.join(ended)}")
        click.get_current_context().exit(EXIT_DRAIN_INCOMPLETE)


def _app_options(
    defined: Any, given_by: str, flags: dict[str, Any], sources: dict[str, str], handlers: tuple[str, ...]
) -> tuple[str, ...]:
    """A worker object's own options where no flag is given (noted in ``sources``); returns every handler.

    They beat the environment and the config file, and a flag beats them.
    """
    given = dict(flags)  # as the command line gave them
    for key, value in defined.options.items():
        if flags.get(key) is None:
            flags[key] = value
            sources[key] = given_by
    if defined.kinds is not None and not given["kinds"]:
        flags["kinds"] = tuple(defined.kinds)
    if defined.on_failure and given["on_failure"] is None:
        flags["on_failure"] = defined.on_failure
    if defined.on_failure_url and given["on_failure_url"] is None:
        flags["on_failure_url"] = defined.on_failure_url
    return (*(f"{kind}={command}" for kind, command in defined.handlers.items()), *handlers)


def _reporter(state: State, quiet: bool) -> Callable[[Event], None]:
    """What a worker says of each event: a JSON line, or a line on stderr (with --quiet, only what matters)."""

    def report(event: Event) -> None:
        if state.json:
            obj: dict[str, Any] = {"event": event.what, "id": event.job_id or None, "kind": event.kind or None}
            obj["detail"] = event.detail
            if event.outcome is not None:
                obj["outcome"] = _outcome_json(event.outcome)
            render.out_json(obj)
        elif not quiet or event.what in _QUIET_SHOWS:
            _say(f"jobctl worker: {render.word(event.line())}")  # a kind or error another writer made: one line

    return report


# -- logs ------------------------------------------------------------------------------------

_LOGS_HELP = """Print the output of job ID's attempts.

Each attempt's stdout and stderr, as `jobctl run` and `jobctl worker` wrote
them, between `--- jobctl: ... ---` lines that say which attempt, epoch and
owner, and how it ended. The logs live in the store's
work/.jobctl/logs/, as ID.attempt-N.log (never inside work/ID, which
belongs to the job).
With --json, one object per log file: attempt, path and size.

\b
Examples:
  jobctl logs 1787202430967-a752f9a9c2c77b123ffd
  jobctl logs "$ID" --attempt 2
  jobctl logs "$ID" --follow
"""


@click.command(cls=JobCommand, help=_LOGS_HELP, short_help="Print the output of a job's attempts.")
@job_id_argument
@click.option("--attempt", type=count(limits.ATTEMPT), metavar="N", help=f"Only attempt N ({limits.ATTEMPT.text()}).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the job writes, until it ends.")
@common
@pass_state
def logs(state: State, job_id: str, attempt: int | None, follow: bool) -> None:
    from .. import runner
    from ..errors import NotFound

    store = state.store()
    store.load(job_id)  # not_found for a job that does not exist

    def files() -> list[tuple[int, str]]:
        found = runner.log_files(store, job_id)
        return [f for f in found if attempt is None or f[0] == attempt]

    found = files()
    if state.json:
        for number, path in found:
            size = runner.log_size(store, job_id, number)
            if size is not None:  # removed since the directory was read
                render.out_json({"id": job_id, "attempt": number, "path": path, "size": size})
        return
    if not found and not follow:
        if attempt is not None:
            raise NotFound(f"job {job_id} has no log of attempt {attempt}", job_id)
        _say(f"jobctl: job {job_id} has no logs yet")
        return
    offsets: dict[str, int] = {}

    def pump() -> bool:
        moved = False
        for number, path in files():
            # Through runner.log_read: a link or FIFO planted at a log is refused, never followed.
            chunk = runner.log_read(store, job_id, number, offsets.get(path, 0))
            if chunk:
                echo_out(chunk, nl=False)  # bytes go to stdout's binary stream as they are
                offsets[path] = offsets.get(path, 0) + len(chunk)
                moved = True
        return moved

    pump()
    while follow:
        time.sleep(0.2)
        moved = pump()
        if not moved and store.load(job_id).terminal:
            pump()  # what was written between the last read and the final write
            break


# -- pipeline ----------------------------------------------------------------------------------

_PIPELINE_HELP = """Show pipeline NAME: its state, and its stages done, running or waiting.

First `pipeline NAME STATE`, the pipeline's state: running,
waiting_for_approval, retry_scheduled, failed, waiting or complete (the
first that holds). Then one line per stage of the pipeline (jobs submitted
with --pipeline NAME), each after the stages it waits for: its stage, its
status (done, running, waiting, failed, cancelled), its id, and what it
waits for or why it ended. A stage is shown once, as its newest run: a job
that `jobctl retry` replaced is not a stage of its own. With --json, one
object per stage, with the pipeline's state and the ids of the earlier runs
(history, newest first).

\b
Example:
  jobctl pipeline nightly
"""


@click.command(cls=JobCommand, help=_PIPELINE_HELP, short_help="Show a pipeline's stages.")
@click.argument("name", metavar="NAME", type=TEXT)
@common
@pass_state
def pipeline(state: State, name: str) -> None:
    from .. import schedule
    from ..errors import JobError, NotFound

    store = state.store()
    listing = store.list()
    stages = schedule.pipeline_stages(listing, name, state.now())
    if not stages:
        known: set[str] = set()
        for rec in listing:
            try:
                membership = schedule.pipeline_of(rec)
            except JobError:
                continue
            if membership is not None:
                known.add(membership[0])
        missing = NotFound(f"no such pipeline {name}: no job was submitted with --pipeline {name}")
        missing.hint = f"the pipelines here: {', '.join(sorted(known))}" if known else "no job belongs to a pipeline"
        raise missing
    overall = schedule.pipeline_state(stages, state.now())
    if state.json:
        for stage in stages:
            render.out_json(
                {
                    "pipeline": name,
                    "pipeline_state": overall,
                    "stage": stage.stage,
                    "id": stage.record.id,
                    "status": stage.status,
                    "state": stage.record.state,
                    "detail": stage.detail,
                    "after": stage.after,
                    "history": [run.id for run in stage.history],
                }
            )
        return
    render.out(f"pipeline {name} {overall}")
    # Aligned for a person; single spaces for a script (the detail, last, may hold spaces).
    aligned = state.screen().terminal
    width = max(len(s.stage) for s in stages) if aligned else 0
    status_width = max(len(s.status) for s in stages) if aligned else 0
    for stage in stages:
        line = f"{stage.stage:<{width}} {stage.status:<{status_width}} {stage.record.id}"
        render.out(f"{line} {stage.detail}" if stage.detail else line)
    if listing.unreadable:
        _say(render.unreadable_line(listing.unreadable))
