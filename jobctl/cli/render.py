"""How results are drawn: plain lines, versioned JSON, and rich views for a terminal.

Three forms, one decision (:class:`Screen`):

* piped: the stable plain lines of upstream's jobctl (DIGEST §8.1), byte for
  byte, and never a colour or a box-drawing character;
* ``--json``: one JSON object a result, JSON Lines for lists and streams, each
  object carrying ``"v": 1`` (see docs/reference/json.md);
* on a terminal: rich tables, colour and relative times.

This is the only module of jobctl that imports rich, and it does so inside
the functions that draw for a terminal, so a piped command never pays for it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import click

from ..errors import JobError
from ..record import ZERO_TIME, Record, format_time, held
from ..store.file import is_orphan
from ..summary import Summary
from ..wire import Raw, dumps_compact

if TYPE_CHECKING:  # pragma: no cover - typing only; rich is imported where it draws
    from rich.console import Console, RenderableType
    from rich.table import Table

__all__ = [
    "JSON_VERSION",
    "Screen",
    "out",
    "out_json",
    "checkpoint_word",
    "claim_line",
    "next_line",
    "env_line",
    "progress_line",
    "state_line",
    "renew_line",
    "list_line",
    "orphan_line",
    "recall_line",
    "intent_line",
    "cancel_line",
    "watch_line",
    "job_json",
    "unreadable_line",
]

#: The version of every JSON shape jobctl prints; it rises only when a key
#: changes meaning or disappears. New keys may appear without a new version.
JSON_VERSION = 1


class Screen:
    """Where data goes and how much it can show.

    ``terminal`` chooses rich views over plain lines; it defaults to whether
    stdout is a TTY, and tests inject it. ``NO_COLOR`` (any non-empty value)
    turns colour off; ``TERM=dumb`` turns off colour and live redrawing;
    ``FORCE_COLOR`` turns colour back on for a dumb terminal. None of them
    ever turns a pipe into a terminal: piped output is the plain lines.
    """

    def __init__(self, terminal: bool, env: Mapping[str, str]) -> None:
        self.terminal = terminal
        self.env = env
        self.dumb = env.get("TERM", "").strip().lower() in ("dumb", "unknown")
        no_colour = env.get("NO_COLOR", "") != ""
        force = env.get("FORCE_COLOR", "") not in ("", "0")
        self.colour = terminal and not no_colour and (force or not self.dumb)
        #: redraw in place (a live table, a progress bar) rather than print anew
        self.live = terminal and not self.dumb

    def console(self) -> Console:
        """A rich console on stdout that does what this screen decided, not what it guesses."""
        from rich.console import Console

        environ = {k: self.env[k] for k in ("COLUMNS", "LINES", "COLORTERM") if self.env.get(k)}
        if not self.dumb and self.env.get("TERM"):
            environ["TERM"] = self.env["TERM"]
        system: Literal["auto", "standard"] | None = None
        if self.colour:
            system = "standard" if self.dumb else "auto"  # rich finds no colours in a dumb TERM itself
        return Console(
            file=sys.stdout,
            force_terminal=True,
            force_interactive=self.live,
            color_system=system,
            no_color=not self.colour,
            highlight=False,
            emoji=False,
            soft_wrap=False,
            _environ=environ,
        )


# -- output primitives --------------------------------------------------------


def out(line: str) -> None:
    """One line of data on stdout, UTF-8 with a bare LF whatever the platform or locale."""
    click.echo(line.encode("utf-8", "surrogateescape") + b"\n", nl=False)


def out_json(obj: Mapping[str, Any]) -> None:
    """One JSON object on one line, ``"v"`` first. Opaque values (:class:`Raw`) keep their spelling."""
    out(dumps_compact({"v": JSON_VERSION, **obj}))


class Lines:
    """Lines of data as :func:`out` writes them, for a long listing: the first at once, the rest in blocks.

    A reader sees the first line as soon as it exists; 100,000 more cost a
    write per 64 KiB instead of one per line. :meth:`flush` before anything
    else is written (stderr, an exit).
    """

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._size = 0
        self._first = True

    def out(self, line: str) -> None:
        data = line.encode("utf-8", "surrogateescape") + b"\n"
        self._pending.append(data)
        self._size += len(data)
        if self._first or self._size >= 1 << 16:
            self._first = False
            self.flush()

    def out_json(self, obj: Mapping[str, Any]) -> None:
        self.out(dumps_compact({"v": JSON_VERSION, **obj}))

    def flush(self) -> None:
        if self._pending:
            click.echo(b"".join(self._pending), nl=False)  # as out() writes, flushed
            self._pending.clear()
            self._size = 0


# -- plain lines (upstream's, byte for byte) ----------------------------------


def checkpoint_word(rec: Record) -> str:
    """The checkpoint compact with its spelling kept, or ``none``."""
    text = rec.checkpoint_text()
    return "none" if text is None else text


def claim_line(rec: Record) -> str:
    return f"epoch={rec.lease.epoch} state={rec.state} checkpoint={checkpoint_word(rec)}"


def next_line(rec: Record) -> str:
    """``claim --next``: the claim line with the id it chose in front."""
    return f"{rec.id} {claim_line(rec)}"


def env_line(rec: Record) -> str:
    """``claim --format env``: assignments for ``eval``, each value quoted for sh."""
    import shlex

    checkpoint = rec.checkpoint_text() or ""
    return (
        f"JOB_ID={shlex.quote(rec.id)} JOB_EPOCH={rec.lease.epoch} "
        f"JOB_KIND={shlex.quote(rec.kind)} JOB_CHECKPOINT={shlex.quote(checkpoint)}"
    )


def progress_line(rec: Record) -> str:
    return f"done={rec.progress.done} checkpoint={checkpoint_word(rec)}"


def state_line(rec: Record) -> str:
    return f"state={rec.state}"


def renew_line(rec: Record) -> str:
    return f"epoch={rec.lease.epoch} expires_at={format_time(rec.lease.expires_at)}"


def list_line(rec: Record) -> str:
    return f"{rec.id} kind={rec.kind} state={rec.state} done={rec.progress.done} checkpoint={checkpoint_word(rec)}"


def summary_line(summary: Summary) -> str:
    """:func:`list_line` of a finished record known by its summary (jobctl.summary)."""
    checkpoint = "none" if summary.checkpoint is None else summary.checkpoint
    return f"{summary.id} kind={summary.kind} state={summary.state} done={summary.done} checkpoint={checkpoint}"


def orphan_line(rec: Record) -> str:
    return f"{rec.id} kind={rec.kind} state={rec.state} checkpoint={checkpoint_word(rec)}"


def recall_line(rec: Record) -> str:
    """Go's line: the ``until`` instant in RFC 3339, whole seconds, ``Z``."""
    recall = rec.lease.recall
    until = recall.until if recall is not None and recall.until is not None else ZERO_TIME
    return f"{rec.id} recalled until {until:%Y-%m-%dT%H:%M:%SZ}"


