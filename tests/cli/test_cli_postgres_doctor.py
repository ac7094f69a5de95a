"""``jobctl paths`` / ``doctor`` on a database store: who and where, and each check, passing and failing.

Roles are the server's, not a schema's: each test makes its own with a name
of its own and drops it at the end.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from clitools import JOBCTL, Jobctl

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
    assert got["check_privileges"] == "ok" and got["check_writable"] == "ok"
    assert got["check_owner"].startswith("WARNING: role postgres is a superuser: it may alter or drop the store;")
    assert re.fullmatch(r"[+-]\d+\.\d{3}s", got["clock_offset"]) and got["check_clock"] == "ok"
    keys = [k for k in got if k.startswith("check_")]
    assert keys == ["check_connect", "check_open", "check_privileges", "check_writable", "check_owner", "check_clock"]

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
        f"FAILED: role {role} lacks SELECT, INSERT, UPDATE on jobctl_jobs"
        " and SELECT, INSERT, UPDATE, DELETE on jobctl_workers and SELECT, INSERT, UPDATE on jobctl_exclusive"
        " and SELECT, INSERT, UPDATE, DELETE on jobctl_schedules; the grants a worker needs are in docs/howto/hosts.md"
    )
    # one missing privilege is named alone
    partial = make_role(
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON {schema}.jobctl_schema TO {role}",
        "GRANT SELECT, INSERT ON {schema}.jobctl_jobs TO {role}",
        "GRANT SELECT, INSERT, UPDATE ON {schema}.jobctl_exclusive TO {role}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.jobctl_workers, {schema}.jobctl_schedules TO {role}",
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


def documented(statements: list[str]) -> list[str]:
    """The page's statements but its CREATE ROLE, for ``make_role``: its schema and role as ``{schema}``, ``{role}``."""
    assert statements[0] == "CREATE ROLE jobctl_worker LOGIN", statements
    return [re.sub(r"\bjobctl_worker\b", "{role}", re.sub(r"\bjobs\b", "{schema}", sql)) for sql in statements[1:]]


def worker_role(make_role: Callable[..., str], *more: str) -> str:
    """A role made with exactly the grants of docs/howto/hosts.md (then ``more``, run as the admin)."""
    return make_role(*documented(hosts_md_grants()), *more)


def test_hosts_md_grants_each_table_what_doctor_checks() -> None:
    granted: dict[str, set[str]] = {}
    for sql in hosts_md_grants()[1:]:
        got = re.fullmatch(r"GRANT (.+) ON (SCHEMA )?(\S+(?:, \S+)*) TO jobctl_worker", sql)
        assert got is not None, sql
        for table in got.group(3).split(", "):
            granted.setdefault(table, set()).update(got.group(1).split(", "))
    wanted = {f"jobs.{table}": set(privileges) for table, privileges, _ in postgres_health.NEEDS}
    assert granted == {"jobs": {"USAGE"}, **wanted}


def test_the_worker_role_of_hosts_md_works_passes_doctor_and_can_do_no_more(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str]
) -> None:
    from jobctl import Record

    role = worker_role(make_role)
    url = as_role(store_url, role)
    got = facts(jobctl("--store", url, "doctor"))
    assert (got["user"], got["check_privileges"], got["check_owner"], got["check_open"]) == (role, "ok", "ok", "ok")
    assert got["check_writable"] == "ok"
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
    # nothing more: no deleting records or keys, no changing or dropping the tables, no new ones
    for sql in (
        "DELETE FROM jobctl_jobs",
        "DELETE FROM jobctl_exclusive",
        "DROP TABLE jobctl_jobs",
        "CREATE TABLE mine (x int)",
    ):
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql)


@pytest.mark.timeout(60)
def test_the_worker_role_of_hosts_md_claims_exclusive_jobs_announces_and_keeps_schedules(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str]
) -> None:
    from jobctl.recurring import new

    url = as_role(store_url, worker_role(make_role))
    keyed = jobctl("--store", url, "submit", "--exclusive", "nightly-db", "--", "true")
    assert keyed.code == 0, keyed.err
    assert jobctl("--store", url, "schedule", "add", "hourly", "--every", "1h", "--", "true").code == 0
    ran = subprocess.run(
        [JOBCTL, "--store", url, "worker", "--drain"], env=jobctl.subprocess_env(), capture_output=True
    )
    assert ran.returncode == 0, ran.stderr
    said = ran.stderr.decode()
    assert "permission denied" not in said and "unannounced" not in said and "schedule-failed" not in said, said
    with postgres.PostgresStore(url) as store:
        assert store.load(keyed.text.strip()).state == "complete"  # claimed, with its key
        store.announce("w@host-a:1", ["shell"], 30)
        assert [a.owner for a in store.announcements()] == ["w@host-a:1"]
        store.withdraw("w@host-a:1")
        assert store.announcements() == []
        (hourly,) = store.schedules()
        assert store.mark_fired("hourly", hourly.created_at, hourly.created_at + timedelta(hours=1))
        declared = new("declared", kind="k", every=60, by="app", now=hourly.created_at)
        assert store.put_schedule(declared) == "added"
    listed = jobctl("--store", url, "schedule", "list")
    assert listed.code == 0 and "hourly" in listed.text and "declared" in listed.text, listed.err
    assert jobctl("--store", url, "schedule", "remove", "hourly").code == 0


