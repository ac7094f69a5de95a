"""A store's schema in its database: which version it holds, ``db init`` and ``db migrate``.

``schema-1.sql`` creates version 1; ``migrate-<n>.sql`` moves version n-1
to n. Version 3 (the columns are the record) also moves every row's bytes
into their columns, decoding them in Python as every reader decodes them
(:func:`_fill_3`), between ``migrate-3.sql`` and ``migrate-3-finish.sql``.
Version 4 (the pick's priority) adds the ``priority`` column and orders the
open index by it; :func:`_fill_4` sets it on the rows that carry one.
Version 5: jobctl's updates raise the revision, keep ``unfinished`` and send
their notices themselves; the trigger runs on inserts, deletes and the
updates that do not raise the revision (another writer's).
A database is initialised by the same steps a migration runs, from nothing,
in one transaction; so is every migration.

``workers.sql`` (the table of workers' announcements), ``exclusive.sql``
(the holders of exclusive keys) and ``schedules.sql`` (the table of
recurring schedules) are no version of their own: each only adds a table,
so ``init`` and ``migrate`` run them on a store of any version, and a store
made before them is not refused for lacking them. So is ``keyed.sql`` (an
index of the open jobs with a key), run on a store of version 4 or later.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ...errors import JobError, Refused
from ...record import decode, prepare
from ..url import masked
from . import row
from .session import connect, psycopg, refusing

__all__ = ["SCHEMA_VERSION", "SQL_DIR", "queries", "Q", "schema_status", "init", "migrate", "UNDECODABLE"]

#: The schema version this jobctl writes and reads (2: change notices; 3: the columns are the record;
#: 4: jobs picked by priority; 5: jobctl's updates raise the revision and send their notices themselves).
SCHEMA_VERSION = 5
SQL_DIR = os.path.dirname(os.path.abspath(__file__))

#: The critical model a row holds when no reader can decode the bytes at it:
#: nobody understands it, so every step refuses the row, and readers are
#: handed the bytes, which they refuse in their own words.
UNDECODABLE = "jobctl.store/undecodable@1"

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def queries(path: str | None = None) -> dict[str, str]:
    """The named queries of ``queries.sql``: each ``-- name: x`` line starts query ``x``."""
    with open(path or os.path.join(SQL_DIR, "queries.sql"), encoding="utf-8") as fh:
        text = fh.read()
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


Q = queries()

Step = Callable[[psycopg.Connection[Any]], None]


#: What ``jobctl_schema.version`` holds, as text: a whole number (``db init`` writes one row of it).
_VERSION = re.compile(r"[0-9]{1,9}")
_VERSION_HINT = "restore its one row, the version the tables are at (from a backup), then run the command again"


def schema_status(conn: psycopg.Connection[Any], url: str = "") -> int:
    """The schema version the database holds; 0 when jobctl was never initialised there.

    A ``jobctl_schema`` table that holds no row, more than one, or a value
    that is not a whole number is refused (``Refused`` naming ``url``): its
    version is unknown, and neither a reader nor ``db init``/``db migrate``
    may guess it.
    """
    got = conn.execute(Q["schema_exists"]).fetchone()
    if got is None or not got[0]:
        return 0
    rows = conn.execute(Q["schema_version"]).fetchall()
    where = masked(url) if url else "the database"
    if len(rows) != 1:
        many = "no row" if not rows else "more than one row"
        err = Refused(f"{where}: table jobctl_schema holds {many}, not the one that names the schema version")
        err.hint = _VERSION_HINT
        raise err
    text = rows[0][0]
    if text is None or not _VERSION.fullmatch(text):
        err = Refused(f"{where}: table jobctl_schema holds version {text!r}, not a whole number")
        err.hint = _VERSION_HINT
        raise err
    return int(text)


def _script(path: str) -> Step:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()

    def run(conn: psycopg.Connection[Any]) -> None:
        conn.execute(text.encode())  # a script of our own: DDL only, no parameters

    return run


def _steps(sql_dir: str, target: int) -> dict[int, list[Step]]:
    """What moves version n-1 to n, for every n up to ``target``."""
    steps: dict[int, list[Step]] = {}
    for n in range(1, target + 1):
        name = "schema-1.sql" if n == 1 else f"migrate-{n}.sql"
        steps[n] = [_script(os.path.join(sql_dir, name))]
        if n == 3:
            steps[n] += [_fill_3, _script(os.path.join(sql_dir, "migrate-3-finish.sql"))]
        if n == 4:
            steps[n].append(_fill_4)
    return steps


def _additions(version: int) -> Step:
    """What a store of any version may lack without being refused: ``CREATE ... IF NOT EXISTS`` alone.

    Always this jobctl's own, whatever directory the versions' steps come
    from; the index of jobs with a key (``keyed.sql``) on a store of
    ``version`` 4 or later, whose columns it orders by.
    """
    workers = _script(os.path.join(SQL_DIR, "workers.sql"))
    keys = _script(os.path.join(SQL_DIR, "exclusive.sql"))
    schedules = _script(os.path.join(SQL_DIR, "schedules.sql"))
    keyed = _script(os.path.join(SQL_DIR, "keyed.sql"))

    def run(conn: psycopg.Connection[Any]) -> None:
        workers(conn)
        keys(conn)
        schedules(conn)
        if version >= 4:
            keyed(conn)

    return run


def init(url: str, *, sql_dir: str = SQL_DIR, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Create the schema in an empty database: ``(version before, version after)``.

    A database already at ``target`` is left as it is but for what
    ``workers.sql`` adds when it lacks it; an older one is refused
    (``jobctl db migrate`` moves it), a newer one too.
    """
    with connect(url) as conn, refusing(url), conn.transaction():
        _check_encoding(conn, url)
        found = schema_status(conn, url)
        if found == 0:
            for _n, actions in sorted(_steps(sql_dir, target).items()):
                for action in actions:
                    action(conn)
            conn.execute(Q["first_version"], {"version": target})
            _additions(target)(conn)
            return 0, target
        refuse_version(url, found, target, migrate_hint=True)
        _additions(found)(conn)
        return found, found