def intent_line(rec: Record) -> str:
    return f"{rec.id} {rec.want}"


def cancel_line(rec: Record) -> str:
    return f"{rec.id} {rec.state}"


def watch_line(rec: Record) -> str:
    """One visible change [JOB-N1]: everything a watcher can see of a record; ``error`` last."""
    owner = rec.lease.owner or "-"
    line = (
        f"{rec.id} kind={rec.kind} state={rec.state} done={rec.progress.done} total={rec.progress.total} owner={owner}"
    )
    return f"{line} error={rec.error}" if rec.error else line


def unreadable_line(unreadable: list[tuple[str, JobError]]) -> str:
    """Go's ErrUnreadable, as upstream's jobctl prints it after the readable records."""
    ids = ", ".join(job_id for job_id, _ in unreadable)
    return f"jobctl: job: {len(unreadable)} record(s) could not be read ({ids}): {unreadable[0][1]}"


# -- JSON -----------------------------------------------------------------------


def _when(value: datetime | None) -> str | None:
    if value is None or value == ZERO_TIME:
        return None
    return format_time(value)


def _raw(text: str | None) -> Raw | None:
    return None if text is None else Raw(text)


def scheduling(rec: Record, states: Mapping[str, str] | None, now: datetime) -> dict[str, Any]:
    """Attempt, not-before, dependencies, pipeline and why it may not start (jobctl.schedule).

    A malformed extension is shown as such rather than breaking the view of
    every other record.
    """
    from .. import schedule  # only views that show scheduling pay for it

    info: dict[str, Any] = {"attempt": 1, "not_before": None, "after": [], "pipeline": None, "stage": None}
    try:
        info["attempt"] = schedule.attempt(rec)
        info["not_before"] = _when(schedule.not_before(rec))
        info["after"] = schedule.after_of(rec)
        pipeline = schedule.pipeline_of(rec)
        if pipeline is not None:
            info["pipeline"], info["stage"] = pipeline[0], pipeline[1] or None
        blocked = ("", "")
        if states is not None and not rec.terminal:
            blocked = schedule.blocked_by(rec, states, now)
        info["blocked"] = {"reason": blocked[0], "detail": blocked[1]} if blocked[0] else None
    except JobError as exc:
        info["blocked"] = {"reason": "invalid", "detail": str(exc)}
    return info