#: Each privilege the page grants a worker on each table.
GRANTED = [(table, what) for table, wants, _ in postgres_health.NEEDS for what in wants]


@pytest.mark.parametrize(("table", "what"), GRANTED, ids=[f"{what}-{table}" for table, what in GRANTED])
def test_a_grant_missing_from_the_worker_role_fails_check_privileges(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str], table: str, what: str
) -> None:
    role = worker_role(make_role, f"REVOKE {what} ON {{schema}}.{table} FROM {{role}}")
    ran = jobctl("--store", as_role(store_url, role), "doctor")
    assert ran.code == 1
    got = facts(ran)
    assert got["check_privileges"] == (
        f"FAILED: role {role} lacks {what} on {table}; the grants a worker needs are in docs/howto/hosts.md"
    )


OPTIONAL = [(table, without) for table, _, without in postgres_health.NEEDS if without is not None]


@pytest.mark.parametrize(("table", "without"), OPTIONAL, ids=[table for table, _ in OPTIONAL])
def test_a_store_without_an_optional_table_is_warned_about(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str], table: str, without: str
) -> None:
    role = worker_role(make_role)  # granted on every table, before the one dropped
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {table}")  # a store made before it, not migrated since
    ran = jobctl("--store", as_role(store_url, role), "doctor")
    assert ran.code == 0, ran.out  # it works, without what the table gives
    assert facts(ran)["check_privileges"] == (
        f"WARNING: the store has no table {table} ({without}): add it with jobctl db migrate (the schema version stays)"
    )
    assert jobctl("--store", store_url, "db", "migrate").code == 0
    assert facts(jobctl("--store", as_role(store_url, role), "doctor"))["check_privileges"].startswith(
        f"FAILED: role {role} lacks SELECT, "  # made again by the admin: the role's grants are gone
    )


def test_a_missing_grant_and_missing_tables_are_named_in_one_line(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str]
) -> None:
    role = worker_role(make_role, "REVOKE DELETE ON {schema}.jobctl_workers FROM {role}")
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute("DROP TABLE jobctl_exclusive")
        conn.execute("DROP TABLE jobctl_schedules")
    ran = jobctl("--store", as_role(store_url, role), "doctor")
    assert ran.code == 1
    assert facts(ran)["check_privileges"] == (
        f"FAILED: role {role} lacks DELETE on jobctl_workers; the grants a worker needs are in docs/howto/hosts.md; "
        "the store has no tables jobctl_exclusive, jobctl_schedules (a job with an exclusive key is claimed by "
        "nobody; the store keeps no schedule): add them with jobctl db migrate (the schema version stays)"
    )


def test_a_read_only_role_fails_check_writable_and_is_told_the_way_out(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str]
) -> None:
    role = worker_role(make_role, "ALTER ROLE {role} SET default_transaction_read_only = on")
    url = as_role(store_url, role)
    assert jobctl("--store", url, "submit", "--", "true").code == 10  # every write is refused
    ran = jobctl("--store", url, "doctor")
    assert ran.code == 1
    got = facts(ran)
    assert (got["check_privileges"], got["check_open"]) == ("ok", "ok")
    way = f"ALTER ROLE {role} RESET default_transaction_read_only"
    assert got["check_writable"] == (
        f"FAILED: role {role}'s transactions are read-only (default_transaction_read_only=on, "
        f"set for role {role}: an administrator undoes it with {way}); every write is refused"
    )
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(way)  # the way out, as given
    ran = jobctl("--store", url, "doctor")
    assert ran.code == 0 and facts(ran)["check_writable"] == "ok"
    assert jobctl("--store", url, "submit", "--", "true").code == 0


def test_read_only_set_in_the_database_or_by_the_url_fails_check_writable(
    jobctl: Jobctl, store_url: str, make_role: Callable[..., str]
) -> None:
    role = worker_role(make_role, "ALTER ROLE {role} IN DATABASE postgres SET default_transaction_read_only = on")
    got = facts(jobctl("--store", as_role(store_url, role), "doctor"))
    assert got["check_writable"].startswith(
        f"FAILED: role {role}'s transactions are read-only (default_transaction_read_only=on, set for role {role} "
        f"in database postgres: an administrator undoes it with ALTER ROLE {role} IN DATABASE postgres RESET "
    )
    asked = store_url.replace("options=-c", "options=-cdefault_transaction_read_only%3Don%20-c", 1)
    assert asked != store_url
    ran = jobctl("--store", asked, "doctor")
    assert ran.code == 1
    assert facts(ran)["check_writable"] == (
        "FAILED: role postgres's transactions are read-only (default_transaction_read_only=on, asked for by the "
        "connection (the URL's options, or PGOPTIONS): leave it out); every write is refused"
    )


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
