"""The ``jobctl`` command group and the plumbing every command shares.

Parsing and dispatch only: a command module parses its arguments, calls the
library and hands the result to :mod:`jobctl.cli.render`. What lives here:

* :class:`State`, the per-run context object (store discovery, ``--json``,
  whether stdout is a terminal -- injectable, so tests can pretend);
* the option types and decorators that make one option mean one thing on
  every command (``--store``, ``--json``, ``--epoch``, ``--ttl``, ``--by``);
* :class:`JobCommand`, which accepts upstream's Go flag spellings
  (``-owner me``, ``-owner=me``) beside click's;
* :class:`JobGroup`, which loads a command's module only when that command
  runs (start-up is a cron job's latency) and is the one place where a
  verdict becomes a stderr line and an exit code.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import __version__, limits
from ..discovery import Unavailable
from ..errors import EXIT_FAILURE, EXIT_USAGE, JobError
from ..limits import Range
from .output import echo_out
from .params import (
    COUNT,
    JSON_TEXT,
    PATH_TEXT,
    SECONDS,
    STATE_CHOICE,
    STATES_HELP,
    TEXT,
    _Seconds,
    count,
    json_given,
    json_text,
    not_utf8,
    raw_json,
    seconds,
    stdin_bytes,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..record import Record
    from ..store.file import FileStore
    from ..store.postgres import PostgresStore
    from .render import Screen

__all__ = [
    "cli",
    "State",
    "JobGroup",
    "JobCommand",
    "pass_state",
    "common",
    "job_id_argument",
    "complete_ids",
    "epoch_option",
    "NO_EPOCH",
    "ttl_option",
    "run_ttl_option",
    "by_option",
    "TEXT",
    "PATH_TEXT",
    "JSON_TEXT",
    "not_utf8",
    "json_text",
    "json_given",
    "stdin_bytes",
    "SECONDS",
    "COUNT",
    "TTL_SECONDS",
    "TTL_HELP",
    "seconds",
    "count",
    "STATE_CHOICE",
    "STATES_HELP",
    "default_by",
    "raw_json",
    "echo_out",
    "EXIT_OK",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "EXIT_FAILED",
    "EXIT_CANCELLED",
    "EXIT_ENDED_OTHERWISE",
    "EXIT_TIMEOUT",
    "EXIT_DRAIN_INCOMPLETE",
    "EXIT_INTERRUPTED",
    "EXIT_BROKEN_PIPE",
    "HINTS",
]

F = TypeVar("F", bound=Callable[..., Any])

# Exit codes beyond the verdicts' own (3..10, see jobctl.errors); docs/reference/exit-codes.md.
EXIT_OK = 0
#: ``wait``: a job ended ``failed`` instead of reaching the awaited state.
EXIT_FAILED = 11
#: ``wait``: a job ended ``cancelled`` instead of reaching the awaited state.
EXIT_CANCELLED = 12
#: ``wait --state S``: a job ended ``complete`` without being seen in state S.
EXIT_ENDED_OTHERWISE = 13
#: ``worker --drain``: a job it ran ended otherwise than ``complete``.
EXIT_DRAIN_INCOMPLETE = 17
#: ``wait --timeout`` ran out first (as coreutils ``timeout``).
EXIT_TIMEOUT = 124
#: Interrupted (Ctrl-C): 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130
#: stdout was closed under us (``jobctl list | head -1``): 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 141

#: What to do next, by verdict: the second half of every refusal line.
HINTS: dict[str, str] = {
    "not_found": "check the id (jobctl list shows every job)",
    "lease_held": "claim another job (jobctl claim --next) or wait for its lease to lapse",
    "stale_epoch": "stop working on it and read it again (jobctl show {id})",
    "lease_expired": "claim it again (jobctl claim {id}) and resume from its checkpoint",
    "terminal": "submit a new job if the work must run again",
    "unknown_schema": "a newer implementation wrote it; leave it for a reader that understands it",
    "invalid": "fix the request (jobctl COMMAND --help shows what each command takes)",
    "exists": "nothing was changed (submit --exists-ok treats this as done)",
    "refused": "nothing was changed; fix the cause and try again",
}


# -- the per-run state -----------------------------------------------------------


class State:
    """What one run of ``jobctl`` knows beyond its arguments.

    ``terminal`` is None to ask stdout; tests pass True or False. ``env``
    is None for the process environment. ``store`` skips discovery (a test
    hands in a store on its own clock). ``clock`` is the clock used for
    display (relative times, who is an orphan): the store's when it has one.
    """

    def __init__(
        self,
        terminal: bool | None = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        store: FileStore | PostgresStore | None = None,
    ) -> None:
        self.store_flag: str | None = None
        self.json = False
        self.debug = False
        self._terminal = terminal
        self._env = env
        self._clock = clock
        self._store: FileStore | PostgresStore | None = store
        self._max_ttl: float | None = None

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    def now(self) -> datetime:
        if self._clock is not None:
            return self._clock()
        if self._store is not None:
            return self._store.now()
        return datetime.now(timezone.utc)

    def store(self, create: bool = False) -> FileStore | PostgresStore:
        """The store this run talks to, discovered on first use (DIGEST §7).

        Only ``create`` (``submit``, ``init``) makes a store where there is
        none; every other command refuses a root with no store (``no_store``).
        """
        if self._store is None:
            from .. import discovery

            root, rung = discovery.resolve(self.store_flag, self.env, warn=lambda line: click.echo(line, err=True))
            self._store = discovery.open_store(root, rung, create=create)
        return self._store

    def max_ttl(self) -> float:
        """The ``max_ttl`` setting (``JOBCTL_MAX_TTL``, config ``max_ttl``, default a day), read once.

        Read only by the commands that grant or judge a lease, and by
        ``list``/``show`` only when a lease reaches that far ahead at all:
        it costs the config file's read.
        """
        if self._max_ttl is None:
            from .. import settings

            self._max_ttl = float(settings.one("max_ttl", self.env).value)
        return self._max_ttl

    def lease_store(self, ttl: float) -> FileStore | PostgresStore:
        """The store, told the longest lease it may grant (``claim``, ``renew``, ``run``).

        A ``ttl`` no longer than the smallest ``max_ttl`` there can be is
        within every setting: the config file is not read for it (a cron
        consumer's ``claim --next --ttl 30`` stays as quick as it was).
        """
        store = self.store()
        if ttl > limits.MAX_TTL.low:
            store.max_ttl = self.max_ttl()
        return store

    def long_leases(self, records: Iterable[Record]) -> set[str]:
        """Ids of the records whose lease runs further ahead than any jobctl grants (docs/howto/recovery.md)."""
        now = self.now()
        floor = limits.MAX_TTL.low  # nothing under the smallest max_ttl can be too long: no setting to read
        ahead = [r for r in records if limits.lease_too_long(r.lease.expires_at, now, floor)]
        if not ahead:
            return set()
        ceiling = self.max_ttl()
        return {r.id for r in ahead if limits.lease_too_long(r.lease.expires_at, now, ceiling)}

    def close(self) -> None:
        """Let go of the store's connection, when it has one (a database store)."""
        close = getattr(self._store, "close", None)
        if close is not None:
            close()

    @property
    def terminal(self) -> bool:
        if self._terminal is not None:
            return self._terminal
        try:
            return sys.stdout.isatty()
        except (ValueError, AttributeError):  # closed under us, or replaced by something without a tty
            return False

    def screen(self) -> Screen:
        from .render import Screen

        return Screen(self.terminal and not self.json, self.env)


pass_state = click.make_pass_decorator(State, ensure=True)


def default_by() -> str:
    """Who is asking, when nobody said: ``jobctl@<host>:<pid>``, upstream's spelling."""
    try:
        host = os.uname().nodename
    except AttributeError:  # Windows has no uname
        host = os.environ.get("COMPUTERNAME", "localhost")
    return f"jobctl@{host}:{os.getpid()}"


# -- shared options ------------------------------------------------------------------


def _set_store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.ensure_object(State).store_flag = value


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(State).json = True


def _version_text() -> str:
    """``jobctl --version``: the release, then the contract models and jobctl's own extensions it speaks.

    The first line stays ``jobctl X.Y.Z`` for scripts that read only that.
    """
    from ..record import AFTER, MODELS, PIPELINE, RETRY

    lines = [f"jobctl {__version__}", "abstraction-job file binding, models:"]
    lines += [f"  {name}" for name in sorted(MODELS)]
    lines.append("jobctl extensions:")
    lines += [f"  {name}" for name in sorted((AFTER, PIPELINE, RETRY))]
    return "\n".join(lines)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        _eager_out(ctx, _version_text())
        ctx.exit()


def _eager_out(ctx: click.Context, text: str) -> None:
    """Print ``--help`` or ``--version``; as any command's output, a closed stdout exits 141.

    The group's eager options run while the group parses its arguments,
    before :meth:`JobGroup.invoke` can map anything, so they map it here.
    """
    try:
        echo_out(text, color=ctx.color)
    except BrokenPipeError:
        _broken_pipe(ctx)


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(State).debug = True


store_option = click.option(
    "--store",
    metavar="DIR",
    type=PATH_TEXT,
    expose_value=False,
    callback=_set_store,
    is_eager=True,
    help="Store root (a directory or a postgresql:// URL); beats JOB_STORE, ABSTRACTION_STORE and the config file.",
)
json_option = click.option(
    "--json",
    is_flag=True,
    expose_value=False,
    callback=_set_json,
    help="Print JSON (JSON Lines for lists and streams), versioned.",
)


def common(fn: F) -> F:
    """``--store`` and ``--json``, the same on every command."""
    return store_option(json_option(fn))


def complete_ids(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Job ids for shell completion: the names in ``<root>/jobs``; nothing is decoded or created."""
    from click.shell_completion import CompletionItem

    from .. import discovery, fsio

    state = ctx.find_object(State) or State()
    try:
        root, _rung = discovery.resolve(state.store_flag, state.env)
        with fsio.opened_dir(root, "jobs") as jobs:  # a link at jobs/ is not followed, even for names
            names = sorted(
                e.name[:-5] for e in fsio.scan(jobs) if e.name.endswith(".json") and not e.name.startswith(".")
            )
    except (OSError, JobError, discovery.Unavailable):
        return []
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def _need_id(ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    if value is None and not ctx.resilient_parsing:
        raise click.UsageError(f"{ctx.info_name} needs a job id: name it, or set JOB_ID", ctx=ctx)
    return value or ""


def job_id_argument(fn: F) -> F:
    """``[ID]``, defaulting to ``$JOB_ID`` so a command run under a lease needs no arguments.

    Missing from both, it is a usage error that says so in those words (not
    click's ``Missing argument``), and the usage line shows it as optional.
    """
    return click.argument(
        "job_id",
        metavar="[ID]",
        envvar="JOB_ID",
        type=TEXT,
        required=False,
        callback=_need_id,
        shell_complete=complete_ids,
    )(fn)


#: The one line a holder command prints when it has no epoch to present.
NO_EPOCH = "no epoch: pass --epoch N or export JOB_EPOCH"


def _need_epoch(ctx: click.Context, _param: click.Parameter, value: int | None) -> int:
    # Epoch 0 is never a default: a script that forgot its epoch would be told
    # stale_epoch ("somebody claimed it since"), which scripts read as "not ours
    # any more, walk away", and the job would be abandoned for a typo [JOB-L1].
    if value is None and not ctx.resilient_parsing:
        raise click.UsageError(NO_EPOCH, ctx=ctx)
    return value or 0


def epoch_option(fn: F) -> F:
    return click.option(
        "--epoch",
        type=COUNT,
        metavar="N",
        envvar="JOB_EPOCH",
        show_envvar=True,
        callback=_need_epoch,
        help=f"The epoch this holder's claim returned ({limits.EPOCH.text()}). Required: there is no default.",
    )(fn)


#: The option type of a --ttl of jobctl run and worker: the hard range; the store refuses more than max_ttl.
TTL_SECONDS = _Seconds(limits.RUN_TTL)
TTL_HELP = f"({limits.RUN_TTL.text()}; at most max_ttl, default 86400, else invalid)"


def _ttl_option(bounds: Range) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        return click.option(
            "--ttl",
            type=_Seconds(bounds),
            default=30.0,
            show_default=True,
            help=f"How long the lease lasts, in seconds ({bounds.text()}; at most max_ttl, default 86400, "
            "else invalid).",
        )(fn)

    return decorate


#: --ttl of claim and renew (0 is a lease that lapses at once).
ttl_option = _ttl_option(limits.TTL)
#: --ttl of jobctl run (renewed every third of it, so more than 0).
run_ttl_option = _ttl_option(limits.RUN_TTL)


def by_option(fn: F) -> F:
    return click.option("--by", type=TEXT, help="Who is asking. [default: jobctl@HOST:PID]")(fn)


# -- command and group classes -----------------------------------------------------------


def _show_help(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        _eager_out(ctx, ctx.get_help())
        ctx.exit()


def _help_option(command: click.Command, ctx: click.Context) -> click.Option | None:
    """click's help option, built without a gettext lookup.

    click translates the option's help text as it builds it, and the first
    translation imports ``locale`` and searches the disk for catalogues: a
    millisecond and more on every start of a command that never shows help.
    """
    names = command.get_help_option_names(ctx)
    if not names or not command.add_help_option:
        return None
    cached: click.Option | None = command.__dict__.get("_jobctl_help")
    if cached is None:
        storage = getattr(click.core, "_HELP_OPTION_STORAGE_NAME", "help")
        cached = click.Option(
            [*sorted(names, key=len), storage],
            is_flag=True,
            expose_value=False,
            is_eager=True,
            help="Show this message and exit.",
            callback=_show_help,
        )
        command.__dict__["_jobctl_help"] = cached
    return cached


class JobCommand(click.Command):
    """A command that also takes upstream's Go flag spellings: ``-owner me`` and ``-owner=me``.

    Positionals may sit anywhere among the flags (click's default for a
    command), so a script written for upstream's jobctl parses the same.
    """

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        return _help_option(self, ctx)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        longs = {
            opt
            for param in self.params
            if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts)
            if opt.startswith("--")
        }
        fixed: list[str] = []
        for index, arg in enumerate(args):
            if arg == "--":
                fixed.extend(args[index:])
                break
            if len(arg) > 2 and arg[0] == "-" and arg[1] != "-" and "-" + arg.split("=", 1)[0] in longs:
                arg = "-" + arg
            fixed.append(arg)
        return super().parse_args(ctx, fixed)


#: Command name -> (module, attribute). A module is imported only when one of its commands runs.
LAZY: dict[str, tuple[str, str]] = {
    "submit": ("submit", "submit"),
    "claim": ("lease", "claim"),
    "progress": ("lease", "progress"),
    "checkpoint": ("lease", "checkpoint"),
    "renew": ("lease", "renew"),
    "release": ("lease", "release"),
    "finish": ("lease", "finish"),
    "show": ("view", "show"),
    "result": ("view", "result"),
    "list": ("view", "list_jobs"),
    "orphans": ("view", "orphans"),
    "intent": ("control", "intent"),
    "approve": ("control", "approve"),
    "recall": ("control", "recall"),
    "cancel": ("control", "cancel"),
    "watch": ("live", "watch"),
    "wait": ("live", "wait"),
    "sweep": ("upkeep", "sweep"),
    "paths": ("upkeep", "paths"),
    "doctor": ("upkeep", "doctor"),
    "init": ("upkeep", "init"),
    "run": ("work", "run"),
    "worker": ("work", "worker"),
    "logs": ("work", "logs"),
    "pipeline": ("work", "pipeline"),
    "serve": ("serve", "serve"),
    "retry": ("lifecycle", "retry"),
    "gc": ("lifecycle", "gc"),
    "db": ("db", "db"),
    "schedule": ("schedules", "schedule"),
    "export": ("transfer", "export"),
    "import": ("transfer", "import_"),
}

#: How ``jobctl --help`` groups the commands; anything unlisted goes under "Other".
SECTIONS: list[tuple[str, tuple[str, ...]]] = [
    ("Submit and look", ("submit", "show", "result", "list", "orphans", "watch", "wait")),
    ("Hold a lease", ("claim", "progress", "checkpoint", "renew", "release", "finish")),
    ("Ask a holder", ("intent", "approve", "recall", "cancel")),
    ("Do the work", ("run", "worker", "pipeline", "logs", "retry", "serve", "schedule")),
    ("Upkeep", ("init", "gc", "sweep", "paths", "doctor", "help")),
    ("Move and set up", ("export", "import", "db")),
]


class JobGroup(click.Group):
    """The ``jobctl`` group: lazy command loading, sectioned help, verdicts mapped to exit codes."""

    command_class = JobCommand

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        return _help_option(self, ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*LAZY, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        spec = LAZY.get(cmd_name)
        if spec is None:
            return None
        module = importlib.import_module(f"{__package__}.{spec[0]}")
        command: click.Command = getattr(module, spec[1])
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, but an unknown command gets a suggestion (`lst` -> `list`), as an unknown option does."""
        name = click.utils.make_str(args[0])
        if self.get_command(ctx, name) is None and not name.startswith("-") and not ctx.resilient_parsing:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        placed = {name for _, members in SECTIONS for name in members}
        sections = [*SECTIONS, ("Other", tuple(n for n in names if n not in placed))]
        limit = formatter.width - 6 - max((len(n) for n in names), default=0)
        for title, members in sections:
            rows = []
            for name in members:
                cmd = self.get_command(ctx, name)
                if cmd is None or cmd.hidden:
                    continue
                rows.append((name, cmd.get_short_help_str(limit)))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; the one place where a refusal becomes a stderr line and an exit code."""
        state = ctx.ensure_object(State)
        try:
            return self._invoke(ctx, state)
        finally:
            state.close()

    def _invoke(self, ctx: click.Context, state: State) -> Any:
        try:
            return super().invoke(ctx)
        except JobError as exc:
            if state.debug:
                _traceback()
            click.echo(refusal_line(exc, ctx.invoked_subcommand), err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            _broken_pipe(ctx)
        except Unavailable as exc:
            if state.debug:
                _traceback()
            for line in exc.lines:
                click.echo(line, err=True)
            ctx.exit(EXIT_FAILURE)
        except OSError as exc:
            if state.debug:
                _traceback()
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"jobctl: {where}{exc.strerror or exc}", err=True)
            ctx.exit(EXIT_FAILURE)


def _broken_pipe(ctx: click.Context) -> None:
    """Exit 141, quietly: nobody reads stdout any more (``| head -1``, or started with it closed)."""
    # Point stdout at /dev/null so the flush at interpreter exit does not
    # raise a second time and print a traceback.
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    finally:
        os.close(devnull)
    ctx.exit(EXIT_BROKEN_PIPE)


def _traceback() -> None:
    import traceback

    traceback.print_exc(file=sys.stderr)


def refusal_line(exc: JobError, command: str | None = None) -> str:
    """``jobctl: <verdict>: <what and which job>; <what to do next>`` -- one line.

    ``command`` is the command that ran, so the advice names its real help.
    """
    message = " ".join(str(exc).split()) or exc.verdict.replace("_", " ")
    hint = str(getattr(exc, "hint", "") or HINTS.get(exc.verdict, "")).replace("{id}", exc.job_id or "ID")
    hint = hint.replace("COMMAND", command or "COMMAND")
    return f"jobctl: {exc.verdict}: {message}; {hint}" if hint else f"jobctl: {exc.verdict}: {message}"


# -- the group ---------------------------------------------------------------------------------

CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=JobGroup, context_settings=CONTEXT, no_args_is_help=True)
@store_option
@json_option
@click.option(
    "--debug", is_flag=True, expose_value=False, callback=_set_debug, help="Show a traceback when something fails."
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version and the record models it speaks, and exit.",
)
def cli() -> None:
    """Durable jobs in a shared directory: leased, fenced, checkpointed, resumable.

    Every command works on one store: a directory, or a PostgreSQL database
    named by a postgresql:// URL. It is the one given with --store, else
    $JOB_STORE, else $ABSTRACTION_STORE, else the "store" in the per-user
    abstraction/config.json, else ~/.abstraction; `jobctl paths` says which
    and why.

    Piped, each command prints the plain lines of upstream's jobctl (a
    record's kind, owner or error that holds a character that is not
    printable, a newline say, is written escaped, \\n, so that a line stays
    one line); on a terminal, tables; with --json, versioned JSON. Data goes to stdout,
    everything else to stderr; a refusal exits with its verdict's code
    (docs/reference/exit-codes.md).

    \b
    Examples:
      jobctl submit --kind K --spec '<json>' [--total N] [--requires a,b]
      jobctl claim --next --owner "$HOSTNAME" --format env
      jobctl recall <id> --epoch N --reason WHY [--grace SECONDS] [--by who]
    """


@cli.command("help", cls=JobCommand)
@click.argument("command", required=False, metavar="[COMMAND]")
@click.pass_context
def help_command(ctx: click.Context, command: str | None) -> None:
    """Show help for jobctl or for one command.

    \b
    Example:
      jobctl help claim
    """
    parent = ctx.parent
    assert parent is not None  # a subcommand always has its group's context
    if command is None:
        echo_out(parent.get_help())
        return
    cmd = cli.get_command(parent, command)
    if cmd is None:
        raise click.UsageError(f"no such command {command!r}", ctx=parent)
    with cmd.make_context(command, [], parent=parent, resilient_parsing=True) as sub:
        echo_out(cmd.get_help(sub))
