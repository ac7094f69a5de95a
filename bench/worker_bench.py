"""How fast ``jobctl worker`` gets through trivial jobs, next to a plain shell loop of the same commands.

Run with ``make bench`` (``.venv/bin/python bench/worker_bench.py``). Three parts:

* throughput: 500 jobs running ``true`` (the binary, by its path) drained by
  one worker at concurrency 1 and 4, each timed from the first claim to the
  last final write; and the same 500 commands in a plain ``sh`` loop, the
  floor. jobctl's overhead per job is the difference between the two per-job
  times at concurrency 1: a fenced claim, a fenced final write (each an
  fsynced replace), the lease bookkeeping and the attempt log. The worker is
  the library's :class:`jobctl.worker.Worker` in this process, exactly what
  ``jobctl worker --drain`` runs after it has started; best of two runs each.
  The CPU the best drain used per job (this process; its children: the
  commands and the guardian, their parent) says what the machine's CPUs
  allow at most, whatever else runs on them.
* the same drain at concurrency 1 on a store that already holds 5,000
  finished jobs: picking the next job must not slow down as they pile up.
* the pick itself: after each job's writes, catch up with the store and
  choose the next job (``Board.refresh`` + ``Board.pick``), with 0 and with
  5,000 finished jobs in the store, mean of many. Both with inotify change
  notices (what the worker uses on Linux) and with the rescanning fallback
  (other systems), which lists the names but never re-reads a finished record.

Stores are made in temporary directories inside the repository (its file
system's fsync is the one that counts, as in store_bench.py) and removed;
``--store-dir DIR`` makes them in DIR instead, to part what a file system
costs from what jobctl does (bench/README.md, "Concurrency 4: the same
code on other file systems"). The first line names the file system.
The numbers are checked against the targets and printed; the exit
code is 0 either way: timing is not a test. About 45 s on 2 CPUs.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the working tree, even without an editable install

from jobctl import FileStore, Record  # noqa: E402 -- after the path fix above
from jobctl.board import Board  # noqa: E402
from jobctl.worker import Worker  # noqa: E402

JOBS = 500
FINISHED = 5_000
PICKS = 300
RUNS = 2
TARGETS = {1: 350.0, 4: 600.0}  # jobs/s on 2 CPUs
TRUE = shutil.which("true") or "/bin/true"


def submit_jobs(store: FileStore, n: int) -> None:
    for _ in range(n):
        store.submit(Record(kind="shell", spec={"argv": [TRUE]}))


def add_finished(store: FileStore, n: int) -> None:
    """``n`` records already ``complete``, written directly (the store refuses nothing about that)."""
    for _ in range(n):
        store.submit(Record(kind="shell", spec={"argv": [TRUE]}, state="complete"))


#: Where the stores are made (``--store-dir``): the repository's own file system unless told.
STORES = str(REPO)

#: CPU per job of the best drain at each concurrency, in ms: this process, and its children (commands, guardian).
CPU: dict[int, tuple[float, float]] = {}


def drain(concurrency: int, finished: int = 0) -> float:
    """Jobs per second for one worker draining JOBS trivial jobs; best of RUNS."""
    best = 0.0
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="jobctl-worker-bench-", dir=STORES) as tmp:
            store = FileStore(tmp)
            add_finished(store, finished)
            submit_jobs(store, JOBS)
            worker = Worker(store, concurrency=concurrency, poll_interval=0.5, ttl=30)
            before = os.times()
            start = time.perf_counter()
            summary = worker.run("drain")
            elapsed = time.perf_counter() - start
            after = os.times()
            if summary["complete"] != JOBS:
                raise SystemExit(f"worker bench: only {summary['complete']} of {JOBS} jobs completed: {summary.counts}")
            if JOBS / elapsed > best and not finished:
                own = after.user + after.system - before.user - before.system
                kids = after.children_user + after.children_system - before.children_user - before.children_system
                CPU[concurrency] = (own * 1000 / JOBS, kids * 1000 / JOBS)
            best = max(best, JOBS / elapsed)
    return best


def shell_loop() -> float:
    """Commands per second for the same command in a plain sh loop; best of RUNS."""
    script = f"i=0; while [ $i -lt {JOBS} ]; do {TRUE}; i=$((i+1)); done"
    best = 0.0
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(["sh", "-c", script], check=True)
        best = max(best, JOBS / (time.perf_counter() - start))
    return best


def pick_cost(finished: int, notices: bool) -> float:
    """Mean seconds of refresh + pick, each after one job's claim and final write."""
    with tempfile.TemporaryDirectory(prefix="jobctl-pick-bench-", dir=STORES) as tmp:
        store = FileStore(tmp)
        add_finished(store, finished)
        submit_jobs(store, PICKS + 1)
        board = Board(store, ["shell"], notices=notices)
        samples = []
        for _ in range(PICKS):
            start = time.perf_counter()
            board.refresh(force=not notices)
            got = board.pick(store.now()).record
            samples.append(time.perf_counter() - start)
            assert got is not None
            claimed = store.claim(got.id, "bench", 30)
            store.finish(got.id, claimed.lease.epoch, "complete")
        board.close()
        return statistics.fmean(samples)


