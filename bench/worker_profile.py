"""Where one job's time goes in ``jobctl worker --drain``: each step of its path timed, and each thread's CPU.

Run with ``.venv/bin/python bench/worker_profile.py [CONCURRENCY] [JOBS]``
(default 1 and 500). Not part of ``make bench``: it explains the worker
bench's figures (bench/README.md, "One job's path"), it does not measure
against a floor.

The worker is :class:`jobctl.worker.Worker` in this process, draining JOBS
jobs running ``true`` on a directory store made inside the repository (its
file system is the one that counts). Each step a slot takes for a job is
wrapped in ``time.perf_counter_ns`` (wall time, on the slot threads only),
so the table reads down one job's path: the record writes, the attempt's log,
the start through the guardian, the child's run, its end and the result. Then
the CPU and context switches of each thread (``/proc/self/task``), the calls of
the loop and its board a job, and the children's (the
commands and the guardian, their parent). Wrapping
costs a few microseconds a call: compare steps, not the total with the bench.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the working tree, even without an editable install

from jobctl import FileStore, Record, lock  # noqa: E402 -- after the path fix above
from jobctl.board import Board  # noqa: E402
from jobctl.guardian import Guardian  # noqa: E402
from jobctl.keeper import Ending, Keeper  # noqa: E402
from jobctl.runner import attempt, child  # noqa: E402
from jobctl.slots import Slots  # noqa: E402
from jobctl.worker import Worker  # noqa: E402

TRUE = shutil.which("true") or "/bin/true"
TOTAL: collections.Counter[str] = collections.Counter()
CALLS: collections.Counter[str] = collections.Counter()

#: (owner, attribute, what the line says), in the order of a job's path.
STEPS: list[tuple[Any, str, str]] = [
    (Ending, "finish", "final write: finish + claim of the next job"),
    (lock, "change", "  of which record writes (each: lock, read, stage + fsync, rename, fsync dir)"),
    (attempt.AttemptFiles, "open_log", "attempt log: created in logs/ (held open), its header"),
    (child, "seal", "seal (non-dumpable)"),
    (attempt.AttemptFiles, "result_ready", "$JOB_RESULT's name cleared"),
    (child, "child_env", "the job's environment"),
    (child, "executable", "the command looked up"),
    (Guardian, "start", "start: one message to the guardian, which spawns it and sends its pid back"),
    (Keeper, "_watch", "the child runs: exec of the command, exit, its status from the guardian"),
    (child.ChildWork, "end", "end: log footer, channel and pidfd closed"),
    (child.ChildWork, "completing", "$JOB_RESULT looked for"),
    (child.ChildWork, "after", "after: result name removed, directory closed"),
    (Worker, "_post", "reports to the loop (started, ended)"),
]


#: (owner, attribute, what the line says): calls counted on every thread, the loop's among them.
COUNTED: list[tuple[Any, str, str]] = [
    (Worker, "_idle", "the loop's waits (each ends with a wake-up)"),
    (Board, "refresh", "board refreshes (the store's notices read)"),
    (Board, "reload", "records read again by the board (a notice of another's write)"),
    (Board, "pick", "picks"),
]
COUNTS: collections.Counter[str] = collections.Counter()


def counted(owner: Any, name: str, label: str) -> None:
    fn: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        COUNTS[label] += 1
        return fn(*args, **kwargs)

    setattr(owner, name, wrapper)


def timed(owner: Any, name: str, label: str) -> None:
    fn: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            if threading.current_thread().name.startswith("jobctl slot"):
                TOTAL[label] += time.perf_counter_ns() - start
                CALLS[label] += 1

    setattr(owner, name, wrapper)


def threads_cpu() -> dict[str, tuple[int, int, int, int]]:
    """Each live thread's clock ticks (user, system) and context switches (voluntary, not), by name (slots summed)."""
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    out: dict[str, tuple[int, int, int, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        name = names.get(tid, "other")
        name = "slots" if name.startswith("jobctl slot") else name
        now = (
            int(fields[11]),
            int(fields[12]),
            int(status["voluntary_ctxt_switches"]),
            int(status["nonvoluntary_ctxt_switches"]),
        )
        out[name] = tuple(a + b for a, b in zip(out.get(name, (0, 0, 0, 0)), now, strict=True))  # type: ignore[assignment]
    return out


def main() -> int:
    concurrency = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    for owner, name, label in STEPS:
        timed(owner, name, label)
    for owner, name, label in COUNTED:
        counted(owner, name, label)
    seen: dict[str, tuple[int, int, int, int]] = {}
    close = Slots.close

    def closing(self: Slots) -> None:
        seen.update(threads_cpu())  # before the slot threads end
        close(self)

    Slots.close = closing  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="jobctl-worker-profile-", dir=REPO) as tmp:
        store = FileStore(tmp)
        for _ in range(jobs):
            store.submit(Record(kind="shell", spec={"argv": [TRUE]}))
        main = threads_cpu()["MainThread"]  # the submits above are not the drain's
        before = os.times()
        start = time.perf_counter()
        summary = Worker(store, concurrency=concurrency, poll_interval=0.5, ttl=30).run("drain")
        elapsed = time.perf_counter() - start
        after = os.times()
    if summary["complete"] != jobs:
        raise SystemExit(f"worker profile: only {summary['complete']} of {jobs} jobs completed: {summary.counts}")
    print(
        f"worker profile: {jobs} jobs running {TRUE}, concurrency {concurrency}: {jobs / elapsed:.1f} jobs/s, "
        f"{elapsed / jobs * 1e6:.0f} us a job (wall)"
    )
    print("  wall time on the slots, us a job (calls a job):")
    for _owner, _name, label in STEPS:
        if CALLS[label]:
            print(f"  {TOTAL[label] / jobs / 1e3:8.0f}  ({CALLS[label] / jobs:4.2f})  {label}")
    print("  calls a job, every thread:")
    for _owner, _name, label in COUNTED:
        print(f"  {COUNTS[label] / jobs:8.2f}  {label}")
    tick = 1e6 / os.sysconf("SC_CLK_TCK") / jobs
    seen["MainThread"] = tuple(a - b for a, b in zip(seen["MainThread"], main, strict=True))  # type: ignore[assignment]
    print("  CPU, us a job (user + system), and context switches a job (voluntary, involuntary):")
    for name, (user, system, vol, invol) in sorted(seen.items(), key=lambda kv: -sum(kv[1][:2])):
        print(f"  {user * tick:8.0f} + {system * tick:6.0f}  {vol / jobs:5.1f} {invol / jobs:5.1f}  {name}")
    kids_user = (after.children_user - before.children_user) * 1e6 / jobs
    kids_system = (after.children_system - before.children_system) * 1e6 / jobs
    print(f"  {kids_user:8.0f} + {kids_system:6.0f}  children (the commands and the guardian)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
