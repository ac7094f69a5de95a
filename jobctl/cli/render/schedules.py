"""How schedules are drawn: a plain line each (piped), a JSON object each (``--json``), a table (terminal).

Piped, one line a schedule, its fields separated by tabs (a name holds no
tab): the name, how it recurs (``every 15m``, ``cron 0 3 * * *``), the next
slot, the latest slot fired (``-`` before the first) and the job's kind,
times in RFC 3339 UTC. rich is imported only where a table is drawn.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ...record import format_time
from ...recurring import Schedule
from ...wire import Raw
from .screen import Screen

__all__ = ["schedule_line", "schedule_json", "print_schedules"]


def _time(when: datetime | None) -> str:
    return "-" if when is None else format_time(when)


def schedule_line(sched: Schedule, now: datetime) -> str:
    """``NAME<TAB>WHEN<TAB>NEXT<TAB>FIRED<TAB>KIND``."""
    return "\t".join((sched.name, sched.when, _time(sched.next(now)), _time(sched.fired), sched.kind))


def schedule_json(sched: Schedule, now: datetime) -> dict[str, Any]:
    """The schedule as ``schedule list --json`` prints it: its stored keys (spec as JSON), and ``next``."""
    out = sched.to_json()
    out["spec"] = Raw(sched.spec)
    out["next"] = None if (after := sched.next(now)) is None else format_time(after)
    out["when"] = sched.when
    return out


def print_schedules(screen: Screen, schedules: Iterable[Schedule], now: datetime) -> None:
    """The people's view: one row a schedule, the next slot and the latest fired with how far they are from now."""
    from rich.table import Table
    from rich.text import Text

    from .terminal import relative

    table = Table(header_style="bold")
    for column in ("NAME", "WHEN (UTC)", "NEXT", "FIRED", "KIND"):
        table.add_column(column, no_wrap=column != "NAME")
    count = 0
    for sched in schedules:
        after = sched.next(now)
        nxt = "-" if after is None else f"{format_time(after)[:19]}Z ({relative(after, now)})"
        fired = "-" if sched.fired is None else f"{format_time(sched.fired)[:19]}Z ({relative(sched.fired, now)})"
        table.add_row(Text(sched.name), Text(sched.when), nxt, fired, Text(sched.kind))
        count += 1
    if not count:
        table.caption = "no schedules"
    screen.console().print(table)
