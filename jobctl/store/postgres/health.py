"""What ``jobctl paths`` and ``jobctl doctor`` report about a database store.

Who and where (server, database, user, schema, schema version; never a
password), then the checks that apply to a database: the connection, the
store (its schema is there, at this jobctl's version), the role's privileges
on each of the store's tables (:data:`NEEDS`), whether its sessions may
write at all (a role, database or server that makes them read-only fails
every write), whether the role could alter or drop the tables (a warning:
an administrator's role may, a worker's should not), and the clock offset
between this host and the server (a warning past :data:`CLOCK_WARN`).

Each check is ``ok``, ``FAILED: why`` (the store is unfit: ``doctor`` exits
1) or ``WARNING: why`` (fit, but worth a look). SQL is in
``health.sql``.
"""

from __future__ import annotations

import os
import re
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

#: What a worker's role does with each table (the statements of ``queries.sql``,
#: ``schedule-queries.sql``), and, for a table ``db init``/``db migrate`` add to
#: a store of any version (``CREATE TABLE IF NOT EXISTS``), what a store
#: without it lacks; None for a table every store has. ``jobctl gc`` deletes
#: finished records too, but a worker never does: that is left to the
#: administrator's role.
NEEDS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("jobctl_schema", ("SELECT",), None),
    ("jobctl_jobs", ("SELECT", "INSERT", "UPDATE"), None),
    ("jobctl_workers", ("SELECT", "INSERT", "UPDATE", "DELETE"), "workers announce nothing"),
    ("jobctl_exclusive", ("SELECT", "INSERT", "UPDATE"), "a job with an exclusive key is claimed by nobody"),
    ("jobctl_schedules", ("SELECT", "INSERT", "UPDATE", "DELETE"), "the store keeps no schedule"),
)
_KINDS = ("SELECT", "INSERT", "UPDATE", "DELETE")  # the columns of the query table_privileges, in its order

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
            tables = conn.execute(Q["table_privileges"], {"tables": [name for name, *_ in NEEDS]}).fetchall()
            owner = conn.execute(Q["owner"]).fetchone()
            read_only = conn.execute(Q["read_only"]).fetchone()
            assert owner is not None and read_only is not None
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

    checks = [
        ("check_privileges", _privileges(str(user), tables)),
        ("check_writable", _writable(str(user), str(database), read_only)),
        ("check_owner", _owner(str(user), owner)),
    ]
    healthy = healthy and not any(verdict.startswith("FAILED") for _, verdict in checks)
    facts += checks
    facts += [("clock_offset", f"{offset:+.3f}s"), ("check_clock", clock_check(offset))]
    return facts, healthy


def _privileges(user: str, rows: list[tuple[object, ...]]) -> str:
    """``ok``; FAILED naming each privilege of :data:`NEEDS` the role lacks; or a warning naming the optional
    tables the store has not got (what it lacks without them, and how to add them)."""
    seen = {str(name): (bool(visible), dict(zip(_KINDS, has, strict=True))) for name, visible, *has in rows}
    if not all(seen[name][0] for name, _, optional in NEEDS if optional is None):
        return (
            f"FAILED: role {user} sees no jobctl_jobs and jobctl_schema tables "
            "(no store here, or no USAGE on their schema); " + GRANTS
        )
    lacking: list[str] = []
    absent: list[tuple[str, str]] = []
    for name, wants, optional in NEEDS:
        visible, has = seen[name]
        if not visible:
            absent.append((name, optional or ""))
            continue
        missed = [what for what in wants if not has[what]]
        if missed:
            lacking.append(f"{', '.join(missed)} on {name}")
    missing = _absent(absent)
    if lacking:
        return f"FAILED: role {user} lacks {' and '.join(lacking)}; {GRANTS}" + (f"; {missing}" if missing else "")
    return f"WARNING: {missing}" if missing else "ok"


def _absent(absent: list[tuple[str, str]]) -> str:
    """What the store lacks without the optional tables ``absent`` (name, what it lacks), and the way to add them."""
    if not absent:
        return ""
    names = ", ".join(name for name, _ in absent)
    without = "; ".join(why for _, why in absent)
    if len(absent) == 1:
        return f"the store has no table {names} ({without}): add it with {_MIGRATE}"
    return f"the store has no tables {names} ({without}): add them with {_MIGRATE}"


_MIGRATE = "jobctl db migrate (the schema version stays)"


def _writable(user: str, database: str, row: tuple[object, ...]) -> str:
    """``ok``, or FAILED when this role's transactions are read-only here, naming what makes them so and the way out."""
    now, default, source, standby = row
    if standby:
        return (
            "FAILED: the server is a standby (in recovery) and refuses every write; "
            "point the URL at the primary (or add target_session_attrs=read-write to it)"
        )
    if default != "on":
        if now != "on":
            return "ok"
        return "FAILED: this session's transactions are read-only (transaction_read_only=on); every write is refused"
    role, db = _ident(user), _ident(database)
    ways = {
        "user": f"set for role {user}: an administrator undoes it with ALTER ROLE {role} RESET {_RO}",
        "database": f"set for database {database}: an administrator undoes it with ALTER DATABASE {db} RESET {_RO}",
        "database user": f"set for role {user} in database {database}: an administrator undoes it with "
        f"ALTER ROLE {role} IN DATABASE {db} RESET {_RO}",
        "client": "asked for by the connection (the URL's options, or PGOPTIONS): leave it out",
    }
    way = ways.get(str(source), f"set by the server's {source}: an administrator turns it off there")
    return f"FAILED: role {user}'s transactions are read-only ({_RO}=on, {way}); every write is refused"


_RO = "default_transaction_read_only"


def _ident(name: str) -> str:
    """``name`` as SQL names it: as it is when it needs no quotes, else in double quotes."""
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _owner(user: str, row: tuple[object, ...]) -> str:
    schema, owns_table, owns_schema, superuser = row
    if superuser:
        why = f"role {user} is a superuser"
    elif owns_table:
        why = f"role {user} owns the store's tables"
    elif owns_schema:
        why = f"role {user} owns schema {schema}, which holds the store's tables"
    else:
        return "ok"
    return f"WARNING: {why}: it may alter or drop the store; run workers as a role with only the {GRANTS_PAGE}"
