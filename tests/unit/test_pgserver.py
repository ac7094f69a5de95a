"""The test server itself: it runs, it is PostgreSQL, and each test's schema is its own."""

from __future__ import annotations

import pytest


def test_server_answers_in_a_schema_of_its_own(pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int, current_schema()").fetchone()
        assert row is not None
        version, schema = row
        assert version >= 150000
        assert schema.startswith("t_")
        conn.execute("CREATE TABLE mine (x int)")


def test_schemas_do_not_leak_between_tests(pg_url: str) -> None:
    import psycopg

    # the table the test before made lives in another schema
    with psycopg.connect(pg_url, autocommit=True) as conn, pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT * FROM mine")
