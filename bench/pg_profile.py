"""Where a PostgreSQL claim-next + finish cycle's CPU goes: the client's and its server process's, per cycle.

Run with ``.venv/bin/python bench/pg_profile.py [CYCLES] [--profile]``
(default 3000 cycles). Not part of ``make bench``: it explains
``pg_bench.py``'s figures (bench/README.md, "PostgreSQL benchmark"). With
four processes on two CPUs the cycle is bound by CPU, so what a cycle costs
the client and the server together is what the 4-process ratio to bare SQL
is made of.

Against the throwaway server the tests use (or ``$JOBCTL_TEST_PG_URL``), one
process drains CYCLES jobs two ways in fresh schemas: jobctl's cycle
(``claim_next`` then ``finish``, as ``pg_bench.py``'s ``jobctl_drain``) and
bare SQL's (``bare_drain``). For each: wall time, this process's CPU
(``time.process_time``) and the CPU of its connection's server process
(``/proc/PID/schedstat`` of ``pg_backend_pid()``, nanoseconds on a CPU; or
``/proc/PID/stat``'s utime + stime), each per cycle in microseconds.
``--profile`` adds cProfile's top functions of jobctl's cycle by their own
time (which slows the cycle: compare functions, not the total).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

import pg_bench  # noqa: E402 -- after the path fix above
import pgserver  # noqa: E402

from jobctl import Record  # noqa: E402
from jobctl.store import postgres  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """Seconds of CPU the server process ``pid`` has used.

    ``/proc/PID/schedstat``'s time on a CPU, in nanoseconds, where the kernel
    keeps it; else ``/proc/PID/stat``'s user + system time, in clock ticks
    (10 ms: a run of a few thousand cycles is then read to ~5 us a cycle).
    """
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


def measured(name: str, cycles: int, backend: Callable[[], int], run: Callable[[], int]) -> None:
    pid = backend()
    wall, cpu, server = time.perf_counter(), time.process_time(), backend_cpu(pid)
    done = run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    server = backend_cpu(pid) - server
    assert done == cycles, f"{name} ran {done} cycles of {cycles}"
    per = 1e6 / cycles
    print(
        f"  {name:<7} wall {wall * per:6.0f} us/cycle  client CPU {cpu * per:6.0f} us  "
        f"server CPU {server * per:6.0f} us  together {(cpu + server) * per:6.0f} us"
    )


def jobctl_way(server: pgserver.Server, cycles: int, profile: cProfile.Profile | None) -> None:
    url = server.fresh_schema()
    postgres.init(url)
    store = postgres.PostgresStore(url)
    for n in range(cycles):
        store.submit(Record(kind="k", spec={"n": n}))

    def backend() -> int:
        got = store.session.one("SELECT pg_backend_pid()", {})
        assert got is not None
        return int(got[0])

    def run() -> int:
        done = 0
        if profile is not None:
            profile.enable()
        while (rec := store.claim_next("bench", 30)) is not None:
            store.finish(rec.id, rec.lease.epoch, "complete")
            done += 1
        if profile is not None:
            profile.disable()
        return done

    with store:
        measured("jobctl", cycles, backend, run)


def bare_way(server: pgserver.Server, cycles: int) -> None:
    import psycopg

    pg_bench.JOBS = cycles
    url = pg_bench.fill_bare(server)
    with psycopg.connect(url, autocommit=True) as conn:

        def backend() -> int:
            got = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert got is not None
            return int(got[0])

        def run() -> int:
            done = 0
            while (row := conn.execute(pg_bench.BARE_CLAIM, {"owner": "bench"}).fetchone()) is not None:
                conn.execute(pg_bench.BARE_FINISH, {"id": row[0], "epoch": row[1]}).fetchone()
                done += 1
            return done

        measured("bare", cycles, backend, run)


def main(argv: list[str]) -> int:
    profiling = "--profile" in argv
    rest = [arg for arg in argv if arg != "--profile"]
    cycles = int(rest[0]) if rest else 3000
    server = pgserver.for_bench("pg_profile")
    if server is None:
        return 0
    profile: Any = cProfile.Profile(time.process_time) if profiling else None
    try:
        print(f"one process, {cycles} claim-next + finish cycles each way; load average {os.getloadavg()[0]:.1f}")
        for _ in range(2):  # the ways alternating, twice
            jobctl_way(server, cycles, None)
            bare_way(server, cycles)
        if profile is not None:
            jobctl_way(server, cycles, profile)
            print("jobctl's cycle under cProfile, by own time (tottime):")
            pstats.Stats(profile).sort_stats("tottime").print_stats(30)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
