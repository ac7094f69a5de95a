"""What the PostgreSQL store's pick-and-finish cycle costs next to the bare SQL it cannot avoid.

Run with ``make bench`` (``.venv/bin/python bench/pg_bench.py``). Against one
server -- the throwaway one the tests start (tests/pgserver.py), or the one
``JOBCTL_TEST_PG_URL`` names -- in fresh schemas:

* **cycle**: claim-next + finish-complete cycles per second through jobctl's
  Python API (``Store.claim_next`` then ``Store.finish``), with 1 and 4
  processes draining the same jobs, next to the **floor**: the same cycle as
  bare SQL with psycopg in a loop (one ``UPDATE ... WHERE id = (SELECT ...
  FOR UPDATE SKIP LOCKED) RETURNING`` to claim, one fenced ``UPDATE ...
  WHERE epoch = ...`` to finish), on the same server, measured alternately.
* **pick**: the median cost of one claim-next + finish with no finished jobs
  beside it and with 100,000 finished rows.

Medians and ratios only; the exit code is 0 either way: timing is not a test.
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import pgserver  # noqa: E402 -- after the path fix above

from jobctl import Record  # noqa: E402
from jobctl.store import postgres  # noqa: E402

JOBS = 600
ROUNDS = 3
PICKS = 200
FINISHED = 100_000
CYCLE_TARGET = 0.7  # jobctl at least 0.7x the bare-SQL floor

BARE_SCHEMA = """
CREATE TABLE bare_jobs (
    id text COLLATE "C" PRIMARY KEY, state text NOT NULL, epoch bigint NOT NULL, owner text NOT NULL,
    expires_at timestamptz, created_at timestamptz NOT NULL
);
CREATE INDEX bare_startable ON bare_jobs (created_at, id) WHERE state IN ('pending', 'running');
"""
BARE_CLAIM = """
UPDATE bare_jobs SET state = 'running', epoch = epoch + 1, owner = %(owner)s,
       expires_at = clock_timestamp() + interval '30 seconds'
WHERE id = (SELECT id FROM bare_jobs WHERE state IN ('pending', 'running')
              AND (owner = '' OR expires_at <= clock_timestamp())
            ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, epoch
"""
BARE_FINISH = "UPDATE bare_jobs SET state = 'complete' WHERE id = %(id)s AND epoch = %(epoch)s RETURNING id"


def jobctl_drain(url: str, owner: str) -> None:
    with postgres.PostgresStore(url) as store:
        while (rec := store.claim_next(owner, 30)) is not None:
            store.finish(rec.id, rec.lease.epoch, "complete")


def bare_drain(url: str, owner: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        while (row := conn.execute(BARE_CLAIM, {"owner": owner}).fetchone()) is not None:
            conn.execute(BARE_FINISH, {"id": row[0], "epoch": row[1]}).fetchone()


def fill_jobctl(server: pgserver.Server) -> str:
    url = server.fresh_schema()
    postgres.init(url)
    with postgres.PostgresStore(url) as store:
        for n in range(JOBS):
            store.submit(Record(kind="k", spec={"n": n}))
    return url


def fill_bare(server: pgserver.Server) -> str:
    import psycopg

    url = server.fresh_schema()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(BARE_SCHEMA)
        conn.execute(
            "INSERT INTO bare_jobs SELECT 'j' || lpad(n::text, 6, '0'), 'pending', 0, '', NULL,"
            " clock_timestamp() FROM generate_series(1, %s) AS n",
            (JOBS,),
        )
    return url


def drained_per_second(drain: object, url: str, processes: int) -> float:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=drain, args=(url, f"bench-{n}")) for n in range(processes)]  # type: ignore[arg-type]
    start = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return JOBS / (time.perf_counter() - start)


def pick_cost(server: pgserver.Server, finished: int) -> float:
    import psycopg

    url = server.fresh_schema()
    postgres.init(url)
    if finished:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO jobctl_jobs (id, data, state, kind, epoch, owner, want, after, scheduled, created_at)"
                " SELECT 'done-' || n, '', 'complete', 'k', 1, '', 'run', '{}', true,"
                " now() - n * interval '1 millisecond' FROM generate_series(1, %s) AS n",
                (finished,),
            )
            conn.execute("ANALYZE jobctl_jobs")
    samples = []
    with postgres.PostgresStore(url) as store:
        for n in range(PICKS):
            store.submit(Record(kind="k", spec={"n": n}))
            start = time.perf_counter()
            rec = store.claim_next("bench", 30)
            assert rec is not None
            store.finish(rec.id, rec.lease.epoch, "complete")
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    url = __import__("os").environ.get(pgserver.URL_ENV, "")
    if url:
        server = pgserver.Server(url)
    else:
        bin = pgserver.bindir()
        if bin is None:
            print("pg_bench: skipped: no PostgreSQL server binaries (apt-get install postgresql)")
            return 0
        server = pgserver.Server.start(bin)
    try:
        print(f"PostgreSQL store: {JOBS} jobs, claim-next + finish, median of {ROUNDS} rounds, alternating")
        for processes in (1, 4):
            ours, floor = [], []
            for _ in range(ROUNDS):
                ours.append(drained_per_second(jobctl_drain, fill_jobctl(server), processes))
                floor.append(drained_per_second(bare_drain, fill_bare(server), processes))
            o, f = statistics.median(ours), statistics.median(floor)
            verdict = "meets" if o / f >= CYCLE_TARGET else "MISSES"
            print(
                f"  {processes} process{'es' if processes > 1 else ''}: jobctl {o:7.0f} cycles/s, "
                f"bare SQL {f:7.0f} cycles/s, ratio {o / f:.2f} ({verdict} the {CYCLE_TARGET}x target)"
            )
        empty, full = pick_cost(server, 0), pick_cost(server, FINISHED)
        print(
            f"  pick + finish, median of {PICKS}: {empty * 1e3:.2f} ms beside 0 finished jobs, "
            f"{full * 1e3:.2f} ms beside {FINISHED:,} (ratio {full / empty:.2f}; flat is 1.0)"
        )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