def migrate(url: str, *, sql_dir: str = SQL_DIR, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Move an older schema forward to ``target`` in one transaction: ``(before, after)``.

    A store at ``target`` already gets only what ``workers.sql`` adds when it lacks it.
    """
    with connect(url) as conn, refusing(url), conn.transaction():
        found = schema_status(conn, url)
        if found == 0:
            raise uninitialised(url)
        if found > target:
            refuse_version(url, found, target, migrate_hint=False)
        if found < target:
            _check_encoding(conn, url)
        steps = _steps(sql_dir, target)
        for n in range(found + 1, target + 1):
            for action in steps[n]:
                action(conn)
        if found != target:
            conn.execute(Q["set_version"], {"version": target})
        _additions(target)(conn)
        return found, target


def _check_encoding(conn: psycopg.Connection[Any], url: str) -> None:
    """A store keeps records' text in text columns: the database must hold any Unicode text (UTF8)."""
    got = conn.execute(Q["encoding"]).fetchone()
    encoding = "" if got is None else str(got[0])
    if encoding.upper() not in ("UTF8", "UTF-8"):
        err = Refused(f"{masked(url)} is a {encoding} database; a jobctl store needs UTF8")
        err.hint = "create the database with ENCODING 'UTF8' (createdb -E UTF8), then: jobctl db init"
        raise err


def uninitialised(url: str) -> Refused:
    err = Refused(f"{masked(url)} holds no jobctl store")
    err.hint = f"create one with: jobctl db init --store '{masked(url)}'"
    return err


def refuse_version(url: str, found: int, target: int, migrate_hint: bool) -> None:
    if found > target:
        err = Refused(f"{masked(url)} has schema version {found}, newer than this jobctl knows ({target})")
        err.hint = "upgrade jobctl; an older one must not write a newer schema"
        raise err
    if found < target and migrate_hint:
        err = Refused(f"{masked(url)} has schema version {found}; this jobctl needs {target}")
        err.hint = f"move it forward with: jobctl db migrate --store '{masked(url)}'"
        raise err


# -- version 3: the bytes of version 2 into their columns -------------------------------------------

#: The version 2 row's own columns, for a record no reader can decode.
_V2 = "SELECT id, data, state, kind, epoch, owner, expires_at, created_at FROM jobctl_jobs ORDER BY id"
_COPY = "COPY jobctl_jobs_3 ({}) FROM STDIN"
#: The scheduling columns of version 3 (version 4 adds ``priority``, filled by :func:`_fill_4`).
_SCHEDULING_3 = ("not_before", "after", "pipeline", "scheduled", "unfinished")


def _fill_3(conn: psycopg.Connection[Any]) -> None:
    """Every version 2 row into ``jobctl_jobs_3``: decoded, its columns filled, its bytes kept when needed.

    A record renders back to exactly its bytes, or keeps them (``verbatim``)
    until its next write: an export after the migration gives what an export
    before it gave. A record no reader can decode (forged, or a newer
    writer's) keeps its bytes and the version 2 columns, and cannot be
    touched (:data:`UNDECODABLE`).
    """
    names = row.COLUMNS + _SCHEDULING_3
    copy_sql = _COPY.format(", ".join(names)).encode()  # the column names of our own table, not input
    with conn.cursor(name="jobctl_migrate_3") as old, conn.cursor() as new:
        old.execute(_V2)
        # A page at a time: the connection reads the old rows or copies the new ones, never both at once.
        while batch := old.fetchmany(2000):
            with new.copy(copy_sql) as copy:
                for fields in batch:
                    got = _columns_3(*fields)
                    copy.write_row([got[name] for name in names])


def _columns_3(
    job_id: str, data: bytes, state: str, kind: str, epoch: int, owner: str, expires_at: Any, created_at: Any
) -> dict[str, Any]:
    data = bytes(data)
    try:
        rec = decode(data, job_id, named=True)
    except JobError:
        return _undecodable(job_id, data, state, kind, epoch, owner, expires_at, created_at)
    return values_kept(rec, data)


def values_kept(rec: Any, data: bytes) -> dict[str, Any]:
    """The columns of a record read from ``data``: its lists as read, and ``data`` itself unless it renders back."""
    from ...record import encode

    rendered = encode(rec)
    p = prepare(rec)
    keep = None if rendered == data else data
    lists = (p.content, p.critical) if keep is None else (list(rec.content), list(rec.critical))
    return row.values(rec, p, verbatim=keep, lists=lists)


def _undecodable(
    job_id: str, data: bytes, state: str, kind: str, epoch: int, owner: str, expires_at: Any, created_at: Any
) -> dict[str, Any]:
    from ...record import TERMINAL, ZERO_TIME

    out: dict[str, Any] = dict.fromkeys(row.COLUMNS + row.SCHEDULING)
    out["priority"] = 0
    out.update(
        id=job_id, kind=kind, state=state, spec="{}", done=0, total=0, progress_at=ZERO_TIME, owner=owner,
        epoch=epoch, expires_at=expires_at or ZERO_TIME, error="", created_at=created_at or ZERO_TIME,
        updated_at=ZERO_TIME, content=[],
        critical=[UNDECODABLE], verbatim=data, after=[], scheduled=False,
        unfinished=state not in TERMINAL,
    )  # fmt: skip
    return out


# -- version 4: the priority a row's extensions give ---------------------------------------------------


def _fill_4(conn: psycopg.Connection[Any]) -> None:
    """The ``priority`` of every row that carries ``jobctl.run/priority@1``, read as every reader reads it.

    The others keep the column's default, 0, which is what a record without
    the key is. Only the column is written: the bytes a row renders are the
    same after. A row no reader can decode keeps 0.
    """
    from ...priority import priority_of

    for got in conn.execute(Q["migrate_4_rows"]).fetchall():
        try:
            rec = row.record_of(got)
        except JobError:
            continue
        value = priority_of(rec)
        if value:
            conn.execute(Q["migrate_4_priority"], {"id": got[0], "priority": value})
