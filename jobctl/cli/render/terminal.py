"""The terminal views: rich tables, colour and relative times; rich is imported here only, where it draws."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...limits import duration_text
from ...record import RESULT, ZERO_TIME, Record, format_time, held, is_zero

if TYPE_CHECKING:  # pragma: no cover - typing only; rich is imported where it draws
    from rich.console import OverflowMethod, RenderableType
    from rich.table import Table
    from rich.text import Text


from .piped import checkpoint_word, scheduling, view_order, word
from .screen import Screen

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
    if info["exclusive"]:
        row("exclusive", info["exclusive"])
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
    found = rec.opaque_text("x:jobctl.run/priority@1")
    if info["priority"] or found is not None:
        odd = found is not None and found != str(info["priority"])
        row(
            "priority",
            f"{info['priority']} (the record holds {found}: not a priority)" if odd else str(info["priority"]),
        )
    if info["timeout"] is not None:
        row("timeout", f"{duration_text(info['timeout'])} an attempt")
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
