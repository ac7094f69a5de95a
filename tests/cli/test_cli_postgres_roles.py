"""The least-privilege worker role of docs/howto/hosts.md: enough to work, nothing more."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote

import pytest

from jobctl import Record
from jobctl.errors import Refused


def test_the_documented_worker_role_works_and_cannot_do_more(pg_store: Any) -> None:
    import psycopg

    from jobctl.store import postgres

    admin = pg_store.url
    role = "w_" + uuid.uuid4().hex[:12]
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
        assert row is not None
        schema = row[0]
        empty = schema + "_empty"
        # The grants of docs/howto/hosts.md, for this test's schema and a role of its own
        # (names made here, of [a-z0-9_] only), plus an empty schema it may use but not create in.
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON {schema}.jobctl_schema TO {role}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE ON {schema}.jobctl_jobs TO {role}")
        conn.execute(f"CREATE SCHEMA {empty}")
        conn.execute(f"GRANT USAGE ON SCHEMA {empty} TO {role}")
    try:
        worker_url = admin.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
        assert worker_url != admin
        with postgres.PostgresStore(worker_url) as store:
            notices = store.notices()  # LISTEN needs no grant; the trigger fires for the role's writes
            job_id = store.submit(Record(kind="k", spec={"n": 1}))
            assert notices.read() == ({job_id}, set())
            notices.close()
            mine = store.claim_next("host-a", 30)
            assert mine is not None and mine.id == job_id
            store.progress(job_id, mine.lease.epoch, 1, {"at": 1})
            store.finish(job_id, mine.lease.epoch, "complete")
            assert store.load(job_id).state == "complete"
        # nothing more: no deleting records, no creating a schema's tables
        with psycopg.connect(worker_url, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM jobctl_jobs")
        elsewhere = worker_url.rsplit("options=", 1)[0] + "options=" + quote(f"-csearch_path={empty}", safe="")
        with pytest.raises(Refused, match="permission denied"):
            postgres.init(elsewhere)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {empty} CASCADE")
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
