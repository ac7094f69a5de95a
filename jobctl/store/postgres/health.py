"""What ``jobctl paths`` and ``jobctl doctor`` report about a database store.

Who and where (server, database, user, schema, schema version; never a
password), then the checks that apply to a database: the connection, the
store (its schema is there, at this jobctl's version), the role's privileges
on the store's tables, whether the role could alter or drop them (a warning:
an administrator's role may, a worker's should not), and the clock offset
between this host and the server (a warning past :data:`CLOCK_WARN`).

Each check is ``ok``, ``FAILED: why`` (the store is unfit: ``doctor`` exits
1) or ``WARNING: why`` (fit, but worth a look). SQL is in
``health.sql``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone

from ...errors import JobError, Refused
from ..url import masked
from .schema import SQL_DIR, queries
from .session import connect, first_line
from .store import PostgresStore

__all__ = ["CLOCK_WARN", "examine", "clock_check"]

#: Seconds this host's clock may be off the server's before ``check_clock`` warns.
CLOCK_WARN = 1.0

Q = queries(os.path.join(SQL_DIR, "health.sql"))
#: Where the privileges a worker needs are shown.
GRANTS_PAGE = "grants of docs/howto/hosts.md"
GRANTS = "the grants a worker needs are in docs/howto/hosts.md"

Fact = tuple[str, str]


def _host_now() -> datetime:
    return datetime.now(timezone.utc)


def clock_check(offset: float, limit: float = CLOCK_WARN) -> str:
    """``ok``, or a warning naming how far, and which way, this host's clock is off the server's."""
    if abs(offset) <= limit:
        return "ok"
    way = "behind" if offset > 0 else "ahead of"
    return (
        f"WARNING: this host's clock is {abs(offset):.1f} s {way} the server's (more than {limit:g} s): "
        "leases are judged by the server's clock, but times shown here are off; set up NTP on this host"
    )


def examine(url: str, host_now: Callable[[], datetime] | None = None) -> tuple[list[Fact], bool]:
    """The facts and checks of the database store at ``url``, and whether it is fit to use."""
    import psycopg  # present: importing this package refused without it

    host_now = host_now or _host_now
    try:
        conn = connect(url)
    except Refused as exc:
        return [("check_connect", f"FAILED: {exc.message}; {exc.hint}")], False
    facts: list[Fact] = []
    healthy = True
    with conn:
        try:
            before = host_now()
            row = conn.execute(Q["who"]).fetchone()
            after = host_now()
            assert row is not None
            user, database, schema, version, server_now = row
            facts += [
                # a host name, an address, or the directory of a Unix socket
                ("server", f"{conn.info.host}:{conn.info.port} (PostgreSQL {version})"),
                ("database", str(database)),
                ("user", str(user)),
                ("schema", str(schema) if schema is not None else "(none: search_path names no schema that exists)"),
            ]
            offset = (server_now - (before + (after - before) / 2)).total_seconds()
            privileges = conn.execute(Q["privileges"]).fetchone()
            assert privileges is not None
        except psycopg.Error as exc:
            return [*facts, ("check_connect", f"FAILED: {masked(url)}: {first_line(exc)}")], False
    facts.append(("check_connect", "ok"))

    try:
        with PostgresStore(url) as store:
            facts += [("schema_version", str(store.schema_version)), ("work", store.work_dir)]
        facts.append(("check_open", "ok"))
    except JobError as exc:
        hint = f"; {exc.hint}" if exc.hint else ""
        facts.append(("check_open", f"FAILED: {exc.message}{hint}"))
        healthy = False

    verdict = _privileges(str(user), privileges)
    healthy = healthy and not verdict.startswith("FAILED")
    facts += [("check_privileges", verdict), ("check_owner", _owner(str(user), privileges))]
    facts += [("clock_offset", f"{offset:+.3f}s"), ("check_clock", clock_check(offset))]
    return facts, healthy


def _privileges(user: str, row: tuple[object, ...]) -> str:
    select, insert, update, version, *_ = row
    if select is None or version is None:
        return (
            f"FAILED: role {user} sees no jobctl_jobs and jobctl_schema tables "
            "(no store here, or no USAGE on their schema); " + GRANTS
        )
    wants = (("SELECT", select), ("INSERT", insert), ("UPDATE", update))
    lacking = [f"{what} on jobctl_jobs" for what, has in wants if not has]
    if not version:
        lacking.append("SELECT on jobctl_schema")
    if not lacking:
        return "ok"
    return f"FAILED: role {user} lacks {', '.join(lacking)}; {GRANTS}"


def _owner(user: str, row: tuple[object, ...]) -> str:
    schema, owns_table, owns_schema, superuser = row[4:]
    if superuser:
        why = f"role {user} is a superuser"
    elif owns_table:
        why = f"role {user} owns the store's tables"
    elif owns_schema:
        why = f"role {user} owns schema {schema}, which holds the store's tables"
    else:
        return "ok"
    return f"WARNING: {why}: it may alter or drop the store; run workers as a role with only the {GRANTS_PAGE}"
