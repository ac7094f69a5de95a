"""A writer stopped (SIGSTOP) while it holds a record's lock freezes that record, never the claims behind it.

The contract's lock waits without a timeout and is never broken by age
[JOB-L2], so nobody can write the frozen record until its writer goes on or
dies. Picking a job to claim (``claim --next``, ``run --next``, a worker's
slots) waits for the lock a moment only: the frozen job is passed over, the others are
claimed and run, and a worker told to stop still stops.

The lock holder is a real process that takes ``flock`` on the record's lock
file, as any writer does, and stops itself there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from workertools import gone, job_argv, no_config, submit, wait_until

from jobctl import FileStore, LeaseHeld, LockBusy, Record

pytestmark = pytest.mark.timeout(120)

#: Takes the lock of argv[1] (a record's ``.lock``), says so, and stops itself while holding it.
HOLDER = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def frozen_holder(lock: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    wait_until(lambda: _stopped(proc.pid), 10, "the lock holder to stop")
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read()
    return stat[stat.rindex(")") + 2] == "T"


@pytest.fixture
def frozen(tmp_path: Path) -> Iterator[tuple[FileStore, str, str]]:
    """A store of two pending jobs, the older one's lock held by a stopped process: (store, frozen, free)."""
    store = FileStore(tmp_path / "root")
    first = store.submit(Record(id="1-first", kind="shell", spec={"argv": job_argv("exit", 0)}))
    second = store.submit(Record(id="2-second", kind="shell", spec={"argv": job_argv("exit", 0)}))
    holder = frozen_holder(Path(store.jobs_dir) / f"{first}.json.lock")
    next(holder)
    yield store, first, second
    holder.close()


def env(root: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_", "MAX_CONCURRENT"))}
    return {**base, "JOB_STORE": str(root), "JOBCTL_CONFIG": no_config()}


def jobctl(store: FileStore, *args: str) -> subprocess.CompletedProcess[str]:
    """A real ``jobctl`` process on ``store``; it must end within 90 s, frozen lock or not."""
    return subprocess.run(
        [sys.executable, "-m", "jobctl", *args], env=env(Path(store.root)), capture_output=True, text=True, timeout=90
    )


def test_a_claim_that_will_not_wait_is_refused_lock_busy_and_writes_nothing(frozen: tuple[FileStore, str, str]) -> None:
    store, first, _ = frozen
    before = Path(store.path(first)).read_bytes()
    with pytest.raises(LockBusy) as caught:
        store.claim(first, "w", 60, wait=False)
    assert isinstance(caught.value, LeaseHeld) and caught.value.exit_code == 4
    assert caught.value.job_id == first and f"{first}.json.lock is locked by another writer" in caught.value.message
    assert Path(store.path(first)).read_bytes() == before


def test_claim_next_passes_over_the_frozen_record_and_claims_the_next(frozen: tuple[FileStore, str, str]) -> None:
    store, first, second = frozen
    before = Path(store.path(first)).read_bytes()
    ran = jobctl(store, "claim", "--next", "--owner", "w")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split()[0] == second
    assert store.load(second).lease.owner == "w"
    assert Path(store.path(first)).read_bytes() == before


def test_a_drain_runs_the_others_and_leaves(frozen: tuple[FileStore, str, str]) -> None:
    store, first, second = frozen
    ran = jobctl(store, "worker", "--drain", "--name", "w")
    assert store.load(second).state == "complete", ran.stderr
    assert store.load(first).state == "pending" and store.load(first).lease.epoch == 0
    assert "Traceback" not in ran.stderr
    said = [line for line in ran.stderr.splitlines() if first in line]
    assert len(said) == 1 and "waiting" in said[0] and "is locked by another writer" in said[0], ran.stderr


def test_a_worker_with_a_frozen_record_stops_when_told(frozen: tuple[FileStore, str, str], tmp_path: Path) -> None:
    store, first, second = frozen
    third = submit(store, job_argv("exit", 0))
    log = tmp_path / "worker.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobctl", "worker", "--name", "w", "--poll-interval", "0.2"],
            env=env(Path(store.root)),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_until(lambda: store.load(second).state == "complete" and store.load(third).state == "complete", 60)
        time.sleep(1.5)  # the frozen job tried again at least once meanwhile
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if not gone(proc.pid):
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()
    assert store.load(first).state == "pending" and store.load(first).lease.epoch == 0


#: Takes the lock of argv[1], says so, and lets go of it after argv[2] seconds: a write under way.
BRIEF = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_claim_that_will_not_wait_still_waits_out_a_write_under_way(tmp_path: Path) -> None:
    """A write holds the lock for milliseconds: such a claim waits it out (up to LOCK_PATIENCE), oldest first kept."""
    store = FileStore(tmp_path / "root")
    job = store.submit(Record(kind="k", spec={}))
    lock = Path(store.jobs_dir) / f"{job}.json.lock"
    with subprocess.Popen([sys.executable, "-c", BRIEF, str(lock), "0.3"], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        claimed = store.claim(job, "w", 60, wait=False)  # LockBusy had it not waited for the holder
    assert claimed.lease.epoch == 1
