"""A whole worker tree stopped past its lease, its job adopted, then woken: ``python _wake.py STORE TRIALS TTL DIR``.

What a frozen host or container does to a worker: every process of the
tree -- the worker, its guardian, the job's process group -- is stopped
with SIGSTOP, held past the lease until a second worker has adopted the job
(its claim raises the epoch and its own run of the job starts), and then
every process is woken with SIGCONT, ancestors first (``kill -CONT`` with
the tree's pids in order, as a thawed cgroup wakes its tasks in the order they
joined). The job appends ``EPOCH PID`` to a steps file every 50 ms.

A trial counts a *late step* when a line of the old epoch follows the
successor's first line: the old run did something beside its successor.
The *window* is the time from the first SIGCONT to the death of the old
job's process group leader (a pidfd on it turns readable), which happens
only by a kill: the job loops forever.

STORE is a directory (one a trial is made below it) or a database URL; DIR
is where the steps files go. Prints one JSON object of figures: trials,
late steps, windows in milliseconds (each, median, worst).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jobctl import Record, open_store
from jobctl.errors import JobError
from jobctl.store.base import Store

HERE = Path(__file__).resolve().parent
DRIVER = str(HERE / "_driver.py")

#: The job: one line a step, every 50 ms, for ever.
STEP = 'while :; do echo "$JOB_EPOCH $$" >> "$STEPS"; sleep 0.05; done'


def start_worker(root: str, ttl: float) -> subprocess.Popen[bytes]:
    options = {"concurrency": 1, "ttl": ttl, "grace": 0.2, "poll_interval": 0.02}
    return subprocess.Popen(
        [sys.executable, DRIVER, root, "loop", json.dumps(options)],
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )


def steps(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            out.append((int(parts[0]), int(parts[1])))
    return out


def wait(check: Any, limit: float, what: str) -> Any:
    deadline = time.monotonic() + limit
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)


def children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(p) for p in fh.read().split())
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def guardian_of(worker: int) -> int:
    """The worker's guardian process; 0 while it has none (yet)."""
    for pid in children(worker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"\0-I\0-S\0-c\0" in fh.read():
                    return pid
        except (FileNotFoundError, ProcessLookupError):
            pass
    return 0


def end(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker (its guardian then kills what it guarded) and reap it."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass
    proc.wait(10)


def trial(store: Store, root: str, place: Path, ttl: float, n: int) -> dict[str, Any]:
    """One stop, adoption and wake; returns whether the old run made a late step, and the window in ms."""
    path = place / f"steps-{n}"
    job = store.submit(Record(kind="shell", spec={"argv": ["sh", "-c", STEP], "env": {"STEPS": str(path)}}))
    first = start_worker(root, ttl)
    second: subprocess.Popen[bytes] | None = None
    try:
        epoch, pid = wait(lambda: steps(path)[:1], 30, "the first run's first step")[0]
        guardian = wait(lambda: guardian_of(first.pid), 5, "the guardian")
        pidfd = os.pidfd_open(pid)
        # The whole tree, the job's group first: nothing of it may act while the rest is stopped.
        os.killpg(pid, signal.SIGSTOP)
        os.kill(guardian, signal.SIGSTOP)
        os.kill(first.pid, signal.SIGSTOP)
        second = start_worker(root, ttl)
        successor = wait(lambda: [e for e, _ in steps(path) if e > epoch], 15 + 2 * ttl, "the adopter's first step")
        assert store.load(job).lease.epoch == successor[0]
        woken = time.monotonic()
        order = os.environ.get("WAKE_ORDER", "wgj")
        for who in order:  # ancestors first, then the job's group
            if who == "j":
                os.killpg(pid, signal.SIGCONT)
            else:
                os.kill(first.pid if who == "w" else guardian, signal.SIGCONT)
        died = bool(select.select([pidfd], [], [], 10.0)[0])
        window = time.monotonic() - woken
        os.close(pidfd)
        time.sleep(0.3)  # a step the old run made after all would be in the file by now
        lines = steps(path)
        after = lines.index(next(line for line in lines if line[0] > epoch))
        late = [line for line in lines[after:] if line[0] == epoch]
        return {"late_steps": len(late), "died": died, "window_ms": round(window * 1000, 2)}
    finally:
        for proc in (first, second):
            if proc is not None:
                end(proc)
        with contextlib.suppress(JobError):
            store.cancel(job, "wake-trial")  # the next trial's workers leave it alone


def campaign(root: str, place: Path, trials: int, ttl: float) -> dict[str, Any]:
    store = open_store(root)
    try:
        runs = [trial(store, root, place, ttl, n) for n in range(trials)]
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
    windows = sorted(r["window_ms"] for r in runs)
    return {
        "trials": trials,
        "late_steps": sum(r["late_steps"] for r in runs),
        "trials_with_late_steps": sum(1 for r in runs if r["late_steps"]),
        "all_died": all(r["died"] for r in runs),
        "window_ms": [r["window_ms"] for r in runs],
        "window_median_ms": windows[len(windows) // 2],
        "window_worst_ms": windows[-1],
    }


def main() -> None:
    root, trials, ttl, place = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
    sys.stdout.write(json.dumps(campaign(root, place, trials, ttl)) + "\n")


if __name__ == "__main__":
    main()
