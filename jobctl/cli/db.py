"""A database store's schema: ``db init``, ``db migrate``.

The store is the one ``--store``/``$JOB_STORE``/the config file names, as for
every command; it must be a ``postgresql://`` or ``postgres://`` URL.
"""

from __future__ import annotations

import click

from .. import discovery
from ..errors import Invalid
from ..store.location import is_database_url
from . import render
from .main import JobCommand, State, common, pass_state

__all__ = ["db"]


def _url(state: State) -> str:
    root, rung = discovery.resolve(state.store_flag, state.env, warn=lambda line: click.echo(line, err=True))
    if not is_database_url(root):
        raise Invalid(f"{root} (from {rung}) is a directory; db commands take a postgresql:// store URL")
    return root


def _report(state: State, before: int, after: int) -> None:
    if state.json:
        render.out_json({"schema_version": after, "was": before})
    else:
        render.out(f"schema_version={after} was={before}")


class DbGroup(click.Group, JobCommand):
    """A group that takes upstream's flag spellings like every other command."""


@click.group(cls=DbGroup, short_help="Create or move forward a database store's schema.")
def db() -> None:
    """Create (init) or move forward (migrate) the schema of a PostgreSQL store.

    \b
    Examples:
      jobctl --store postgresql://jobs@db.example/jobs db init
      JOB_STORE=postgresql:///jobs jobctl db migrate
    """


@db.command("init", cls=JobCommand, short_help="Create the jobctl schema in an empty database.")
@common
@pass_state
def init(state: State) -> None:
    """Create the jobctl schema in the store's database; print `schema_version=N was=M`.

    `was=0` says it was created now. A database already at this jobctl's
    version is left as it is but for the table of workers' announcements,
    added when it lacks it; an older one is refused (run `jobctl db
    migrate`), and so is a newer one.

    \b
    Example:
      jobctl --store postgresql://jobs@db.example/jobs db init
    """
    from ..store import postgres

    _report(state, *postgres.init(_url(state)))


@db.command("migrate", cls=JobCommand, short_help="Move an older jobctl schema forward to this version.")
@common
@pass_state
def migrate(state: State) -> None:
    """Move the store's schema forward to this jobctl's version, in one transaction.

    Prints `schema_version=N was=M`. A database never initialised is refused
    (run `jobctl db init`); a newer schema than this jobctl knows is refused.
    A store at this version already gets the table of workers' announcements
    when it lacks it (the version stays).

    \b
    Example:
      JOB_STORE=postgresql:///jobs jobctl db migrate
    """
    from ..store import postgres

    _report(state, *postgres.migrate(_url(state)))
