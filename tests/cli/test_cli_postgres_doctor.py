"""``jobctl paths`` / ``doctor`` on a database store: who and where, and each check, passing and failing.

Roles are the server's, not a schema's: each test makes its own with a name
of its own and drops it at the end.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from clitools import Jobctl

from jobctl.store import postgres
from jobctl.store.postgres import health as postgres_health

HOSTS_MD = Path(__file__).resolve().parents[2] / "docs" / "howto" / "hosts.md"


def facts(ran: Any) -> dict[str, str]:
    return dict(line.split("=", 1) for line in ran.lines if "=" in line and not line.startswith("worker."))


def schema_of(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
    assert row is not None
    return str(row[0])


def as_role(url: str, role: str) -> str:
    other = url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
    assert other != url
    return other


@pytest.fixture
def store_url(pg_url: str) -> str:
    postgres.init(pg_url)
    return pg_url


@pytest.fixture
def make_role(pg_url: str) -> Iterator[Callable[..., str]]:
    """``make_role(*sql)``: a new LOGIN role, then each statement run as the admin with ``{role}`` and
    ``{schema}`` filled in (names made here, of ``[a-z0-9_]`` only)."""
    made: list[str] = []
    schema = schema_of(pg_url)

    def make(*statements: str) -> str:
        role = "r_" + uuid.uuid4().hex[:12]
        made.append(role)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN")
            for sql in statements:
                conn.execute(sql.format(role=role, schema=schema))
        return role

    yield make
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for role in made:
            conn.execute(f"REASSIGN OWNED BY {role} TO postgres")  # a schema it was given stays the test's
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_paths_shows_who_and_where_with_the_password_masked(jobctl: Jobctl, store_url: str) -> None:
    url = store_url + "&password=hunter2"  # the throwaway server trusts the socket: a password is not needed
    ran = jobctl("--store", url, "paths")
    assert ran.code == 0, ran.err  # a warning does not fail
    assert "hunter2" not in ran.text + ran.err
    got = facts(ran)
    host = re.search(r"host=([^&]+)", store_url)
    assert host is not None
    assert got["root"].endswith("&password=***")
    assert got["server"].startswith(host.group(1).replace("%2F", "/") + ":5432 (PostgreSQL ")
    assert (got["database"], got["user"], got["schema"]) == ("postgres", "postgres", schema_of(store_url))
    assert got["schema_version"] == str(postgres.SCHEMA_VERSION)
    assert (got["check_connect"], got["check_open"]) == ("ok", "ok")
    assert got["work"].endswith("/.abstraction/work")
    assert got["check_privileges"] == "ok"
    assert got["check_owner"].startswith("WARNING: role postgres is a superuser: it may alter or drop the store;")
    assert re.fullmatch(r"[+-]\d+\.\d{3}s", got["clock_offset"]) and got["check_clock"] == "ok"
    keys = [k for k in got if k.startswith("check_")]
    assert keys == ["check_connect", "check_open", "check_privileges", "check_owner", "check_clock"]

    doc = jobctl("--store", url, "--json", "doctor")
    assert doc.code == 0, doc.err
    obj = json.loads(doc.text)
    assert obj["healthy"] is True and obj["check_privileges"] == "ok" and "hunter2" not in doc.text


def test_a_server_that_cannot_be_reached_fails_check_connect(jobctl: Jobctl, store_url: str) -> None:
    url = store_url.replace("@/postgres?", "@/no_such_db?", 1)
    ran = jobctl("--store", url + "&password=hunter2", "doctor")
    assert ran.code == 1
    got = facts(ran)
    assert got["check_connect"].startswith("FAILED: cannot connect to postgresql://postgres@/no_such_db?")
    assert 'database "no_such_db" does not exist' in got["check_connect"]
    assert "server" not in got and "check_open" not in got and "hunter2" not in ran.text + ran.err


def test_a_database_with_no_store_fails_check_open(jobctl: Jobctl, pg_url: str) -> None:
    ran = jobctl("--store", pg_url, "doctor")
    assert ran.code == 1
    got = facts(ran)
    assert got["check_connect"] == "ok"
    assert got["check_open"].startswith("FAILED: ") and "jobctl db init" in got["check_open"]
    assert got["check_privileges"].startswith("FAILED: role postgres sees no jobctl_jobs and jobctl_schema tables")


def test_a_role_without_privileges_fails_check_privileges(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str]
) -> None:
    role = make_role("GRANT USAGE ON SCHEMA {schema} TO {role}", "GRANT SELECT ON {schema}.jobctl_schema TO {role}")
    ran = jobctl("--store", as_role(store_url, role), "doctor")
    assert ran.code == 1
    got = facts(ran)
    assert (got["user"], got["check_connect"], got["check_open"], got["check_owner"]) == (role, "ok", "ok", "ok")
    assert got["check_privileges"] == (
        f"FAILED: role {role} lacks SELECT on jobctl_jobs, INSERT on jobctl_jobs, UPDATE on jobctl_jobs; "
        "the grants a worker needs are in docs/howto/hosts.md"
    )
    # one missing privilege is named alone
    partial = make_role(
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON {schema}.jobctl_schema TO {role}",
        "GRANT SELECT, INSERT ON {schema}.jobctl_jobs TO {role}",
    )
    got = facts(jobctl("--store", as_role(store_url, partial), "doctor"))
    assert got["check_privileges"].startswith(f"FAILED: role {partial} lacks UPDATE on jobctl_jobs; ")


def test_a_role_without_usage_on_the_schema_sees_no_store(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str]
) -> None:
    role = make_role()
    ran = jobctl("--store", as_role(store_url, role), "doctor")
    assert ran.code == 1
    got = facts(ran)
    assert got["check_open"].startswith("FAILED: ") and "holds no jobctl store" in got["check_open"]
    assert got["check_privileges"].startswith(f"FAILED: role {role} sees no jobctl_jobs and jobctl_schema tables")


def test_a_role_owning_the_schema_is_warned_about(jobctl: Jobctl, pg_url: str, make_role: Callable[..., str]) -> None:
    role = make_role("ALTER SCHEMA {schema} OWNER TO {role}")
    url = as_role(pg_url, role)
    assert jobctl("--store", url, "db", "init").code == 0  # its tables, in its schema
    ran = jobctl("--store", url, "doctor")
    assert ran.code == 0, ran.err
    got = facts(ran)
    assert got["check_privileges"] == "ok"
    assert got["check_owner"].startswith(f"WARNING: role {role} owns the store's tables: it may alter or drop")
    # owning only the schema is warned about too: the owner of a schema may drop what is in it
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE jobctl_jobs OWNER TO postgres")
        conn.execute("ALTER TABLE jobctl_schema OWNER TO postgres")
    got = facts(jobctl("--store", url, "doctor"))
    assert got["check_owner"].startswith(f"WARNING: role {role} owns schema {schema_of(pg_url)}, which holds")


def hosts_md_grants() -> list[str]:
    """The statements of docs/howto/hosts.md's least-privilege role, as the page gives them."""
    text = HOSTS_MD.read_text()
    section = text[text.index("## A role for workers") :]
    block = section[section.index("```sql\n") + len("```sql\n") : section.index("```", section.index("```sql\n") + 6)]
    lines = [line.split("--", 1)[0].strip() for line in block.splitlines()]
    return [s.strip() for s in " ".join(lines).split(";") if s.strip()]