def file_system(path: str) -> str:
    """The type of the file system ``path`` is on (its mount in ``/proc/self/mounts``), or ``unknown``."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    try:
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                point = fields[1].replace("\\040", " ")
                if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        pass
    return kind


def main(argv: list[str]) -> int:
    global STORES
    parser = argparse.ArgumentParser(description="jobctl worker --drain against a plain sh loop")
    parser.add_argument("--store-dir", metavar="DIR", help="make the stores in DIR (default: the repository)")
    STORES = parser.parse_args(argv).store_dir or STORES
    if not os.path.isdir(STORES):
        print(f"worker_bench.py: --store-dir {STORES}: not a directory", file=sys.stderr)
        return 2
    print(
        f"worker bench: {JOBS} jobs running {TRUE}; {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; best of {RUNS}; stores in {STORES} ({file_system(STORES)})"
    )
    floor = shell_loop()
    rates = {c: drain(c) for c in (1, 4)}
    per_floor = 1000 / floor
    print(f"  plain sh loop           {floor:8.1f} jobs/s  {per_floor:6.2f} ms/job")
    for c, rate in rates.items():
        per = 1000 / rate
        verdict = "met" if rate >= TARGETS[c] else "NOT met"
        print(
            f"  worker, concurrency {c}  {rate:8.1f} jobs/s  {per:6.2f} ms/job  "
            f"{floor / rate:4.1f}x the loop's time  target >= {TARGETS[c]:.0f}/s: {verdict}"
        )
    print(f"  jobctl overhead per job at concurrency 1: {1000 / rates[1] - per_floor:.2f} ms")
    cpus = os.cpu_count() or 1
    for c, (own, kids) in CPU.items():
        print(
            f"  CPU per job, concurrency {c}: worker {own:.2f} ms, its children {kids:.2f} ms "
            f"(the commands and the guardian); {cpus} CPUs give {cpus * 1000 / (own + kids):.0f} jobs/s "
            "at most"
        )
    crowded = drain(1, FINISHED)
    print(
        f"  concurrency 1 with {FINISHED} finished jobs in the store: {crowded:.1f} jobs/s "
        f"({crowded / rates[1]:.2f}x the empty store's rate)"
    )
    print(f"pick cost (catch up with the store + choose the next job), mean of {PICKS}:")
    for notices, label in ((True, "change notices (Linux)"), (False, "rescan fallback")):
        empty, full = pick_cost(0, notices), pick_cost(FINISHED, notices)
        print(
            f"  {label:<24} 0 finished {empty * 1e6:8.1f} us   {FINISHED} finished {full * 1e6:8.1f} us   "
            f"ratio {full / empty:5.2f}"
        )
    print(
        "  (the fallback here rescans at every pick, its worst case; a worker rescans at most once a poll interval.\n"
        "   A rescan lists the directory's names, which grow with the store, but never re-reads a finished record.)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
