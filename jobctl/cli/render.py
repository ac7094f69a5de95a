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
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from ..errors import JobError
from ..record import RESULT, ZERO_TIME, Record, format_time, held, is_zero
from ..store.file import is_orphan
from ..wire import Raw, dumps_compact
from .main import echo_out

if TYPE_CHECKING:  # pragma: no cover - typing only; rich is imported where it draws
    from rich.console import Console, OverflowMethod, RenderableType
    from rich.table import Table
    from rich.text import Text

    from ..summary import Summary

__all__ = [
    "JSON_VERSION",
    "Screen",
    "out",
    "out_json",
    "json_line",
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
    "word",
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
    echo_out(line.encode("utf-8", "surrogateescape") + b"\n", nl=False)


def json_line(obj: Mapping[str, Any]) -> str:
    """One JSON object as one line, ``"v"`` first. Opaque values (:class:`Raw`) keep their spelling."""
    return dumps_compact({"v": JSON_VERSION, **obj})


def out_json(obj: Mapping[str, Any]) -> None:
    """One JSON object on one line (:func:`json_line`)."""
    out(json_line(obj))


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

    def out_all(self, lines: list[str]) -> None:
        """:meth:`out` of each of ``lines``, written together (the first at once, if it is the first of all)."""
        if lines and self._first:
            self.out(lines[0])
            lines = lines[1:]
        if lines:
            self.flush()
            echo_out(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"), nl=False)

    def out_json(self, obj: Mapping[str, Any]) -> None:
        self.out(json_line(obj))

    def flush(self) -> None:
        if self._pending:
            echo_out(b"".join(self._pending), nl=False)  # as out() writes, flushed
            self._pending.clear()
            self._size = 0


# -- plain lines (upstream's, byte for byte) ----------------------------------


def word(text: str) -> str:
    """A record's own text as one field of a plain line: itself, unless it holds a character that is not printable.

    Other writers may put any string in ``kind``, ``lease.owner`` or
    ``error``; a newline there would make one record two lines to a script
    reading them, and an escape character would talk to the terminal. Each
    such character (a control character, a line or paragraph separator,
    anything :meth:`str.isprintable` refuses) is written as Python spells it
    in a string: ``\\n``, ``\\x1b``, ``\\u2028``. Printable text, every
    conforming value in practice, is written as it is, byte for byte.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


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

    # The same value `jobctl run` gives its command (JSON; `null` when there is none).
    text = rec.checkpoint_text()
    checkpoint = "null" if text is None else text
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
    kind = word(rec.kind)
    return f"{rec.id} kind={kind} state={rec.state} done={rec.progress.done} checkpoint={checkpoint_word(rec)}"


def summary_line(summary: Summary) -> str:
    """:func:`list_line` of a finished record known by its summary (jobctl.summary)."""
    checkpoint = "none" if summary.checkpoint is None else summary.checkpoint
    kind = summary.kind if summary.kind.isprintable() else word(summary.kind)
    return f"{summary.id} kind={kind} state={summary.state} done={summary.done} checkpoint={checkpoint}"


def orphan_line(rec: Record) -> str:
    return f"{rec.id} kind={word(rec.kind)} state={rec.state} checkpoint={checkpoint_word(rec)}"


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
    owner = word(rec.lease.owner) or "-"
    line = (
        f"{rec.id} kind={word(rec.kind)} state={rec.state} done={rec.progress.done} total={rec.progress.total}"
        f" owner={owner}"
    )
    return f"{line} error={word(rec.error)}" if rec.error else line


def unreadable_line(unreadable: list[tuple[str, JobError]]) -> str:
    """Go's ErrUnreadable, as upstream's jobctl prints it after the readable records."""
    ids = ", ".join(job_id for job_id, _ in unreadable)
    return f"jobctl: job: {len(unreadable)} record(s) could not be read ({ids}): {unreadable[0][1]}"


# -- JSON -----------------------------------------------------------------------


def _when(value: datetime | None) -> str | None:
    if is_zero(value):
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
    from ..submitter import submitter_of

    info: dict[str, Any] = {"attempt": 1, "not_before": None, "after": [], "pipeline": None, "stage": None}
    info["submitted_by"] = submitter_of(rec)
    try:
        info["attempt"] = schedule.shown_attempt(rec)
        # An ended job starts no further attempt: a not-before time left over
        # from its last retry would read as a promise of another.
        info["not_before"] = None if rec.terminal else _when(schedule.not_before(rec))
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


def job_json(
    rec: Record, now: datetime, states: Mapping[str, str] | None = None, long_lease: bool | None = None
) -> dict[str, Any]:
    """The ``job`` shape (v1) of docs/reference/json.md.

    ``long_lease``: whether the lease runs further ahead than ``max_ttl``
    allows (the caller read the setting); None judges by the default.
    """
    lease = rec.lease
    if long_lease is None:
        from ..limits import DEFAULT_MAX_TTL, lease_too_long

        long_lease = lease_too_long(lease.expires_at, now, DEFAULT_MAX_TTL)
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
        "held": live_lease(rec, now),
        "lease_too_long": long_lease,
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
    obj["unhandled"] = None  # judged by show and list, which read what running workers handle (cli/view.py)
    obj["result"] = _raw(rec.opaque_text("x:" + RESULT))
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
    if when is None or is_zero(when):
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


def live_lease(rec: Record, now: datetime) -> bool:
    """Whether anybody holds ``rec`` for a reader: never a terminal job [JOB-T1].

    The final write leaves the holder's lease in the record (the bytes are as
    the contract writes them), but nothing can be done under it any more.
    """
    return not rec.terminal and held(rec.lease, now)


def _lease(rec: Record, now: datetime, too_long: bool = False) -> str:
    lease = rec.lease
    if not lease.owner or rec.terminal:
        return "-"
    if held(lease, now):
        left = relative(lease.expires_at, now).replace("in ", "") + " left"
        return left + " (too long: jobctl recall)" if too_long else left
    return "lapsed " + relative(lease.expires_at, now)


def _waits(rec: Record, info: Mapping[str, Any]) -> str:
    """What a job still waits for; nothing for an ended job, whose scheduling is history."""
    if rec.terminal:
        return ""
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


# -- which rows, in which order, and which columns fit ------------------------------


def view_rank(rec: Record) -> int:
    """Running (and transferred) jobs first, then pending ones (held included), then ended ones."""
    if rec.terminal:
        return 2
    return 0 if rec.state in ("running", "transferred") else 1


def by_creation(records: Iterable[Record], newest: bool = False) -> list[Record]:
    """Oldest first by creation time, then id (so ``fetch-2`` comes before ``fetch-10`` when it was made first)."""
    recs = sorted(records, key=lambda r: (r.created_at or ZERO_TIME, r.id))
    return recs[::-1] if newest else recs


def view_order(records: Iterable[Record], newest: bool = False) -> list[Record]:
    """Active jobs before ended ones (:func:`view_rank`); each group by creation (:func:`by_creation`)."""
    return sorted(by_creation(records, newest), key=view_rank)  # sorted() is stable: creation order stays


def one_line(text: str) -> str:
    """Text made one line: every run of whitespace (newlines too) becomes one space."""
    return " ".join(text.split())


def _text(value: str, overflow: OverflowMethod | None = None) -> Text:
    """A record's own text (or a path, or a name given) for rich to draw as it is.

    Not read as markup: a kind ``[/]`` is those three characters, not a
    closing tag rich refuses with a traceback, and ``[bold]x`` is not bold.
    A character that is not printable is written escaped (:func:`word`), so
    no escape sequence reaches the terminal; line breaks are kept.
    """
    from rich.text import Text

    return Text("\n".join(word(line) for line in value.split("\n")), overflow=overflow)


#: The narrowest a column of free text is cut to (with …) before it is dropped instead.
SHRUNK = 8
#: The widest progress bar drawn.
BAR = 16


class _Column:
    """One column of a fitted table: its cells as plain text, how far it may shrink, when it goes.

    ``drop`` orders the columns that may be left out when the terminal is
    narrow (lowest goes first); None means never (id and state). A ``shrink``
    column is cut to one line with … rather than wrapped.
    """

    def __init__(
        self,
        name: str,
        texts: list[str],
        drop: int | None,
        shrink: bool = False,
        styles: list[str] | None = None,
        bars: list[tuple[int, int]] | None = None,
    ) -> None:
        from rich.cells import cell_len

        self.name = name
        self.texts = texts = [word(t) for t in texts]  # a cell is one line, and no escape reaches the terminal
        self.drop = drop
        self.styles = styles
        self.bars = bars
        text_width = max([cell_len(name), *(cell_len(t) for t in texts)])
        self.least = min(text_width, max(cell_len(name), SHRUNK)) if shrink else text_width
        self.text_width = self.natural = text_width
        if bars and any(total for _, total in bars):
            self.natural = text_width + 1 + BAR
        self.width = self.least

    def cell(self, row: int) -> RenderableType:
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        text = Text(self.texts[row], style=self.styles[row] if self.styles else "")
        if self.bars is None:
            return text
        done, total = self.bars[row]
        room = self.width - len(self.texts[row]) - 1
        if not total or room < 4:
            return text
        grid = Table.grid(padding=(0, 1))
        text.stylize("dim")
        grid.add_row(ProgressBar(total=total, completed=min(done, total), width=min(room, BAR)), text)
        return grid


def _fit(columns: list[_Column], width: int) -> list[_Column]:
    """The columns that fit ``width`` and their widths: low-value columns go first, id and state stay.

    A table without outer edges takes three cells a column beside its
    contents (two of padding, one of rule) less three (no outer rules, no
    outer padding). Every kept column gets its least
    width; what is left goes to the most valuable columns first, up to what
    their contents want.
    """
    kept = list(columns)

    def need(cols: list[_Column]) -> int:
        return sum(c.least for c in cols) + 3 * len(cols) - 3

    while need(kept) > width:
        droppable = [c for c in kept if c.drop is not None]
        if not droppable:
            break
        kept.remove(min(droppable, key=lambda c: c.drop or 0))
    slack = max(0, width - need(kept))
    for col in kept:
        col.width = col.least
    # One cell at a time to each column that wants more, most valuable first,
    # so a long error does not starve the waits beside it; the progress bars,
    # decoration, get what the text leaves.
    for goal in ("text_width", "natural"):
        hungry = [c for c in sorted(kept, key=lambda c: -1 if c.drop is None else -c.drop - 1)]
        hungry = [c for c in hungry if getattr(c, goal) > c.width]
        while slack and hungry:
            for col in list(hungry):
                if not slack:
                    break
                col.width += 1
                slack -= 1
                if col.width >= getattr(col, goal):
                    hungry.remove(col)
    return kept


def _fitted_table(columns: list[_Column], rows: int, width: int, **options: Any) -> Table:
    from rich.table import Table

    if isinstance(options.get("title"), str):
        options["title"] = _text(options["title"])  # it may name a kind or a pipeline: no markup read in it
    # No outer edge: at 80 columns the four cells it costs are a column of data.
    table = Table(header_style="bold", show_edge=False, pad_edge=False, **options)
    kept = _fit(columns, width)
    for col in kept:
        table.add_column(col.name, width=col.width, no_wrap=True, overflow="ellipsis")
    for row in range(rows):
        table.add_row(*(col.cell(row) for col in kept))
    return table


def _progress_text(rec: Record) -> str:
    done, total = rec.progress.done, rec.progress.total
    if total:
        return f"{done}/{total}"
    return str(done) if done else "-"


def _job_columns(
    recs: list[Record], now: datetime, states: Mapping[str, str] | None, long_leases: Collection[str] = ()
) -> list[_Column]:
    """Every column a job table may show; optional ones only when some job fills them.

    Left out first when narrow: intent, recall, updated, owner, attempt,
    stage, lease, waits, done, kind, error; free text is cut to one line
    with … before its column is left out. Never: id and state.
    """
    infos = [scheduling(rec, states, now) for rec in recs]
    waits = [one_line(_waits(rec, info)) for rec, info in zip(recs, infos, strict=True)]
    cols = [
        _Column("id", [rec.id for rec in recs], None),
        _Column("kind", [rec.kind for rec in recs], 10, shrink=True),
        _Column("state", [rec.state for rec in recs], None, styles=[_STATE_STYLE.get(rec.state, "") for rec in recs]),
        _Column(
            "done",
            [_progress_text(rec) for rec in recs],
            9,
            bars=[(rec.progress.done, rec.progress.total) for rec in recs],
        ),
        _Column("owner", [rec.lease.owner or "-" for rec in recs], 4, shrink=True),
        _Column("lease", [_lease(rec, now, rec.id in long_leases) for rec in recs], 7),
    ]
    if any(rec.want != "run" for rec in recs):
        cols.append(_Column("intent", [rec.want if rec.want != "run" else "" for rec in recs], 1))
    if any(rec.lease.recall is not None for rec in recs):
        recalls = []
        for rec in recs:
            recall = rec.lease.recall
            recalls.append("" if recall is None else one_line(f"{recall.reason} (until {relative(recall.until, now)})"))
        cols.append(_Column("recall", recalls, 2, shrink=True))
    if any(info["attempt"] > 1 for info in infos):
        cols.append(_Column("attempt", [str(info["attempt"]) for info in infos], 5))
    if any(waits):
        cols.append(_Column("waits", waits, 8, shrink=True))
    if any(info["pipeline"] for info in infos):
        stages = [
            f"{info['pipeline']}/{info['stage'] or rec.kind}" if info["pipeline"] else ""
            for rec, info in zip(recs, infos, strict=True)
        ]
        cols.append(_Column("stage", stages, 6, shrink=True))
    if any(rec.error for rec in recs):
        cols.append(_Column("error", [one_line(rec.error) for rec in recs], 11, shrink=True))
    cols.append(_Column("updated", [relative(rec.updated_at, now) for rec in recs], 3))
    return cols


def jobs_table(
    records: Iterable[Record],
    now: datetime,
    states: Mapping[str, str] | None = None,
    width: int = 200,
    long_leases: Collection[str] = (),
) -> Table:
    """The people's view of a list of jobs, in the order given, fitted to ``width`` columns.

    A lease in ``long_leases`` (further ahead than max_ttl) says so in its cell.
    """
    recs = list(records)
    table = _fitted_table(_job_columns(recs, now, states, long_leases), len(recs), width)
    if not recs:
        table.caption = "no jobs"
    return table


def print_jobs(
    screen: Screen,
    records: Iterable[Record],
    now: datetime,
    states: Mapping[str, str] | None,
    long_leases: Collection[str] = (),
) -> None:
    console = screen.console()
    console.print(jobs_table(records, now, states, console.width, long_leases))


#: The most of a result ``show`` prints on a terminal; ``jobctl result`` prints it whole.
RESULT_SHOWN = 400


def result_text(rec: Record, limit: int = RESULT_SHOWN) -> str | None:
    """The result compact (spelling kept), cut to ``limit`` characters with its size and where the rest is."""
    text = rec.opaque_text("x:" + RESULT)
    if text is None or len(text) <= limit:
        return text
    size = len(text.encode("utf-8"))
    return f"{text[:limit]}… ({size} bytes; jobctl result {rec.id} prints it whole)"


def print_job(
    screen: Screen, rec: Record, now: datetime, states: Mapping[str, str] | None, long_lease: bool = False
) -> None:
    """``show`` on a terminal: the fields that matter, in words, then the spec, checkpoint and result.

    Every value is drawn as text (:func:`_text`): what a record holds is never read as markup.
    """
    from rich.table import Table

    info = scheduling(rec, states, now)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()

    def row(name: str, value: str | RenderableType) -> None:
        grid.add_row(name, _text(value) if isinstance(value, str) else value)

    row("id", rec.id)
    row("kind", rec.kind)
    if info["submitted_by"]:
        row("submitted by", info["submitted_by"])
    row("state", _state(rec))
    row("progress", _bar(rec))
    lease = rec.lease
    if lease.owner and rec.terminal:
        row("owner", f"{lease.owner} (epoch {lease.epoch}, ended)")
    elif lease.owner:
        row("owner", f"{lease.owner} (epoch {lease.epoch}, {_lease(rec, now, long_lease)})")
    else:
        row("owner", f"nobody (epoch {lease.epoch})")
    if rec.intent is not None:
        row("intent", f"{rec.want} by {rec.intent.by or '?'} {relative(rec.intent.at, now)}")
    if lease.recall is not None:
        row("recall", f"{lease.recall.reason} until {relative(lease.recall.until, now)}")
    if info["attempt"] > 1 or "jobctl.run/retry@1" in rec.extensions:
        row("attempt", str(info["attempt"]))
    if info["not_before"]:
        row("not before", info["not_before"])
    if info["after"]:
        row("after", ", ".join(info["after"]))
    if info["pipeline"]:
        row("pipeline", f"{info['pipeline']} / {info['stage'] or rec.kind}")
    if info.get("blocked"):
        row("waiting", info["blocked"]["detail"])
    if rec.error:
        row("error", rec.error)
    if rec.requires:
        row("requires", ", ".join(rec.requires))
    row("spec", rec.opaque_text("spec") or "")
    row("checkpoint", checkpoint_word(rec))
    shown = result_text(rec)
    if shown is not None:
        row("result", _text(shown, overflow="fold"))  # folded, not cut at the edge
    row("created", f"{format_time(rec.created_at)} ({relative(rec.created_at, now)})")
    row("updated", f"{format_time(rec.updated_at)} ({relative(rec.updated_at, now)})")
    screen.console().print(grid)


def print_pairs(screen: Screen, pairs: Iterable[tuple[str, str]]) -> None:
    """Key/value facts (``paths``) as a two-column table; a value (a path) is drawn as text, never as markup."""
    from rich.table import Table

    table = Table(show_header=False, header_style="bold")
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in pairs:
        style = "red" if value.startswith("FAILED") else ""
        table.add_row(_text(key), _text(value), style=style)
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


#: Lines a watch table takes besides its rows: title, header, header rule, caption, and the
#: line the cursor rests on below a live view.
WATCH_FRAME = 5


def watch_table(records: Iterable[Record], now: datetime, title: str, width: int = 200, height: int = 0) -> Table:
    """The live view of ``watch``: running jobs first, then pending, then the most recently ended.

    When there are more rows than ``height`` lines hold, the rows at the end
    (ended jobs first, then pending ones) are left out and the caption says
    how many; ``height`` 0 means no limit.
    """
    ordered = view_order(records)
    # Ended jobs most recently changed first: what just finished is what a watcher wants to see.
    ended = sorted((r for r in ordered if r.terminal), key=lambda r: r.updated_at or ZERO_TIME, reverse=True)
    recs = [r for r in ordered if not r.terminal] + ended
    shown = recs
    if height and len(recs) > max(1, height - WATCH_FRAME):
        shown = recs[: max(1, height - WATCH_FRAME)]
    table = _fitted_table(_job_columns(shown, now, None), len(shown), width, title=title, title_justify="left")
    hidden = recs[len(shown) :]
    if hidden:
        gone = sum(1 for rec in hidden if rec.terminal)
        parts = [f"{len(hidden) - gone} active"] if len(hidden) > gone else []
        parts += [f"{gone} ended"] if gone else []
        table.caption = f"{len(hidden)} more rows hidden ({', '.join(parts)})"
    elif not recs:
        table.caption = "no jobs yet"
    return table


def wait_table(records: Iterable[tuple[str, Record | None]], now: datetime, goal: str, width: int = 200) -> Table:
    """The view of ``wait``: one progress bar a job, and whether it has settled."""
    pairs = list(records)
    cols = [
        _Column("id", [job_id for job_id, _ in pairs], None),
        _Column(
            "state",
            ["missing" if rec is None else rec.state for _, rec in pairs],
            None,
            styles=["red" if rec is None else _STATE_STYLE.get(rec.state, "") for _, rec in pairs],
        ),
        _Column(
            "done",
            ["" if rec is None else _progress_text(rec) for _, rec in pairs],
            3,
            bars=[(0, 0) if rec is None else (rec.progress.done, rec.progress.total) for _, rec in pairs],
        ),
        _Column("owner", ["" if rec is None else rec.lease.owner or "-" for _, rec in pairs], 1, shrink=True),
        _Column("lease", ["" if rec is None else _lease(rec, now) for _, rec in pairs], 2),
    ]
    return _fitted_table(cols, len(pairs), width, title=f"waiting for {goal}", title_justify="left")
