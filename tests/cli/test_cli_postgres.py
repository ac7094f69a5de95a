"""The command line on a PostgreSQL store: db init/migrate, discovery of URLs, export/import."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from clitools import Jobctl

from jobctl import FileStore, Record, discovery
from jobctl.errors import Refused
from jobctl.store.location import masked
from jobctl.store.postgres.schema import SCHEMA_VERSION as V


@pytest.fixture
def pg(pg_url: str) -> str:
    """A fresh, never-initialised database store URL (a schema of its own)."""
    return pg_url


def set_version(url: str, version: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE jobctl_schema SET version = %s", (version,))


# -- the schema --------------------------------------------------------------------------------


def test_a_never_initialised_database_is_one_line_naming_db_init(jobctl: Jobctl, pg: str) -> None:
    ran = jobctl("list", env={"JOB_STORE": pg})
    assert ran.code == 1
    assert ran.out == b""
    lines = ran.err.splitlines()
    assert len(lines) == 1, ran.err
    assert "holds no jobctl store" in lines[0] and "jobctl db init" in lines[0] and "JOB_STORE" in lines[0]


@pytest.mark.parametrize("given", ["soon", "-1", "86401", "nan", "inf", "\u0661"])
def test_a_patience_that_is_no_number_of_seconds_is_one_line_naming_the_variable(
    jobctl: Jobctl, pg: str, given: str
) -> None:
    jobctl("db", "init", env={"JOB_STORE": pg})
    ran = jobctl("list", env={"JOB_STORE": pg, "JOBCTL_PG_RECONNECT_WAIT": given})
    assert (ran.code, ran.out) == (1, b""), ran.err  # the store cannot be opened as asked (exit 1, as a bad URL)
    assert ran.err.splitlines() == [
        f"jobctl: JOBCTL_PG_RECONNECT_WAIT={given!r}: wants seconds from 0 to 86400 (the store came from JOB_STORE)"
    ], ran.err


def test_a_patience_in_seconds_is_the_stores(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobctl.store import postgres

    postgres.init(pg_url)
    for given, seconds in (("", postgres.RECONNECT_WAIT), (" 2.5 ", 2.5), ("0", 0.0), ("86400", 86400.0)):
        monkeypatch.setenv(postgres.RECONNECT_WAIT_ENV, given)
        with postgres.PostgresStore(pg_url) as store:
            assert store.session.reconnect_wait == seconds
    with postgres.PostgresStore(pg_url, reconnect_wait=1.0) as store:  # given: the environment is not asked
        assert store.session.reconnect_wait == 1.0


def test_db_init_then_every_command_works(jobctl: Jobctl, pg: str) -> None:
    env = {"JOB_STORE": pg}
    first = jobctl("db", "init", env=env)
    assert (first.code, first.text) == (0, f"schema_version={V} was=0\n"), first.err
    again = jobctl("db", "init", env=env)
    assert (again.code, again.text) == (0, f"schema_version={V} was={V}\n")
    assert jobctl("db", "migrate", env=env).text == f"schema_version={V} was={V}\n"
    ran = jobctl("submit", "--kind", "test", "--spec", '{"a": 1}', env=env)
    assert ran.code == 0, ran.err
    job_id = ran.text.strip()
    claimed = jobctl("claim", "--next", "--owner", "me", env=env)
    assert claimed.code == 0, claimed.err
    assert claimed.text == f"{job_id} epoch=1 state=running checkpoint=none\n"
    held = jobctl("claim", job_id, "--owner", "you", env=env)
    assert held.code == 4 and held.err.startswith("jobctl: lease_held: "), held.err
    nothing = jobctl("claim", "--next", "--owner", "you", env=env)
    assert nothing.code != 0 and "no runnable job" in nothing.err
    done = jobctl("finish", job_id, "--epoch", "1", "--state", "complete", env=env)
    assert done.code == 0, done.err
    listed = jobctl("list", env=env)
    assert listed.text.startswith(f"{job_id} kind=test state=complete"), listed.text


def test_a_newer_schema_is_refused_everywhere(jobctl: Jobctl, pg: str) -> None:
    env = {"JOB_STORE": pg}
    assert jobctl("db", "init", env=env).code == 0
    set_version(pg, 99)
    for args in (("list",), ("db", "init"), ("db", "migrate")):
        ran = jobctl(*args, env=env)
        assert ran.code != 0, args
        assert f"schema version 99, newer than this jobctl knows ({V})" in ran.err, (args, ran.err)
        assert len(ran.err.splitlines()) == 1, ran.err


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        ("DELETE FROM jobctl_schema", "table jobctl_schema holds no row, not the one that names the schema version"),
        (f"INSERT INTO jobctl_schema VALUES ({V - 2})", "table jobctl_schema holds more than one row"),
        (
            "ALTER TABLE jobctl_schema ALTER version TYPE text; UPDATE jobctl_schema SET version = '5.1'",
            "table jobctl_schema holds version '5.1', not a whole number",
        ),
    ],
    ids=["no-row", "two-rows", "not-a-number"],
)
def test_a_version_table_an_administrator_changed_is_one_line_everywhere(
    jobctl: Jobctl, pg: str, tamper: str, said: str
) -> None:
    import psycopg

    env = {"JOB_STORE": pg}
    assert jobctl("db", "init", env=env).code == 0
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(tamper.encode())
    for args, code in ((("list",), 1), (("db", "init"), 10), (("db", "migrate"), 10)):
        ran = jobctl(*args, env=env)
        assert (ran.code, ran.out) == (code, b""), (args, ran.err)
        assert len(ran.err.splitlines()) == 1 and said in ran.err, (args, ran.err)
        assert "restore its one row" in ran.err and "jobctl db init" not in ran.err, (args, ran.err)
    doctor = jobctl("doctor", env=env)
    assert doctor.code == 1 and "Traceback" not in doctor.err, doctor.err
    assert f"check_open=FAILED: {masked(pg)}: {said}" in doctor.text, doctor.text


def test_migrate_refuses_a_database_never_initialised(jobctl: Jobctl, pg: str) -> None:
    ran = jobctl("db", "migrate", env={"JOB_STORE": pg})
    assert ran.code == 10 and "holds no jobctl store" in ran.err and "jobctl db init" in ran.err


def test_migrate_moves_an_older_schema_forward(pg: str, tmp_path: Path) -> None:
    """Migration steps run in order, in one transaction (a version 2 made for the test)."""
    from jobctl.store import postgres

    steps = tmp_path / "sql"
    steps.mkdir()
    shutil.copy(Path(postgres.SQL_DIR) / "schema-1.sql", steps / "schema-1.sql")
    (steps / "migrate-2.sql").write_text("CREATE TABLE jobctl_probe (x int);\n")
    assert postgres.init(pg, sql_dir=str(steps), target=1) == (0, 1)
    with pytest.raises(Refused, match="has schema version 1; this jobctl needs 2") as info:
        postgres.init(pg, sql_dir=str(steps), target=2)  # init does not migrate
    assert "jobctl db migrate" in info.value.hint
    assert postgres.migrate(pg, sql_dir=str(steps), target=2) == (1, 2)
    assert postgres.migrate(pg, sql_dir=str(steps), target=2) == (2, 2)
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("SELECT x FROM jobctl_probe")
        assert postgres.schema_status(conn) == 2


def test_a_failed_migration_leaves_the_schema_as_it_was(pg: str, tmp_path: Path) -> None:
    from jobctl.store import postgres

    steps = tmp_path / "sql"
    steps.mkdir()
    shutil.copy(Path(postgres.SQL_DIR) / "schema-1.sql", steps / "schema-1.sql")
    (steps / "migrate-2.sql").write_text("CREATE TABLE jobctl_probe (x int);\nSELECT no_such_function();\n")
    postgres.init(pg, sql_dir=str(steps), target=1)
    with pytest.raises(Refused):
        postgres.migrate(pg, sql_dir=str(steps), target=2)
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        assert postgres.schema_status(conn) == 1
        assert conn.execute("SELECT to_regclass('jobctl_probe')").fetchone() == (None,)


def test_db_commands_refuse_a_directory_store(jobctl: Jobctl) -> None:
    ran = jobctl("db", "init")
    assert ran.code == 9
    assert "is a directory; db commands take a postgresql:// store URL" in ran.err


# -- URLs and their passwords --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:hunter2@db.example:5433/jobs", "postgresql://u:***@db.example:5433/jobs"),
        ("postgres://u@db/jobs?password=hunter2&sslmode=require", "postgres://u@db/jobs?password=***&sslmode=require"),
        ("postgresql:///jobs?host=/run/pg", "postgresql:///jobs?host=/run/pg"),
        ("/srv/jobs", "/srv/jobs"),
    ],
)
def test_masked(url: str, shown: str) -> None:
    assert masked(url) == shown


def test_a_url_password_is_never_printed(jobctl: Jobctl, tmp_path: Path) -> None:
    url = f"postgresql://u:hunter2@/jobs?host={tmp_path}/nowhere"
    for args in (("--store", url, "list"), ("--store", url, "paths")):
        ran = jobctl(*args)
        assert ran.code != 0
        assert "hunter2" not in ran.err and "hunter2" not in ran.text, (args, ran.err, ran.text)
        assert "u:***@" in ran.err + ran.text


def test_discovery_takes_urls_from_every_rung(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "xdg" / "abstraction" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"store": "postgres://cfg@db/jobs"}')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    env = {"JOB_STORE": "postgresql://env@db/jobs", "HOME": str(tmp_path)}
    assert discovery.resolve("postgresql://flag@db/jobs", env)[0] == "postgresql://flag@db/jobs"
    assert discovery.resolve(None, env) == ("postgresql://env@db/jobs", "JOB_STORE")
    assert discovery.resolve(None, {"HOME": str(tmp_path)}) == ("postgres://cfg@db/jobs", str(config))


def test_libpq_settings_apply(jobctl: Jobctl, pg: str) -> None:
    """A URL naming nothing but the database: host and port come from PGHOST/PGPORT, as libpq does it."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(pg)
    query = parse_qs(parts.query)
    bare = f"postgresql://postgres@/postgres?options={query['options'][0].replace('=', '%3D')}"
    env = {"JOB_STORE": bare, "PGHOST": query["host"][0], "PGPORT": query["port"][0]}
    ran = jobctl("db", "init", env=env)
    assert ran.code == 0, ran.err
    assert jobctl("db", "init", env={"JOB_STORE": pg}).text == f"schema_version={V} was={V}\n"


