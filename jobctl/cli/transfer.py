"""Moving records between stores: ``export`` and ``import``, as JSON Lines.

Each line is ``{"id": ID, "record": TEXT}`` where TEXT is the record's stored
bytes exactly (canonical UTF-8 JSON, newlines and all), so a directory
exported, imported into PostgreSQL, exported again and imported into a new
directory gives byte-identical record files.
"""

from __future__ import annotations

import json
import sys
from typing import IO

import click

from ..errors import Invalid, JobError
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

    \b
    Example:
      jobctl --store ~/.abstraction export > jobs.jsonl
    """
    store = state.store()
    out = sys.stdout
    for job_id in store.ids():
        try:
            data = store.load_bytes(job_id)
        except JobError as exc:
            if exc.verdict == "not_found":
                continue  # removed since the ids were read
            raise
        # ASCII with \u escapes: any stdout encoding carries it, and it decodes to the same text.
        line = json.dumps({"id": job_id, "record": data.decode("utf-8")})
        out.write(line + "\n")
    out.flush()


@click.command("import", cls=JobCommand, short_help="Add records from `jobctl export` lines to this store.")
@click.argument("source", metavar="[FILE]", type=click.File("r", encoding="utf-8"), default="-")
@common
@pass_state
def import_(state: State, source: IO[str]) -> None:
    """Add every record in FILE (default stdin), as `jobctl export` wrote them, byte for byte.

    Each record is checked as any reader checks one; one that cannot be read,
    or whose id the store already has, is named on stderr and left out, and
    the command exits with the first such refusal's code. The rest are added.
    Prints `imported=N refused=M`.

    \b
    Example:
      jobctl --store ~/.abstraction export | jobctl --store postgresql:///jobs import
    """
    store = state.store(create=True)  # it adds jobs, as submit does: a new directory becomes a store
    imported = 0
    refusals: list[JobError] = []
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise Invalid(f"line {number} is not JSON ({exc})") from None
            if not isinstance(item, dict) or not isinstance(item.get("record"), str):
                raise Invalid(f"line {number} has no record text")
            data = item["record"].encode("utf-8")
            job_id = store.import_bytes(data)
            if item.get("id") not in (None, job_id):
                raise Invalid(f"line {number} names id {item.get('id')!r} but its record is {job_id}")
            imported += 1
        except JobError as exc:
            if exc.job_id and f"line {number}" not in exc.message:
                exc.message = f"line {number}: {exc.message}"
            refusals.append(exc)
            click.echo(refusal_line(exc), err=True)
    if state.json:
        render.out_json({"imported": imported, "refused": len(refusals)})
    else:
        render.out(f"imported={imported} refused={len(refusals)}")
    if refusals:
        raise click.exceptions.Exit(refusals[0].exit_code)
