"""Moving records between stores: ``export`` and ``import``, as JSON Lines.

Each line is ``{"id": ID, "record": TEXT}`` where TEXT is the record's stored
bytes exactly (canonical UTF-8 JSON, newlines and all), so a directory
exported, imported into PostgreSQL, exported again and imported into a new
directory gives byte-identical record files.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

import click

from .. import wire
from ..errors import EXIT_FAILURE, Invalid, JobError
from . import render
from .main import JobCommand, State, common, pass_state, refusal_line

__all__ = ["export", "import_"]


@click.command(cls=JobCommand, short_help="Write every record as JSON Lines of its exact bytes.")
@common
@pass_state
def export(state: State) -> None:
    """Write every record of the store to stdout, one JSON line each, in id order.

    A line is `{"id": ID, "record": TEXT}`, TEXT being the record's stored
    bytes exactly. `jobctl import` reads it into a store of either kind.
    Records that cannot be read (not UTF-8, not a regular file) are named
    on stderr after the rest, as `list` names them, and the exit is 1.

    \b
    Example:
      jobctl --store ~/.abstraction export > jobs.jsonl
    """
    store = state.store()
    lines = render.Lines()
    unreadable: list[tuple[str, JobError]] = []
    for job_id in store.ids():
        try:
            data = store.load_bytes(job_id)
            try:
                text = wire.utf8_text(data, "record")
            except Invalid as exc:  # a JSON line cannot carry it byte for byte
                exc.job_id = job_id
                raise
        except JobError as exc:
            if exc.verdict == "not_found":
                continue  # removed since the ids were read
            unreadable.append((job_id, exc))  # named after the rest, as a listing names them
            continue
        # ASCII with \u escapes: any stdout encoding carries it, and it decodes to the same text.
        lines.out(json.dumps({"id": job_id, "record": text}))
    lines.flush()
    if unreadable:
        click.echo(render.unreadable_line(unreadable), err=True)
        raise click.exceptions.Exit(EXIT_FAILURE)


class _Source(click.File):
    """``[FILE]`` of ``import``, read as bytes (each line is decoded alone); stdin closed is refused."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "-" and getattr(sys.stdin, "buffer", None) is None:
            self.fail("stdin is closed, there is nothing to read: name the FILE, or run it with stdin open", param, ctx)
        return super().convert(value, param, ctx)


@click.command("import", cls=JobCommand, short_help="Add records from `jobctl export` lines to this store.")
@click.argument("source", metavar="[FILE]", type=_Source("rb"), default="-")
@common
@pass_state
def import_(state: State, source: IO[bytes]) -> None:
    """Add every record in FILE (default stdin), as `jobctl export` wrote them, byte for byte.

    Each record is checked as any reader checks one; a line that is not
    UTF-8 or not such a line, a record that cannot be read, one whose id is
    not the line's, or one whose id the store already has, is named on
    stderr with its line number and left out (nothing of it is written),
    and the command exits with the first such refusal's code. The rest are
    added. Prints `imported=N refused=M`.

    \b
    Example:
      jobctl --store ~/.abstraction export | jobctl --store postgresql:///jobs import
    """
    store = state.store(create=True)  # it adds jobs, as submit does: a new directory becomes a store
    imported = 0
    refusals: list[JobError] = []
    for number, raw in enumerate(source, start=1):
        try:
            line = wire.utf8_text(raw, f"line {number}")
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
                raise Invalid(f"line {number} is not JSON ({exc})") from None
            if not isinstance(item, dict) or not isinstance(item.get("record"), str):
                raise Invalid(f"line {number} has no record text")
            # The store reads the record before it writes anything: a line whose id is not its
            # record's is refused whole.
            store.import_bytes(item["record"].encode("utf-8"), item.get("id"), f"line {number}")
            imported += 1
        except UnicodeEncodeError:  # a lone surrogate (\udcff) in the record text: it is not UTF-8 either
            refusals.append(Invalid(f"line {number}: the record text is not UTF-8"))
            click.echo(refusal_line(refusals[-1], "import"), err=True)
        except JobError as exc:
            if not exc.message.startswith((f"line {number} ", f"line {number}:")):  # not "line 12" of the record
                exc.message = f"line {number}: {exc.message}"
            refusals.append(exc)
            click.echo(refusal_line(exc, "import"), err=True)
    if state.json:
        render.out_json({"imported": imported, "refused": len(refusals)})
    else:
        render.out(f"imported={imported} refused={len(refusals)}")
    if refusals:
        raise click.exceptions.Exit(refusals[0].exit_code)
