"""What parts of a PostgreSQL claim-next + finish cycle cost: the update trigger, a notice, a record built.

Run with ``.venv/bin/python bench/pg_parts.py [ROUNDS]`` (default 15). Not
part of ``make bench``: it backs what bench/README.md ("PostgreSQL
benchmark") says the guarantees left against bare SQL cost. Against the
throwaway server the tests use (or ``$JOBCTL_TEST_PG_URL``):

* **trigger**: jobctl's cycle (``claim_next`` then ``finish``, one process,
  2,000 cycles) in fresh schemas, three ways taking turns, their order
  rotated each round: the store as ``db init`` makes it; with no trigger on
  ``UPDATE`` (which would leave another writer's update unannounced); and
  with the same gate on an ``AFTER UPDATE`` trigger instead (whose function
  would have to write another writer's row a second time; only its gate
  matters here, since jobctl's updates never pass it, so version 3's
  function stands in for it). Medians of the
  server process's CPU a cycle, and the client's.
* **notice**: a ``SELECT`` of a notice's payload as the statements build
  it, with and without the ``pg_notify`` that sends it, 3,000 statements a
  round: the server's CPU a statement.
* **record**: restoring a claimed row's record in Python, and laying a
  finish's answer over the row held (what ``PostgresStore`` does each
  cycle), in microseconds of this process's CPU; and, of the restore, the
  check that none of the columns a record needs is NULL.

The variants are made in the bench's own schemas only (``DROP TRIGGER``,
``CREATE TRIGGER``); nothing is asserted and the exit code is 0.
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

import pgserver  # noqa: E402 -- after the path fix above
from pg_profile import backend_cpu  # noqa: E402

from jobctl import Record  # noqa: E402
from jobctl.store import postgres  # noqa: E402
from jobctl.store.postgres import row as rows  # noqa: E402

CYCLES = 2000
NOTICES = 3000
RECORDS = 20000
#: The update trigger three ways: each a script run in a fresh store's schema before the cycles.
TRIGGERS = {
    "as made": [],
    "no UPDATE trigger": ["DROP TRIGGER jobctl_jobs_updated ON jobctl_jobs"],
    "AFTER UPDATE gate": [
        "DROP TRIGGER jobctl_jobs_updated ON jobctl_jobs",
        "CREATE TRIGGER jobctl_jobs_updated AFTER UPDATE ON jobctl_jobs"
        " FOR EACH ROW WHEN (NEW.revision <= OLD.revision) EXECUTE FUNCTION jobctl_written()",
    ],
}
#: A notice's payload as queries.sql builds it, selected with and without sending it.
PAYLOAD = "json_build_array(current_schema(), 'written', %(id)s::text, %(revision)s::bigint)::text"
NOTICE = {"with pg_notify": f"SELECT pg_notify('jobctl_jobs', {PAYLOAD})", "payload alone": f"SELECT {PAYLOAD}"}


def cycle(server: pgserver.Server, script: list[str]) -> tuple[float, float]:
    """Server and client CPU a cycle (us) of one process draining CYCLES jobs of a fresh store."""
    import psycopg

    url = server.fresh_schema()
    postgres.init(url)
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in script:
            conn.execute(statement.encode())  # this bench's own DDL, no parameters
    with postgres.PostgresStore(url) as store:
        for n in range(CYCLES):
            store.submit(Record(kind="k", spec={"n": n}))
        got = store.session.one("SELECT pg_backend_pid()", {})
        assert got is not None
        pid = int(got[0])
        server_cpu, client_cpu = backend_cpu(pid), time.process_time()
        while (rec := store.claim_next("bench", 30)) is not None:
            store.finish(rec.id, rec.lease.epoch, "complete")
        server_cpu, client_cpu = backend_cpu(pid) - server_cpu, time.process_time() - client_cpu
    return server_cpu * 1e6 / CYCLES, client_cpu * 1e6 / CYCLES


def triggers(server: pgserver.Server, rounds: int) -> None:
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in TRIGGERS}
    names = list(TRIGGERS)
    for n in range(rounds):
        for name in names[n % 3 :] + names[: n % 3]:
            got[name].append(cycle(server, TRIGGERS[name]))
    print(f"trigger: {CYCLES} cycles a way a round, {rounds} rounds, medians (us a cycle)")
    for name, samples in got.items():
        server_cpu = statistics.median(s for s, _ in samples)
        client_cpu = statistics.median(c for _, c in samples)
        print(f"  {name:<18} server {server_cpu:6.0f}  client {client_cpu:6.0f}")


def notices(server: pgserver.Server, rounds: int) -> None:
    import psycopg

    got: dict[str, list[float]] = {name: [] for name in NOTICE}
    with psycopg.connect(server.fresh_schema(), autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pid = int(row[0])
        for n in range(rounds):
            for name, query in NOTICE.items():
                before = backend_cpu(pid)
                for i in range(NOTICES):
                    conn.execute(query.encode(), {"id": f"1700000000000-{i:020x}", "revision": n * NOTICES + i})
                got[name].append((backend_cpu(pid) - before) * 1e6 / NOTICES)
    print(f"notice: {NOTICES} statements a way a round, {rounds} rounds, medians (server us a statement)")
    for name, samples in got.items():
        print(f"  {name:<18} {statistics.median(samples):6.1f}")


def records(server: pgserver.Server) -> None:
    url = server.fresh_schema()
    postgres.init(url)
    with postgres.PostgresStore(url) as store:
        store.submit(Record(kind="k", spec={"n": 1}))
        held: Any = store.session.one("SELECT j.* FROM jobctl_jobs j", {})
    assert held is not None
    now = datetime.now(timezone.utc)
    # The finish statement's answer: the revision, the columns it sets (rows.STEPS), its notice.
    answer = (held[rows.REVISION] + 1, "complete", None, None, [], None, None, now, None)
    start = time.process_time()
    for _ in range(RECORDS):
        rows.record_of(held)
    restored = (time.process_time() - start) * 1e6 / RECORDS
    start = time.process_time()
    for _ in range(RECORDS):
        rows.laid_over(held, "finish", answer)
    laid = (time.process_time() - start) * 1e6 / RECORDS
    required = rows._REQUIRED  # the columns no record holds NULL in, checked at every row read
    start = time.process_time()
    for _ in range(RECORDS):
        None in required(held)  # noqa: B015 -- the check itself is what is timed
    checked = (time.process_time() - start) * 1e6 / RECORDS
    print(f"record: a claimed row's record restored {restored:.1f} us, a finish's answer laid over it {laid:.1f} us")
    print(f"  of the restore, the check that no NOT NULL column is NULL: {checked:.2f} us")


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 15
    server = pgserver.for_bench("pg_parts")
    if server is None:
        return 0
    try:
        triggers(server, rounds)
        notices(server, max(3, rounds // 2))
        records(server)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
