"""Workers' words in a PostgreSQL store: the server's clock judges them, and a store made before the table works.

The table (``workers.sql``) is no schema version of its own: a version 3
store without it opens, reads as one where no worker has spoken, refuses a
word with the way out, and ``jobctl db migrate`` (or ``db init``) adds it
with the version and every job as they were.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from jobctl import Record
from jobctl.errors import Refused
from jobctl.roster import UNKNOWN, roster_of
from jobctl.store import postgres
from jobctl.worker import Worker

pytestmark = pytest.mark.timeout(120)

#: The schema version this jobctl writes: the workers' table is none of its own.
V = postgres.SCHEMA_VERSION


def _table(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        got = conn.execute("SELECT to_regclass('jobctl_workers') IS NOT NULL").fetchone()
    return bool(got and got[0])


def _jobctl(*args: str) -> subprocess.CompletedProcess[str]:
    command = str(Path(sys.executable).parent / "jobctl")
    return subprocess.run([command, *args], capture_output=True, text=True, timeout=120, check=False)


def test_words_expire_by_the_servers_clock_and_are_replaced(pg_url: str) -> None:
    postgres.init(pg_url)
    assert _table(pg_url)
    with postgres.PostgresStore(pg_url) as store:
        store.announce("w@h:1", ["shell", "fetch"], 0.6)
        store.announce("w@h:1", ["shell"], 0.6)  # a renewal replaces the word
        store.announce("v@h:2", ["render"], 60)
        assert [(a.owner, a.kinds) for a in store.announcements()] == [("v@h:2", {"render"}), ("w@h:1", {"shell"})]
        assert all(a.expires_at > store.now() for a in store.announcements())
        time.sleep(0.8)
        assert [a.owner for a in store.announcements()] == ["v@h:2"]
        store.withdraw("v@h:2")
        store.withdraw("v@h:2")  # nothing to take back: nothing happens
        assert store.announcements() == []


def test_a_store_made_before_the_table_works_and_migrate_adds_it(pg_url: str) -> None:
    postgres.init(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE jobctl_workers")  # as a version 3 store made before it
    with postgres.PostgresStore(pg_url) as store:
        ids = [store.submit(Record(kind="render", spec={"n": n})) for n in range(5)]
        before = [store.load_bytes(job_id) for job_id in ids]
        assert store.announcements() == []
        assert roster_of(store) == UNKNOWN
        with pytest.raises(Refused, match="jobctl_workers") as refused:
            store.announce("w@h:1", ["shell"], 60)
        assert "jobctl db migrate" in (refused.value.hint or "")
        store.withdraw("w@h:1")  # nothing to take back

        said: list[str] = []
        worker = Worker(store, poll_interval=0.05, ttl=2.0, on_event=lambda e: said.append(e.line()))
        worker.run("once")  # the worker works all the same, and says why it said nothing, once
        assert [line for line in said if line.startswith("unannounced")] == [
            f"unannounced: cannot say what this worker handles: {refused.value} (add the table of workers' "
            "announcements with: jobctl db migrate (the schema version stays))"
        ]

    ran = _jobctl("db", "migrate", "--store", pg_url)
    assert (ran.returncode, ran.stdout) == (0, f"schema_version={V} was={V}\n"), ran.stderr
    assert _table(pg_url)
    with postgres.PostgresStore(pg_url) as store:
        assert store.schema_version == postgres.SCHEMA_VERSION
        assert [store.load_bytes(job_id) for job_id in ids] == before
        store.announce("w@h:1", ["shell"], 60)
        assert roster_of(store).unhandled(store.load(ids[0]))

    again = _jobctl("db", "migrate", "--store", pg_url)  # run twice: nothing more to do
    assert (again.returncode, again.stdout) == (0, f"schema_version={V} was={V}\n"), again.stderr
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE jobctl_workers")
    init = _jobctl("db", "init", "--store", pg_url)  # init on a store at this version adds it too
    assert (init.returncode, init.stdout) == (0, f"schema_version={V} was={V}\n"), init.stderr
    assert _table(pg_url)


def test_a_version_2_store_migrated_gets_the_table(pg_url: str) -> None:
    assert postgres.init(pg_url, target=2) == (0, 2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS jobctl_workers")
    assert postgres.migrate(pg_url) == (2, postgres.SCHEMA_VERSION)
    assert _table(pg_url)
