"""A job's command in its own process group, killed with it: through the real command line, on every Python.

Python 3.10's subprocess cannot put a child in a new process group without a
``preexec_fn``; jobctl's children are started by the guardian
(``posix_spawn`` with its own group) on every Python, 3.10 included. These
tests drive the real command line (``jobctl run``, ``jobctl worker``) and
check only what a user relies on, whatever the start code looks like: the
command runs in a process group of its own, not its supervisor's; a stop
(here: cancel) reaches everything in that group; and when the supervisor is
SIGKILLed, the command does not run on unsupervised. ``make matrix`` runs
them on every supported Python (tests/worker is in every leg).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from workertools import gone, submit, wait_until

from jobctl import FileStore

pytestmark = [pytest.mark.timeout(90)]

#: The job: starts a grandchild in its own process group, says who is who, and waits to be stopped.
COMMAND = """
import json, os, subprocess, sys, time
grandchild = subprocess.Popen(["sleep", "300"])
info = {"pid": os.getpid(), "pgid": os.getpgid(0), "grandchild": grandchild.pid,
        "grandchild_pgid": os.getpgid(grandchild.pid)}
with open(sys.argv[1] + ".tmp", "w") as out:
    json.dump(info, out)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""


def jobctl(root: Path, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """The real command line, its output dropped (a worker's events could fill an unread pipe)."""
    env = {**os.environ, "JOB_STORE": str(root)}
    return subprocess.Popen(
        [sys.executable, "-m", "jobctl", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **popen,
    )


def started(info: Path) -> dict[str, int]:
    wait_until(info.exists, 30, "the job's command to start")
    got: dict[str, int] = json.loads(info.read_text())
    return got


def reap(proc: subprocess.Popen[bytes]) -> int:
    try:
        return proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_jobctl_run_starts_the_command_in_its_own_group_and_a_cancel_stops_the_whole_group(
    store: FileStore, root: Path, tmp_path: Path
) -> None:
    info = tmp_path / "info.json"
    job = submit(store, [sys.executable, "-c", COMMAND, str(info)])
    run = jobctl(root, "run", job, "--ttl", "10", "--grace", "1")
    try:
        who = started(info)
        assert who["pgid"] == who["pid"]  # a group of its own ...
        assert who["pgid"] != os.getpgid(run.pid)  # ... not its supervisor's
        assert who["grandchild_pgid"] == who["pgid"]  # and what it starts is in it
        cancel = jobctl(root, "cancel", job)
        assert reap(cancel) == 0
        reap(run)
        assert wait_until(lambda: gone(who["pid"]) and gone(who["grandchild"]), 30, "the group to be stopped")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert store.load(job).state == "cancelled"


def test_a_sigkilled_jobctl_run_takes_its_command_with_it(store: FileStore, root: Path, tmp_path: Path) -> None:
    info = tmp_path / "info.json"
    job = submit(store, [sys.executable, "-c", COMMAND, str(info)])
    run = jobctl(root, "run", job, "--ttl", "10")
    try:
        who = started(info)
        run.kill()
        run.wait()
        assert wait_until(lambda: gone(who["pid"]), 30, "the command to die with jobctl run")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if not gone(who["grandchild"]):  # the grandchild is the job's own business: clean up after it
            os.kill(who["grandchild"], signal.SIGKILL)


def test_a_sigkilled_worker_takes_the_whole_group_of_its_job_with_it(
    store: FileStore, root: Path, tmp_path: Path
) -> None:
    info = tmp_path / "info.json"
    job = submit(store, [sys.executable, "-c", COMMAND, str(info)])
    worker = jobctl(root, "worker", "--poll-interval", "0.1", "--ttl", "10", start_new_session=True)
    try:
        who = started(info)
        assert who["pgid"] == who["pid"] and who["grandchild_pgid"] == who["pgid"]
        assert who["pgid"] != os.getpgid(worker.pid)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        assert wait_until(lambda: gone(who["pid"]) and gone(who["grandchild"]), 30, "the job's group to die")
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert store.load(job).state == "running"  # nobody released it: the lease lapses, then it is adopted
