"""What the PostgreSQL store's pick-and-finish cycle costs next to bare SQL, procrastinate and pgqueuer.

Run with ``make bench`` (``.venv/bin/python bench/pg_bench.py``). Against one
server -- the throwaway one the tests start (tests/pgserver.py), or the one
``JOBCTL_TEST_PG_URL`` names -- each measurement in a fresh schema:

* **cycle**: claim-next + finish-complete cycles per second through jobctl's
  Python API (``Store.claim_next`` then ``Store.finish``), with 1 and 4
  processes draining the same jobs, side by side with

  - (a) **bare SQL**, the floor: the same cycle with psycopg in a loop, one
    fenced ``UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED)
    RETURNING`` to claim and one ``UPDATE ... WHERE epoch = ...`` to finish;
  - (b) **procrastinate** and (c) **pgqueuer**, the two PostgreSQL job queues
    for Python (bench-only dependencies, the ``bench`` extra; a column is
    left out, saying so, when one is missing), their workers in drain mode
    running a no-op task, each with its own defaults (pgqueuer dequeues and
    logs completions in batches of 10).

  The ways run alternately, round after round, and the medians are printed.
* **pick**: the median cost of one claim-next (as the worker calls it) +
  finish, beside 0 finished jobs and beside 100,000 finished rows.
* **drain**: ``jobctl worker --drain`` (the command, start-up included) on 500
  jobs running ``true``, at concurrency 1 and 4, on PostgreSQL and on a
  directory store in the same run.

Medians and ratios, then the targets each met or missed; the exit code is 0
either way: timing is not a test. About four minutes on 2 busy CPUs.
``--cycle-only`` runs the cycle against bare SQL alone (no queues, no pick,
no drain): the figure to watch while working on the store's cycle.
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

JOBS = 2000  # enough that each way's start-up (pgqueuer's is seconds) is not what is measured
ROUNDS = 5  # the 1- and 4-process ratios to bare SQL sit near their 0.7 target; 3 rounds left a median swinging ±0.05
PICKS = 200
FINISHED = 100_000
DRAIN_JOBS = 500
BARE_TARGET = 0.7  # jobctl at least 0.7x the bare-SQL floor
QUEUE_TARGET = 1.0  # and at least as fast as procrastinate and pgqueuer
FLAT_TARGET = 1.1  # a pick beside 100,000 finished rows at most 1.1x one beside none
DRAIN_TARGET = 400.0  # worker --drain -j4 on PostgreSQL, jobs per second
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


def pgqueuer_drain(url: str, owner: str) -> None:
    import asyncio

    import psycopg
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    logging.getLogger("pgqueuer").setLevel(logging.ERROR)

    async def work() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        manager = QueueManager(Queries(PsycopgDriver(conn)))

        @manager.entrypoint("noop")
        async def noop(job: Any) -> None:
            return None

        await manager.run(mode=QueueExecutionMode.drain)
        await conn.close()

    asyncio.run(work())


def fill_pgqueuer(server: pgserver.Server) -> str:
    import asyncio

    import psycopg
    from pgqueuer import PsycopgDriver, Queries

    url = server.fresh_schema()

    async def fill() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        await queries.enqueue(["noop"] * JOBS, [None] * JOBS, [0] * JOBS)
        await conn.close()

    asyncio.run(fill())
    return url


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
        # pgqueuer deletes a job when it ends (its log keeps how): every row left is undone
        "pgqueuer": "SELECT count(*) FROM pgqueuer WHERE %s = %s",
    }[table]
    with psycopg.connect(url, autocommit=True) as conn:
        args = (done, done) if table == "pgqueuer" else (done,)
        row = conn.execute(query.encode(), args).fetchone()
    return 0 if row is None else int(row[0])


# -- pick cost ---------------------------------------------------------------------------------------


def pick_store(server: pgserver.Server, finished: int) -> str:
    """A fresh store beside ``finished`` complete rows, vacuumed so no autovacuum runs while picks are timed."""
    import psycopg

    url = server.fresh_schema()
    postgres.init(url)
    if finished:
        pgserver.add_rows(url, finished, "complete")
    with psycopg.connect(url, autocommit=True) as conn:
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


def installed(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def aim(targets: list[str], text: str, ok: bool) -> None:
    """One line of the closing list: a target, what was measured, and whether it was met."""
    targets.append(f"{text}: {'met' if ok else 'NOT met'}")


def cycles(server: pgserver.Server, targets: list[str], queues: bool = True) -> None:
    ways: dict[str, tuple[Drain, Callable[[pgserver.Server], str], str, str]] = {
        "jobctl": (jobctl_drain, fill_jobctl, "jobctl_jobs", "complete"),
        "bare": (bare_drain, fill_bare, "bare_jobs", "complete"),
    }
    if queues and installed("procrastinate"):
        ways["procrastinate"] = (procrastinate_drain, fill_procrastinate, "procrastinate_jobs", "succeeded")
    if queues and installed("pgqueuer"):
        ways["pgqueuer"] = (pgqueuer_drain, fill_pgqueuer, "pgqueuer", "none")
    print(
        f"PostgreSQL store: {JOBS} jobs, claim-next + finish cycles/s, median of {ROUNDS} rounds, "
        f"the ways alternating; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    for missing in ("procrastinate", "pgqueuer"):
        if queues and missing not in ways:
            print(f"  ({missing} is not installed: pip install -e '.[bench]'; its column is left out)")
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
        ratio = ours / med["bare"]
        print(f"    jobctl/bare SQL {ratio:.2f}")
        aim(targets, f"library cycle, {label}: jobctl/bare SQL {ratio:.2f} >= {BARE_TARGET}", ratio >= BARE_TARGET)
        for other in ("procrastinate", "pgqueuer"):
            if other in med:
                ratio = ours / med[other]
                print(f"    jobctl/{other} {ratio:.2f}")
                text = f"no-op jobs, {label}: jobctl/{other} {ratio:.2f} >= {QUEUE_TARGET}"
                aim(targets, text, ratio >= QUEUE_TARGET)


def main(argv: list[str]) -> int:
    cycle_only = argv == ["--cycle-only"]
    if argv and not cycle_only:
        print("usage: pg_bench.py [--cycle-only]", file=sys.stderr)
        return 2
    server = pgserver.for_bench("pg_bench")
    if server is None:
        return 0
    targets: list[str] = []
    try:
        cycles(server, targets, queues=not cycle_only)
        if not cycle_only:
            the_rest(server, targets)
    finally:
        server.stop()
    print("targets:")
    for line in targets:
        print(f"  {line}")
    return 0


def the_rest(server: pgserver.Server, targets: list[str]) -> None:
    """The pick beside finished rows, and ``jobctl worker --drain`` on PostgreSQL and on a directory."""
    empty, full = pick_costs(server, (0, FINISHED))
    flat = full / empty
    print(
        f"  pick (as the worker picks) + finish, median of {PICKS}, two stores taking turns: "
        f"{empty * 1e3:.2f} ms beside 0 finished jobs, "
        f"{full * 1e3:.2f} ms beside {FINISHED:,} (ratio {flat:.2f}; flat is 1.0)"
    )
    aim(
        targets,
        f"pick + finish beside {FINISHED:,} finished rows {flat:.2f}x <= {FLAT_TARGET}",
        flat <= FLAT_TARGET,
    )
    for concurrency in (1, 4):
        pg, directory = drain_pg(server, concurrency), drain_dir(concurrency)
        print(
            f"  jobctl worker --drain, {DRAIN_JOBS} jobs running {TRUE}, concurrency {concurrency}: "
            f"PostgreSQL {pg:6.1f} jobs/s, directory {directory:6.1f} jobs/s (ratio {pg / directory:.2f})"
        )
        aim(
            targets,
            f"worker --drain -j{concurrency}: PostgreSQL/directory {pg / directory:.2f} >= 1.0",
            pg >= directory,
        )
        if concurrency == 4:
            aim(
                targets,
                f"worker --drain -j4 on PostgreSQL {pg:.0f} jobs/s >= {DRAIN_TARGET:.0f}",
                pg >= DRAIN_TARGET,
            )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