def test_the_worker_role_of_hosts_md_works_passes_doctor_and_can_do_no_more(jobctl: Jobctl, store_url: str) -> None:
    from jobctl import Record

    statements = hosts_md_grants()
    assert statements[0] == "CREATE ROLE jobctl_worker LOGIN" and len(statements) == 4, statements
    role = "r_" + uuid.uuid4().hex[:12]
    schema = schema_of(store_url)
    with psycopg.connect(store_url, autocommit=True) as conn:
        for sql in statements:  # the page's own text, with this test's schema and role put in
            conn.execute(re.sub(r"\bjobs\b", schema, sql).replace("jobctl_worker", role))
    url = as_role(store_url, role)
    try:
        got = facts(jobctl("--store", url, "doctor"))
        assert (got["user"], got["check_privileges"], got["check_owner"], got["check_open"]) == (role, "ok", "ok", "ok")
        with postgres.PostgresStore(url) as store:
            notices = store.notices()  # LISTEN needs no grant; the trigger fires for the role's writes
            job_id = store.submit(Record(kind="k", spec={"n": 1}))
            assert notices.read() == ({job_id}, set())
            notices.close()
            mine = store.claim_next("host-a", 30)
            assert mine is not None and mine.id == job_id
            store.progress(job_id, mine.lease.epoch, 1, {"at": 1})
            store.finish(job_id, mine.lease.epoch, "complete")
            assert store.load(job_id).state == "complete"
        # nothing more: no deleting records, no changing or dropping the tables, no new ones
        for sql in ("DELETE FROM jobctl_jobs", "DROP TABLE jobctl_jobs", "CREATE TABLE mine (x int)"):
            with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)
    finally:
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_clock_off_the_servers_is_warned_about(
    jobctl: Jobctl, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = postgres_health._host_now
    monkeypatch.setattr(postgres_health, "_host_now", lambda: real() - timedelta(seconds=5))
    ran = jobctl("--store", store_url, "doctor")
    assert ran.code == 0, ran.err  # a warning, not a failure
    got = facts(ran)
    assert float(got["clock_offset"][:-1]) > 4
    assert got["check_clock"].startswith("WARNING: this host's clock is 5.0 s behind the server's (more than 1 s)")


def test_the_clock_check_names_the_way_and_the_limit() -> None:
    assert postgres_health.clock_check(0.9) == "ok" and postgres_health.clock_check(-1.0) == "ok"
    assert postgres_health.clock_check(-2.5).startswith("WARNING: this host's clock is 2.5 s ahead of the server's")
    assert postgres_health.clock_check(3, limit=5) == "ok"