def job_json(rec: Record, now: datetime, states: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``job`` shape (v1) of docs/reference/json.md."""
    lease = rec.lease
    recall = lease.recall
    obj: dict[str, Any] = {
        "id": rec.id,
        "kind": rec.kind,
        "state": rec.state,
        "spec": _raw(rec.opaque_text("spec")),
        "checkpoint": _raw(rec.checkpoint_text()),
        "done": rec.progress.done,
        "total": rec.progress.total,
        "owner": lease.owner,
        "epoch": lease.epoch,
        "expires_at": _when(lease.expires_at),
        "held": held(lease, now),
        "orphan": is_orphan(rec, now),
        "intent": rec.want,
        "recall": None
        if recall is None
        else {"reason": recall.reason, "by": recall.by, "at": _when(recall.at), "until": _when(recall.until)},
        "error": rec.error,
        "requires": list(rec.requires),
        "created_at": _when(rec.created_at),
        "updated_at": _when(rec.updated_at),
    }
    obj.update(scheduling(rec, states, now))
    return obj


# -- terminal views (rich, imported here only) ------------------------------------

_STATE_STYLE = {
    "pending": "yellow",
    "running": "cyan",
    "transferred": "blue",
    "complete": "green",
    "failed": "bold red",
    "cancelled": "dim",
}


def relative(when: datetime | None, now: datetime) -> str:
    """``in 42s``, ``3m ago``, ``2h ago``: what a person reads faster than a timestamp."""
    if when is None or when == ZERO_TIME:
        return "-"
    seconds = int((when - now).total_seconds())
    span = abs(seconds)
    if span < 1:
        return "now"
    if span < 90:
        text = f"{span}s"
    elif span < 90 * 60:
        text = f"{span // 60}m"
    elif span < 36 * 3600:
        text = f"{span // 3600}h"
    else:
        text = f"{span // 86400}d"
    return f"in {text}" if seconds >= 0 else f"{text} ago"


def _state(rec: Record) -> RenderableType:
    from rich.text import Text

    return Text(rec.state, style=_STATE_STYLE.get(rec.state, ""))


def _bar(rec: Record) -> RenderableType:
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    done, total = rec.progress.done, rec.progress.total
    if not total:
        return Text(str(done) if done else "-")
    grid = Table.grid(padding=(0, 1))
    grid.add_row(ProgressBar(total=total, completed=min(done, total), width=16), Text(f"{done}/{total}", style="dim"))
    return grid


def _lease(rec: Record, now: datetime) -> str:
    lease = rec.lease
    if not lease.owner:
        return "-"
    if held(lease, now):
        return relative(lease.expires_at, now).replace("in ", "") + " left"
    return "lapsed " + relative(lease.expires_at, now)


def _waits(info: Mapping[str, Any]) -> str:
    parts = []
    blocked = info.get("blocked")
    if blocked and blocked["reason"] == "held":
        parts.append("held until approved (jobctl approve)")
    elif blocked:
        parts.append(blocked["detail"])
    elif info["after"]:
        parts.append("after " + ", ".join(info["after"]))
    if info["not_before"] and not blocked:
        parts.append(f"not before {info['not_before']}")
    return "; ".join(parts)


def jobs_table(records: Iterable[Record], now: datetime, states: Mapping[str, str] | None = None) -> Table:
    """The people's view of a list of jobs; optional columns appear only when some job fills them."""
    from rich.table import Table

    recs = list(records)
    infos = [scheduling(rec, states, now) for rec in recs]
    table = Table(show_edge=True, header_style="bold")
    table.add_column("id", no_wrap=True)
    table.add_column("kind")
    table.add_column("state")
    table.add_column("progress", no_wrap=True)
    table.add_column("owner")
    table.add_column("lease", no_wrap=True)
    extra = {
        "intent": any(rec.want != "run" for rec in recs),
        "recall": any(rec.lease.recall is not None for rec in recs),
        "attempt": any(info["attempt"] > 1 for info in infos),
        "waits": any(_waits(info) for info in infos),
        "stage": any(info["pipeline"] for info in infos),
        "error": any(rec.error for rec in recs),
    }
    for name, shown in extra.items():
        if shown:
            table.add_column(name)
    table.add_column("updated", no_wrap=True)
    for rec, info in zip(recs, infos, strict=True):
        row: list[RenderableType] = [rec.id, rec.kind, _state(rec), _bar(rec), rec.lease.owner or "-", _lease(rec, now)]
        if extra["intent"]:
            row.append(rec.want if rec.want != "run" else "")
        if extra["recall"]:
            recall = rec.lease.recall
            row.append("" if recall is None else f"{recall.reason} (until {relative(recall.until, now)})")
        if extra["attempt"]:
            row.append(str(info["attempt"]))
        if extra["waits"]:
            row.append(_waits(info))
        if extra["stage"]:
            row.append(f"{info['pipeline']}/{info['stage'] or rec.kind}" if info["pipeline"] else "")
        if extra["error"]:
            row.append(rec.error)
        row.append(relative(rec.updated_at, now))
        table.add_row(*row)
    if not recs:
        table.caption = "no jobs"
    return table


def print_jobs(screen: Screen, records: Iterable[Record], now: datetime, states: Mapping[str, str] | None) -> None:
    screen.console().print(jobs_table(records, now, states))


def print_job(screen: Screen, rec: Record, now: datetime, states: Mapping[str, str] | None) -> None:
    """``show`` on a terminal: the fields that matter, in words, then the spec and checkpoint."""
    from rich.table import Table

    info = scheduling(rec, states, now)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("id", rec.id)
    grid.add_row("kind", rec.kind)
    grid.add_row("state", _state(rec))
    grid.add_row("progress", _bar(rec))
    lease = rec.lease
    if lease.owner:
        grid.add_row("owner", f"{lease.owner} (epoch {lease.epoch}, {_lease(rec, now)})")
    else:
        grid.add_row("owner", f"nobody (epoch {lease.epoch})")
    if rec.intent is not None:
        grid.add_row("intent", f"{rec.want} by {rec.intent.by or '?'} {relative(rec.intent.at, now)}")
    if lease.recall is not None:
        grid.add_row("recall", f"{lease.recall.reason} until {relative(lease.recall.until, now)}")
    if info["attempt"] > 1 or "jobctl.run/retry@1" in rec.extensions:
        grid.add_row("attempt", str(info["attempt"]))
    if info["not_before"]:
        grid.add_row("not before", info["not_before"])
    if info["after"]:
        grid.add_row("after", ", ".join(info["after"]))
    if info["pipeline"]:
        grid.add_row("pipeline", f"{info['pipeline']} / {info['stage'] or rec.kind}")
    if info.get("blocked"):
        grid.add_row("waiting", info["blocked"]["detail"])
    if rec.error:
        grid.add_row("error", rec.error)
    if rec.requires:
        grid.add_row("requires", ", ".join(rec.requires))
    grid.add_row("spec", rec.opaque_text("spec") or "")
    grid.add_row("checkpoint", checkpoint_word(rec))
    grid.add_row("created", f"{format_time(rec.created_at)} ({relative(rec.created_at, now)})")
    grid.add_row("updated", f"{format_time(rec.updated_at)} ({relative(rec.updated_at, now)})")
    screen.console().print(grid)


def print_pairs(screen: Screen, pairs: Iterable[tuple[str, str]]) -> None:
    """Key/value facts (``paths``) as a two-column table."""
    from rich.table import Table

    table = Table(show_header=False, header_style="bold")
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in pairs:
        style = "red" if value.startswith("FAILED") else ""
        table.add_row(key, value, style=style)
    screen.console().print(table)


class LiveTable:
    """A table redrawn in place while it lasts (``watch``, ``wait``); printed anew on a dumb terminal."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen
        self.console = screen.console()
        self._live: Any = None

    def __enter__(self) -> LiveTable:
        if self.screen.live:
            from rich.live import Live

            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.__enter__()
        return self

    def show(self, renderable: RenderableType) -> None:
        if self._live is not None:
            self._live.update(renderable, refresh=True)
        else:
            self.console.print(renderable)

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)


def watch_table(records: Iterable[Record], now: datetime, title: str) -> Table:
    """The live view of ``watch``: id, kind, state, progress, owner, lease left, intent, recall."""
    from rich.table import Table

    table = Table(title=title, header_style="bold", title_justify="left")
    for name in ("id", "kind", "state", "progress", "owner", "lease", "intent", "recall"):
        table.add_column(name, no_wrap=name in ("id", "lease"))
    count = 0
    for rec in records:
        count += 1
        recall = rec.lease.recall
        table.add_row(
            rec.id,
            rec.kind,
            _state(rec),
            _bar(rec),
            rec.lease.owner or "-",
            _lease(rec, now),
            rec.want if rec.want != "run" else "",
            "" if recall is None else f"{recall.reason} (until {relative(recall.until, now)})",
        )
    if not count:
        table.caption = "no jobs yet"
    return table


def wait_table(records: Iterable[tuple[str, Record | None]], now: datetime, goal: str) -> Table:
    """The view of ``wait``: one progress bar a job, and whether it has settled."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"waiting for {goal}", header_style="bold", title_justify="left")
    for name in ("id", "state", "progress", "owner", "lease"):
        table.add_column(name, no_wrap=True)
    for job_id, rec in records:
        if rec is None:
            table.add_row(job_id, Text("missing", style="red"), "", "", "")
            continue
        table.add_row(job_id, _state(rec), _bar(rec), rec.lease.owner or "-", _lease(rec, now))
    return table
