"""What the PostgreSQL store's pick-and-finish cycle costs next to bare SQL and to procrastinate.

Run with ``make bench`` (``.venv/bin/python bench/pg_bench.py``). Against one
server -- the throwaway one the tests start (tests/pgserver.py), or the one
``JOBCTL_TEST_PG_URL`` names -- each measurement in a fresh schema:

* **cycle**: claim-next + finish-complete cycles per second through jobctl's
  Python API (``Store.claim_next`` then ``Store.finish``), with 1 and 4
  processes draining the same jobs, side by side with

  - (a) **bare SQL**, the floor: the same cycle with psycopg in a loop, one
    fenced ``UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED)
    RETURNING`` to claim and one ``UPDATE ... WHERE epoch = ...`` to finish;
  - (b) **procrastinate** (a bench-only dependency: ``pip install
    procrastinate``; the section says so and skips it when missing), its
    workers (``wait=False``, concurrency 1 each) running a no-op task;
  - and, to show what bounds jobctl, **bare SQL in jobctl's shape**: jobctl's
    own statements with no Python between them, each step a locked read then
    a write that commits, two round trips per step (a step cannot be one
    statement: the contract's checks run on the row between read and write).

  The four run alternately, round after round, and the medians are printed.
* **pick**: the median cost of one claim-next (as the worker calls it) +
  finish, beside 0 finished jobs and beside 100,000 finished rows.
* **drain**: ``jobctl worker --drain`` (the command, start-up included) on 500
  jobs running ``true``, at concurrency 1 and 4, on PostgreSQL and on a
  directory store in the same run.

Medians and ratios only; the exit code is 0 either way: timing is not a test.
About six minutes on 2 busy CPUs.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import pgserver  # noqa: E402 -- after the path fix above

from jobctl import FileStore, Record  # noqa: E402
from jobctl.store import postgres  # noqa: E402

JOBS = 400
ROUNDS = 3
PICKS = 200
FINISHED = 100_000
DRAIN_JOBS = 500
BARE_TARGET = 0.7  # jobctl at least 0.7x the bare-SQL floor
PROCRASTINATE_TARGET = 1.5  # and at least 1.5x procrastinate
TRUE = shutil.which("true") or "/bin/true"
JOBCTL = str(Path(sys.executable).with_name("jobctl"))

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
# jobctl's shape without jobctl's Python: the same pick and locked read, then a write of the columns
SHAPED_CLAIM = (
    "UPDATE jobctl_jobs SET data = %(data)s, state = 'running', owner = %(owner)s, epoch = epoch + 1,"
    " expires_at = %(now)s + interval '30 seconds' WHERE id = %(id)s"
)
SHAPED_FINISH = "UPDATE jobctl_jobs SET data = %(data)s, state = 'complete' WHERE id = %(id)s"

Drain = Callable[[str, str], None]


# -- the cycle, four ways ----------------------------------------------------------------------------


def jobctl_drain(url: str, owner: str) -> None:
    with postgres.PostgresStore(url) as store:
        while (rec := store.claim_next(owner, 30)) is not None:
            store.finish(rec.id, rec.lease.epoch, "complete")


def bare_drain(url: str, owner: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        while (row := conn.execute(BARE_CLAIM, {"owner": owner}).fetchone()) is not None:
            conn.execute(BARE_FINISH, {"id": row[0], "epoch": row[1]}).fetchone()


def shaped_drain(url: str, owner: str) -> None:
    import psycopg

    q = postgres.Q
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            with conn.pipeline():  # one transaction up to the Sync, as PostgresStore writes
                row = conn.execute(
                    q["next_runnable"], {"now": None, "kinds": None, "passed": []}, binary=True
                ).fetchone()
                if row is None:
                    return
                conn.execute(SHAPED_CLAIM, {"data": row[1], "owner": owner, "now": row[2], "id": row[0]})
            with conn.pipeline():
                got = conn.execute(q["load_for_update"], {"id": row[0]}, binary=True).fetchone()
                assert got is not None
                conn.execute(SHAPED_FINISH, {"data": got[0], "id": row[0]})


def procrastinate_app(url: str) -> tuple[Any, Any]:
    import procrastinate

    # its warning that the app lives in __main__ is about imports by path, moot here
    logging.getLogger("procrastinate").setLevel(logging.ERROR)

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue="bench")
    async def noop() -> None:  # a coroutine: procrastinate runs a plain function in a thread
        return None

    return app, noop


def procrastinate_drain(url: str, owner: str) -> None:
    app, _ = procrastinate_app(url)
    app.run_worker(
        queues=["bench"], name=owner, concurrency=1, wait=False, install_signal_handlers=False, listen_notify=False
    )


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


def fill_procrastinate(server: pgserver.Server) -> str:
    url = server.fresh_schema()
    app, noop = procrastinate_app(url)
    with app.open():
        app.schema_manager.apply_schema()
        noop.batch_defer(*[{} for _ in range(JOBS)])
    return url


def drained_per_second(drain: Drain, url: str, processes: int) -> float:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=drain, args=(url, f"bench-{n}")) for n in range(processes)]
    start = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    elapsed = time.perf_counter() - start
    if any(proc.exitcode != 0 for proc in procs):
        raise SystemExit(f"pg_bench: a {drain.__name__} process failed")
    return JOBS / elapsed


def left_undone(server: pgserver.Server, url: str, table: str, done: str) -> int:
    """Jobs of the drained schema not finished: every way must finish all of them for its rate to count."""
    import psycopg

    query = {
        "jobctl_jobs": "SELECT count(*) FROM jobctl_jobs WHERE state <> %s",
        "bare_jobs": "SELECT count(*) FROM bare_jobs WHERE state <> %s",
        "procrastinate_jobs": "SELECT count(*) FROM procrastinate_jobs WHERE status::text <> %s",
    }[table]
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query.encode(), (done,)).fetchone()
    return 0 if row is None else int(row[0])


# -- pick cost ---------------------------------------------------------------------------------------


def pick_store(server: pgserver.Server, finished: int) -> str:
    """A fresh store beside ``finished`` complete rows, vacuumed so no autovacuum runs while picks are timed."""
    import psycopg

    url = server.fresh_schema()
    postgres.init(url)
    with psycopg.connect(url, autocommit=True) as conn:
        if finished:
            conn.execute(
                "INSERT INTO jobctl_jobs (id, data, state, kind, epoch, owner, want, after, scheduled, created_at)"
                " SELECT 'done-' || n, '', 'complete', 'k', 1, '', 'run', '{}', true,"
                " now() - n * interval '1 millisecond' FROM generate_series(1, %s) AS n",
                (finished,),
            )
        conn.execute("VACUUM (ANALYZE) jobctl_jobs")
    return url


def pick_costs(server: pgserver.Server, counts: tuple[int, ...]) -> list[float]:
    """Median seconds of one claim-next + finish beside each count of finished rows, the stores taking turns."""
    stores = [postgres.PostgresStore(pick_store(server, finished)) for finished in counts]
    samples: list[list[float]] = [[] for _ in counts]
    try:
        for n in range(PICKS):
            for store, taken in zip(stores, samples, strict=True):
                store.submit(Record(kind="k", spec={"n": n}))
                start = time.perf_counter()
                rec = store.claim_next("bench", 30, skipped=[])  # as the worker picks: malformed jobs named too
                assert rec is not None
                store.finish(rec.id, rec.lease.epoch, "complete")
                taken.append(time.perf_counter() - start)
    finally:
        for store in stores:
            store.close()
    return [statistics.median(taken) for taken in samples]


# -- jobctl worker --drain -----------------------------------------------------------------------------


def worker_drain(store_arg: str, store: Any, concurrency: int) -> float:
    """Jobs per second of ``jobctl worker --drain`` on DRAIN_JOBS jobs running ``true``, start-up included."""
    for _ in range(DRAIN_JOBS):
        store.submit(Record(kind="shell", spec={"argv": [TRUE]}))
    argv = [JOBCTL, "worker", "--drain", "--concurrency", str(concurrency), "--ttl", "30"]
    env = dict(os.environ, JOB_STORE=store_arg)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"pg_bench: {' '.join(argv[1:3])} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    left = [rec.id for rec in store.list() if rec.state != "complete"]
    if left:
        raise SystemExit(f"pg_bench: the drain left {len(left)} jobs unfinished")
    return DRAIN_JOBS / elapsed


def drain_pg(server: pgserver.Server, concurrency: int) -> float:
    url = server.fresh_schema()
    postgres.init(url)
    with postgres.PostgresStore(url) as store:
        return worker_drain(url, store, concurrency)


def drain_dir(concurrency: int) -> float:
    with tempfile.TemporaryDirectory(prefix="jobctl-pg-bench-", dir=REPO) as tmp:
        return worker_drain(tmp, FileStore(tmp), concurrency)


# -- the report ---------------------------------------------------------------------------------------


def has_procrastinate() -> bool:
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    url = os.environ.get(pgserver.URL_ENV, "")
    if url:
        server = pgserver.Server(url)
    else:
        bin = pgserver.bindir()
        if bin is None:
            print("pg_bench: skipped: no PostgreSQL server binaries (apt-get install postgresql)")
            return 0
        server = pgserver.Server.start(bin)
    try:
        ways: dict[str, tuple[Drain, Callable[[pgserver.Server], str], str, str]] = {
            "jobctl": (jobctl_drain, fill_jobctl, "jobctl_jobs", "complete"),
            "bare": (bare_drain, fill_bare, "bare_jobs", "complete"),
            "shaped": (shaped_drain, fill_jobctl, "jobctl_jobs", "complete"),
        }
        if has_procrastinate():
            ways["procrastinate"] = (procrastinate_drain, fill_procrastinate, "procrastinate_jobs", "succeeded")
        print(
            f"PostgreSQL store: {JOBS} jobs, claim-next + finish cycles/s, median of {ROUNDS} rounds, "
            f"the ways alternating; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
        )
        if "procrastinate" not in ways:
            print("  (procrastinate is not installed: pip install procrastinate; its column is left out)")
        for processes in (1, 4):
            rates: dict[str, list[float]] = {name: [] for name in ways}
            for _ in range(ROUNDS):
                for name, (drain, fill, table, done) in ways.items():
                    target = fill(server)
                    rates[name].append(drained_per_second(drain, target, processes))
                    if (undone := left_undone(server, target, table, done)) != 0:
                        raise SystemExit(f"pg_bench: {name} left {undone} of {JOBS} jobs undone")
            med = {name: statistics.median(r) for name, r in rates.items()}
            ours = med["jobctl"]
            label = f"{processes} process{'es' if processes > 1 else ''}"
            cells = "  ".join(f"{name} {rate:6.0f}" for name, rate in med.items())
            print(f"  {label:<11} {cells}")
            verdict = "meets" if ours / med["bare"] >= BARE_TARGET else "MISSES"
            print(f"    jobctl/bare SQL {ours / med['bare']:.2f} ({verdict} the {BARE_TARGET}x target)")
            if "procrastinate" in med:
                ratio = ours / med["procrastinate"]
                verdict = "meets" if ratio >= PROCRASTINATE_TARGET else "MISSES"
                print(f"    jobctl/procrastinate {ratio:.2f} ({verdict} the {PROCRASTINATE_TARGET}x target)")
            print(
                f"    bound: bare SQL in jobctl's shape / bare SQL {med['shaped'] / med['bare']:.2f}; "
                f"jobctl / that shape {ours / med['shaped']:.2f}"
            )
        empty, full = pick_costs(server, (0, FINISHED))
        print(
            f"  pick (as the worker picks) + finish, median of {PICKS}, two stores taking turns: "
            f"{empty * 1e3:.2f} ms beside 0 finished jobs, "
            f"{full * 1e3:.2f} ms beside {FINISHED:,} (ratio {full / empty:.2f}; flat is 1.0)"
        )
        for concurrency in (1, 4):
            pg, directory = drain_pg(server, concurrency), drain_dir(concurrency)
            print(
                f"  jobctl worker --drain, {DRAIN_JOBS} jobs running {TRUE}, concurrency {concurrency}: "
                f"PostgreSQL {pg:6.1f} jobs/s, directory {directory:6.1f} jobs/s (ratio {pg / directory:.2f})"
            )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