# -- export and import ---------------------------------------------------------------------------


def fill(store: FileStore) -> None:
    """Records with every optional part, some hand-laid: what a real directory holds."""
    plain = store.submit(Record(kind="fetch", spec={"url": "https://example.invalid/a"}))
    rich = store.submit(Record(kind="fetch", spec={"n": 1}, extensions={"x.example/tag@1": {"t": [1, 2.50]}}))
    mine = store.claim(rich, "w", 60)
    store.progress(rich, mine.lease.epoch, 7, {"verified_prefix": 7, "note": "h\u00e9"})
    store.recall(rich, mine.lease.epoch, "make room", "ops", 30)
    done = store.submit(Record(kind="build", spec={}))
    mine = store.claim(done, "w", 60)
    store.finish(done, mine.lease.epoch, "failed", error="exit 3")
    store.set_intent(plain, "pause", "ops")
    odd = (
        '{"content":["abstraction.job/base@1"],"critical":["abstraction.job/base@1"],"id":"hand-laid",'
        '"kind":"k","state":"pending","spec":{"b": 2,  "a": 1},"progress":{"done":0,'
        '"updated_at":"2026-09-06T05:44:05.494626Z"},"lease":{"owner":"","epoch":0,"expires_at":""},'
        '"created_at":"2026-09-06T05:44:05.494626Z","updated_at":"2026-09-06T05:44:05.494626Z"}'
    )
    store.import_bytes(odd.encode())


