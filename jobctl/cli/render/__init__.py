"""How results are drawn: plain lines, versioned JSON, and rich views for a terminal.

Three forms, one decision (:class:`Screen`):

* piped: the stable plain lines of upstream's jobctl (DIGEST §8.1), byte for
  byte, and never a colour or a box-drawing character;
* ``--json``: one JSON object a result, JSON Lines for lists and streams, each
  object carrying ``"v": 1`` (see docs/reference/json.md);
* on a terminal: rich tables, colour and relative times.

This is the only module of jobctl that imports rich, and it does so inside
the functions that draw for a terminal, so a piped command never pays for it.

The package: :mod:`~jobctl.cli.render.screen` (the decision, and data lines
on stdout), :mod:`~jobctl.cli.render.piped` (plain lines and JSON) and
:mod:`~jobctl.cli.render.terminal` (rich views); every name is here, the
last two's loaded when one is first asked for (a piped ``submit`` prints its
id and needs neither). Below them all, :mod:`jobctl.cli.output` writes to
stdout; nothing here imports a command module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .screen import (
    JSON_VERSION,
    Lines,
    Screen,
    json_line,
    out,
    out_json,
)

if TYPE_CHECKING:  # loaded on first use (__getattr__): a piped command never reads the terminal's views,
    # and a submit prints its id with no plain line or JSON of a record
    from .piped import (
        by_creation,
        cancel_line,
        checkpoint_word,
        claim_line,
        env_line,
        intent_line,
        job_json,
        list_line,
        live_lease,
        next_line,
        orphan_line,
        progress_line,
        recall_line,
        renew_line,
        scheduling,
        state_line,
        summary_line,
        summary_lines,
        unreadable_line,
        view_order,
        view_rank,
        watch_line,
        word,
    )
    from .terminal import (
        BAR,
        RESULT_SHOWN,
        SHRUNK,
        WATCH_FRAME,
        LiveTable,
        jobs_table,
        one_line,
        print_job,
        print_jobs,
        print_pairs,
        relative,
        result_text,
        wait_table,
        watch_table,
    )

#: The names :mod:`.piped` holds: imported when one is first asked for (``submit`` needs none of them).
_PIPED = frozenset(
    {
        "by_creation",
        "cancel_line",
        "checkpoint_word",
        "claim_line",
        "env_line",
        "intent_line",
        "job_json",
        "list_line",
        "live_lease",
        "next_line",
        "orphan_line",
        "progress_line",
        "recall_line",
        "renew_line",
        "scheduling",
        "state_line",
        "summary_line",
        "summary_lines",
        "unreadable_line",
        "view_order",
        "view_rank",
        "watch_line",
        "word",
    }
)

#: The names :mod:`.terminal` holds: imported when one is first asked for, not by every command's start.
_TERMINAL = frozenset(
    {
        "BAR",
        "RESULT_SHOWN",
        "SHRUNK",
        "WATCH_FRAME",
        "LiveTable",
        "jobs_table",
        "one_line",
        "print_job",
        "print_jobs",
        "print_pairs",
        "relative",
        "result_text",
        "wait_table",
        "watch_table",
    }
)

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
    "Lines",
    "summary_line",
    "summary_lines",
    "scheduling",
    "live_lease",
    "relative",
    "view_rank",
    "by_creation",
    "view_order",
    "one_line",
    "SHRUNK",
    "BAR",
    "jobs_table",
    "print_jobs",
    "RESULT_SHOWN",
    "result_text",
    "print_job",
    "print_pairs",
    "LiveTable",
    "WATCH_FRAME",
    "watch_table",
    "wait_table",
]


def __getattr__(name: str) -> Any:
    if name in _PIPED:
        from . import piped as module
    elif name in _TERMINAL:
        from . import terminal as module  # type: ignore[no-redef]  # the other of the two
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value  # once: the next lookup is a plain attribute
    return value
