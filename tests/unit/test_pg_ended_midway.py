"""A driver error that leaves the connection unusable: the connection is let go, and the next call works.

A server restart ends each connection with ``terminating connection due to
administrator command`` (SQLSTATE 57P01). Read while libpq still took the
connection for alive, inside a pipeline, it left psycopg's pipeline
unable to exit: every statement after it failed with ``cannot exit pipeline
mode while busy``, never taken for a lost connection, and a worker stopped
with exit 10 (the PostgreSQL race test, under a restart). Now such an error,
or any error that leaves the connection in pipeline mode, closes it: the
call is the connection's failure (``Lost`` or, for a write under way,
``Unsure``), and the next call opens a new connection.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from jobctl import Record
from jobctl.store.postgres.session import Lost, Unsure


def _backend(store: Any) -> int:
    conn = store._connection()
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    conn.commit()
    return int(row[0])


def test_a_server_going_away_is_a_lost_connection_even_while_libpq_takes_it_for_alive(pg_store: Any) -> None:
    s = pg_store
    job = s.submit(Record(kind="k", spec={}))
    old = _backend(s)
    conn = s._connection()
    assert not conn.closed
    said = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    assert isinstance(s.session.failed(conn, said, committing=False), Lost)
    assert isinstance(s.session.failed(conn, said, committing=True), Unsure)
    assert conn.closed
    assert s.load(job).id == job and _backend(s) != old


def test_a_connection_an_error_left_in_pipeline_mode_is_let_go(pg_store: Any) -> None:
    s = pg_store
    job = s.submit(Record(kind="k", spec={}))
    old = _backend(s)
    conn = s._connection()
    conn.pgconn.enter_pipeline_mode()  # as a pipeline whose answers stopped coming leaves it
    refusal = s.session.failed(conn, psycopg.OperationalError("cannot exit pipeline mode while busy"), False)
    assert isinstance(refusal, Lost)
    assert conn.closed
    claimed = s.claim(job, "w", 30)  # a write on a new connection
    assert claimed.lease.epoch == 1 and _backend(s) != old


@pytest.mark.parametrize("committing", [False, True])
def test_an_ordinary_refusal_keeps_its_connection(pg_store: Any, committing: bool) -> None:
    s = pg_store
    conn = s._connection()
    refusal = s.session.failed(conn, psycopg.errors.UniqueViolation("duplicate key"), committing)
    assert type(refusal).__name__ == "Refused"
    assert not conn.closed