def files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "jobs").glob("*.json"))}


def test_round_trip_directory_postgres_directory_is_byte_identical(jobctl: Jobctl, pg: str, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    fill(FileStore(first))
    assert jobctl("--store", pg, "db", "init").code == 0
    exported = jobctl("--store", str(first), "export")
    assert exported.code == 0, exported.err
    assert len(exported.lines) == 4
    into_pg = jobctl("--store", pg, "import", input=exported.out)
    assert (into_pg.code, into_pg.text) == (0, "imported=4 refused=0\n"), into_pg.err
    from_pg = jobctl("--store", pg, "export")
    assert from_pg.out == exported.out  # the database hands back exactly what it was given
    into_dir = jobctl("--store", str(second), "import", input=from_pg.out)
    assert into_dir.code == 0, into_dir.err
    before, after = files(first), files(second)
    assert len(before) == 4 and before == after
    # and the records are live in the database, not just parked there
    hand = jobctl("--store", pg, "claim", "hand-laid", "--owner", "me")
    assert hand.code == 0 and "epoch=1" in hand.text, hand.err


def test_import_names_what_it_refuses_and_keeps_the_rest(jobctl: Jobctl, pg: str, tmp_path: Path) -> None:
    source = tmp_path / "src"
    fill(FileStore(source))
    assert jobctl("--store", pg, "db", "init").code == 0
    lines = jobctl("--store", str(source), "export").lines
    first = jobctl("--store", pg, "import", input="\n".join(lines[:1]) + "\n")
    assert first.code == 0
    text = "\n".join([*lines, "not json", '{"id": "x"}']) + "\n"
    ran = jobctl("--store", pg, "import", input=text)
    assert ran.code == 15  # the first refusal's code: exists (an id already there)
    assert ran.text == "imported=3 refused=3\n"
    err = ran.err.splitlines()
    assert len(err) == 3
    assert "line 1:" in err[0] and "is already in the store" in err[0]
    assert "line 5 is not JSON" in err[1] and "line 6 has no record text" in err[2]
    assert len(jobctl("--store", pg, "export").lines) == 4


def test_paths_on_a_database_store(jobctl: Jobctl, pg: str) -> None:
    assert jobctl("--store", pg, "db", "init").code == 0
    ran = jobctl("--store", pg, "paths")
    assert ran.code == 0, ran.err
    facts = dict(line.split("=", 1) for line in ran.lines if "=" in line and not line.startswith("worker."))
    assert facts["root"] == pg and facts["rung"] == "the --store flag"
    assert facts["schema_version"] == str(V) and facts["check_open"] == "ok"
    assert facts["clock_offset"].endswith("s") and abs(float(facts["clock_offset"][:-1])) < 60  # same host


def test_a_lost_connection_is_opened_again(pg_store: Any) -> None:
    """A server that dropped the connection (a restart, a failover) costs a reconnect, not a refusal."""
    import psycopg

    job_id = pg_store.submit(Record(kind="k", spec={}))
    backend = pg_store._connection().info.backend_pid
    with psycopg.connect(pg_store.url, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone() == (True,)
    assert pg_store.load(job_id).id == job_id
    assert pg_store.reconnects == 1
    assert pg_store._connection().info.backend_pid != backend


def test_a_forked_child_opens_its_own_connection(pg_store: Any) -> None:
    """A child must not talk on its parent's socket, nor close it on its way out."""
    import os

    job_id = pg_store.submit(Record(kind="k", spec={}))
    parent_backend = pg_store._connection().info.backend_pid
    pid = os.fork()
    if pid == 0:  # the child: use the store, then leave as a child does
        code = 0
        try:
            code = 0 if pg_store._connection().info.backend_pid != parent_backend else 3
            if pg_store.load(job_id).id != job_id:
                code = 4
        except BaseException:
            code = 5
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # the parent's connection is untouched and still its own
    assert pg_store._connection().info.backend_pid == parent_backend
    assert pg_store.load(job_id).id == job_id
