"""Recurring schedules fired by real workers: two worker processes on one schedule make each slot one job.

On both stores. The schedule's jobs are of a kind neither worker runs, so
they stay in the store to be counted: every slot from the first fired to
the last has exactly one job, however the two workers raced for it. A
worker started after slots were missed fires one job, for the latest.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from workertools import WorkerProcess, job_argv, submit, wait_until

from jobctl import recurring, timetable
from jobctl.record import parse_time
from jobctl.recurring import SCHEDULE_OF, slot_id
from jobctl.store.schedules import SCHEDULES, file_name

pytestmark = pytest.mark.timeout(120)


def fired(store: Any) -> list[tuple[str, str]]:
    """``(slot, id)`` of every job the schedules made, by slot."""
    return sorted((r.extensions[SCHEDULE_OF]["slot"], r.id) for r in store.list() if SCHEDULE_OF in r.extensions)


def test_two_workers_make_each_slot_exactly_one_job(store: Any, workers: Callable[..., WorkerProcess]) -> None:
    timetable.add(store, "tick", kind="tock", every=1)
    a = workers(poll_interval=0.05)
    b = workers(poll_interval=0.05)
    wait_until(lambda: len(fired(store)) >= 6, timeout=30, what="six slots fired")
    a.stop()
    b.stop()
    jobs = fired(store)
    slots = [parse_time(slot, "slot") for slot, _ in jobs]
    assert len(jobs) >= 6
    counts = Counter(slot for slot, _ in jobs)
    assert max(counts.values()) == 1, counts  # no slot twice
    for earlier, later in itertools.pairwise(slots):
        assert later - earlier == timedelta(seconds=1), slots  # and none missed while both ran
    for slot, job_id in jobs:
        assert job_id == slot_id("tick", parse_time(slot, "slot"))
    said = [e for w in (a, b) for e in w.seen if e["what"] == "scheduled"]
    assert sorted(e["id"] for e in said) == sorted(job_id for _, job_id in jobs)  # each job made by one worker


def test_a_worker_started_after_missed_slots_fires_the_latest_once(
    store: Any, workers: Callable[..., WorkerProcess]
) -> None:
    # A schedule added ten minutes ago, every minute, and no worker since: ten slots missed.
    added = store.now() - timedelta(minutes=10)
    store.add_schedule(recurring.new("tick", kind="tock", every=60, now=added))
    floor = store.now().replace(second=0, microsecond=0)
    worker = workers(poll_interval=0.05)
    first = worker.next_event(lambda e: e["what"] == "scheduled")
    time.sleep(1)  # a worker that fired each missed slot would have made the others by now
    worker.stop()
    jobs = fired(store)
    ceiling = store.now().replace(second=0, microsecond=0)
    slots = [parse_time(text, "slot") for text, _ in jobs]
    # One job for the ten missed slots: the latest of them (floor, or the next one when a minute began
    # while the worker started). A minute that begins while the worker runs adds its own slot's job:
    # never one before floor, never one slot twice.
    assert all(slot is not None and floor <= slot <= ceiling for slot in slots), (floor, jobs)
    assert len(set(slots)) == len(slots) <= 1 + (ceiling - floor) // timedelta(minutes=1), (floor, ceiling, jobs)
    assert jobs[0][1] == first["id"], jobs
    assert store.schedule("tick").fired == max(slots)  # type: ignore[type-var]


def test_a_removed_schedule_stops_firing(store: Any, workers: Callable[..., WorkerProcess]) -> None:
    timetable.add(store, "tick", kind="tock", every=1)
    worker = workers(poll_interval=0.05)
    worker.next_event(lambda e: e["what"] == "scheduled")
    assert timetable.remove(store, "tick")
    count = len(fired(store))
    time.sleep(3)
    assert len(fired(store)) <= count + 1  # one slot may have been under way as it was removed
    worker.stop()


def test_worker_app_keeps_the_applications_schedules_before_it_runs(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys
    import textwrap

    import jobctl

    (tmp_path / "myapp.py").write_text(
        textwrap.dedent(
            """
            import os
            import jobctl

            worker = jobctl.Worker(os.environ["APP_STORE"], poll_interval=0.05)
            worker.processor("report")(lambda job: {"to": job.spec["to"]})
            worker.cron("nightly", os.environ["APP_CRON"], kind="report", spec={"to": "ops"})
            """
        )
    )
    root = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOB")}

    def run(line: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "jobctl", "worker", "--app", "myapp:worker", "--once"]
        return subprocess.run(
            argv, cwd=tmp_path, env={**env, "APP_STORE": str(root), "APP_CRON": line},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    done = run("0 3 * * *")
    assert done.returncode == 0, done.stderr
    store = jobctl.FileStore(root)
    kept = store.schedule("nightly")
    assert (kept.cron, kept.kind, kept.spec) == ("0 3 * * *", "report", '{"to": "ops"}')
    assert run("0 3 * * *").returncode == 0 and store.schedule("nightly") == kept  # the same again: unchanged
    assert run("0 4 * * *").returncode == 0
    assert store.schedule("nightly").cron == "0 4 * * *" and store.schedule("nightly").created_at == kept.created_at
    refused = run("0 25 * * *")
    assert refused.returncode == 9 and len(refused.stderr.strip().splitlines()) == 1
    assert refused.stderr.splitlines()[-1].startswith("jobctl: invalid: --app myapp:worker: cannot import myapp")
    assert "field 2 (hour) '25': 25 is out of range 0-23" in refused.stderr and "Traceback" not in refused.stderr


#: Takes the lock of argv[1] (a schedule's or a job's ``.lock``), says so, and stops itself while holding it:
#: a worker stopped (SIGSTOP) in the middle of firing a slot.
HOLDER = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


@pytest.mark.file_only("a writer stopped while it holds a lock file; a row's lock goes with its statement")
@pytest.mark.parametrize("frozen", ["schedule", "slot job"])
def test_a_writer_stopped_mid_firing_freezes_neither_the_workers_nor_the_slot(
    store: Any, workers: Callable[..., WorkerProcess], frozen: str
) -> None:
    # A daily schedule added two days ago and never fired: its slot of today's midnight is due.
    store.add_schedule(recurring.new("daily", kind="tock", every="1d", now=store.now() - timedelta(days=2)))
    slot = store.schedule("daily").latest(store.now())
    if frozen == "schedule":
        lock = Path(store.root, *SCHEDULES, file_name("daily") + ".lock")
    else:
        os.makedirs(store.jobs_dir, exist_ok=True)
        lock = Path(store.jobs_dir, slot_id("daily", slot) + ".json.lock")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        job = submit(store, job_argv("exit", 0))
        worker = workers(poll_interval=0.05)
        wait_until(lambda: store.load(job).state == "complete", timeout=30, what="the other job to run")
        failed = worker.next_event(lambda e: e["what"] == "schedule-failed", timeout=10)
        assert "cannot fire schedule daily" in failed["detail"] and "locked by another writer" in failed["detail"]
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0  # it stops when told, frozen lock or not
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    # The holder gone, the next worker fires the slot: one job, marked fired.
    worker = workers(poll_interval=0.05)
    wait_until(lambda: store.schedule("daily").fired == slot, timeout=30, what="the slot to be marked fired")
    worker.stop()
    assert [job_id for _, job_id in fired(store)] == [slot_id("daily", slot)]
