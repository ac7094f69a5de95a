"""Priorities and timeouts, on both stores, with real processes.

A worker, ``claim --next`` and ``run --next`` take the runnable job of the
highest priority first, the oldest among equals (jobctl.priority). An
attempt that runs past its timeout (jobctl.timeout) is stopped -- SIGTERM to
its process group, SIGKILL after the grace -- and fails ``timed out after …``,
retried as its retry policy says; ``jobctl run`` stops it the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from workertools import WorkerProcess, gone, job_argv, no_config, read_log, submit, wait_until

from jobctl import FileStore, Record, schedule
from jobctl.priority import PRIORITY, set_priority
from jobctl.timeout import TIMEOUT, set_timeout

pytestmark = pytest.mark.timeout(90)

JOBCTL = str(Path(sys.executable).parent / "jobctl")


def _env(root: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_", "MAX_CONCURRENT"))}
    env.update({"JOB_STORE": str(root), "JOBCTL_CONFIG": no_config()})
    return env


def _jobctl(root: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JOBCTL, *args], env=_env(root), capture_output=True, text=True, timeout=60, check=False)


def _ranked(store: FileStore, side_log: Path, priority: int) -> str:
    rec = Record(kind="shell", spec={"argv": job_argv("exit", 0), "env": {"SIDE_LOG": str(side_log)}})
    return store.submit(set_priority(rec, priority))


# -- priorities ---------------------------------------------------------------------------------


def test_a_worker_drains_jobs_by_priority_then_age(store: FileStore, side_log: Path, workers: Any) -> None:
    priorities = [0, 5, -2, 5, 10, 0, -2, 1000, -1000]
    made = [(p, _ranked(store, side_log, p)) for p in priorities]
    expected = [job_id for _, job_id in sorted(made, key=lambda pair: -pair[0])]  # stable: oldest first among equals
    worker: WorkerProcess = workers("drain", concurrency=1)
    assert worker.wait(60) == 0
    started = [line["id"] for line in read_log(side_log) if line["event"] == "start"]
    assert started == expected
    assert [store.load(j).extensions.get(PRIORITY) for j in expected[:2]] == [1000, 10]


def test_a_job_submitted_later_with_a_higher_priority_runs_before_older_ones(
    store: FileStore, side_log: Path, workers: Any
) -> None:
    gate = Path(str(side_log) + ".gate")
    blocker = submit(store, ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done"])
    worker: WorkerProcess = workers(concurrency=1)
    wait_until(lambda: store.load(blocker).state == "running", what="the first job to start")
    old = [_ranked(store, side_log, 0) for _ in range(3)]
    urgent = _ranked(store, side_log, 1)
    gate.touch()
    wait_until(lambda: all(store.load(j).state == "complete" for j in [*old, urgent]), 30, "all to complete")
    worker.stop()
    assert [line["id"] for line in read_log(side_log) if line["event"] == "start"] == [urgent, *old]


def test_claim_next_and_run_next_take_the_highest_priority(store: FileStore, root: Any) -> None:
    low = _jobctl(root, "submit", "--priority", "-5", "--", "true").stdout.strip()
    plain = _jobctl(root, "submit", "--", "true").stdout.strip()
    high = _jobctl(root, "submit", "--priority", "7", "--", "true").stdout.strip()
    also_high = _jobctl(root, "submit", "--priority", "7", "--", "true").stdout.strip()
    shown = json.loads(_jobctl(root, "show", high, "--json").stdout)
    assert (shown["priority"], shown["timeout"]) == (7, None)
    assert json.loads(_jobctl(root, "show", plain, "--json").stdout)["priority"] == 0
    claimed = _jobctl(root, "claim", "--next", "--owner", "me")
    assert claimed.returncode == 0 and claimed.stdout.split()[0] == high, claimed.stderr
    ran = _jobctl(root, "--json", "run", "--next", "--", "true")
    assert ran.returncode == 0 and json.loads(ran.stdout)["id"] == also_high, ran.stderr
    order = [_jobctl(root, "claim", "--next", "--owner", "me").stdout.split()[0] for _ in range(2)]
    assert order == [plain, low]
    assert "jobctl.run/priority@1" not in store.load_bytes(plain).decode()  # 0 is never written


# -- timeouts -----------------------------------------------------------------------------------


def _stubborn(pids: Path) -> list[str]:
    """A command whose child and grandchild both ignore SIGTERM; it writes both pids, then waits."""
    script = (
        'trap "" TERM; '
        "(exec sleep 300) & "  # the grandchild: SIGTERM stays ignored across exec
        f'echo "$$ $!" >> {pids}; '
        "while :; do sleep 0.05; done"
    )
    return ["sh", "-c", script]


def _pids(pids: Path, lines: int) -> list[list[int]]:
    got = wait_until(
        lambda: pids.exists() and len(pids.read_text().splitlines()) >= lines and pids.read_text().endswith("\n"),
        what=f"{lines} pid line(s)",
    )
    assert got
    return [[int(p) for p in line.split()] for line in pids.read_text().splitlines()]


def test_a_timed_out_attempt_loses_its_whole_process_group_and_is_retried(
    store: FileStore, tmp_path: Path, workers: Any
) -> None:
    pids = tmp_path / "pids"
    rec = Record(kind="shell", spec={"argv": _stubborn(pids)})
    schedule.plan(rec, intervals=[0])  # one retry, at once
    job = store.submit(set_timeout(rec, 1))
    worker: WorkerProcess = workers(concurrency=1, grace=0.5)
    first = _pids(pids, 1)[0]
    started = time.monotonic()
    second = _pids(pids, 2)[1]  # the retry started: the first attempt was stopped and counted
    assert time.monotonic() - started >= 0.5
    wait_until(lambda: all(gone(p) for p in first), 10, "the first attempt's child and grandchild to be gone")
    wait_until(lambda: store.load(job).terminal, 20, "the second attempt to time out")
    worker.stop()
    assert all(gone(p) for p in second), "the second attempt's group outlived it"
    final = store.load(job)
    assert (final.state, final.error) == ("failed", "attempt 2: timed out after 1s")
    assert final.extensions["jobctl.run/retry@1"]["failures"] == 2
    logs = _jobctl_logs(store, job)
    assert "timeout: timed out after 1s" in logs


def _jobctl_logs(store: FileStore, job: str) -> str:
    root = getattr(store, "url", None) or str(store.root)
    return _jobctl(root, "logs", job).stdout


def test_jobctl_run_stops_a_job_at_its_timeout(store: FileStore, root: Any, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    job = _jobctl(root, "submit", "--timeout", "1s", "--", *_stubborn(pids)).stdout.strip()
    assert store.load(job).extensions[TIMEOUT] == 1
    started = time.monotonic()
    ran = subprocess.run(
        [JOBCTL, "run", job, "--grace", "0.5"], env=_env(root), capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - started
    assert ran.returncode != 0 and 1.0 <= took < 20, (ran.returncode, took, ran.stderr)
    assert f"{job} failed (attempt 1: timed out after 1s)" in ran.stderr
    assert all(gone(p) for p in _pids(pids, 1)[0])
    assert (store.load(job).state, store.load(job).error) == ("failed", "attempt 1: timed out after 1s")


def test_a_job_within_its_timeout_completes(store: FileStore, root: Any) -> None:
    job = _jobctl(root, "submit", "--timeout", "1m", "--", "true").stdout.strip()
    ran = _jobctl(root, "run", job)
    assert ran.returncode == 0 and store.load(job).state == "complete", ran.stderr


# -- the Python processors' API --------------------------------------------------------------------


def _app(store: Any) -> Any:
    import jobctl

    return jobctl.Worker(store, poll_interval=0.05, ttl=5.0, grace=0.5, on_event=lambda event: None)


def test_next_jobs_carry_their_priority_and_timeout_and_run_in_that_order(store: FileStore) -> None:
    import jobctl

    worker = _app(store)
    ran: list[str] = []

    @worker.processor("plan")
    def plan(j: jobctl.Job) -> jobctl.Result:
        return jobctl.Result(
            next_jobs=[
                jobctl.NewJob("step", {"n": "late"}, priority=-1),
                jobctl.NewJob("step", {"n": "plain"}),
                jobctl.NewJob("step", {"n": "first"}, priority=3, timeout=90),
            ]
        )

    @worker.processor("step")
    def step(j: jobctl.Job) -> None:
        ran.append(j.spec["n"])

    parent = store.submit(Record(kind="plan", spec={}))
    worker.drain()
    assert ran == ["first", "plain", "late"]
    children = {store.load(i).opaque_text("spec"): store.load(i) for i in store.ids() if i != parent}
    first = children['{"n":"first"}']
    assert (first.extensions[PRIORITY], first.extensions[TIMEOUT]) == (3, 90)
    assert PRIORITY not in children['{"n":"plain"}'].extensions
    assert TIMEOUT not in children['{"n":"late"}'].extensions


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"priority": 1001}, "a next job's priority must be a whole number (-1000 <= priority <= 1000), not 1001"),
        ({"priority": 1.0}, "a next job's priority must be a whole number"),
        ({"timeout": 0}, "a next job's timeout must be a number of seconds (0 < timeout <= 31536000), not 0"),
        ({"timeout": "15m"}, "a next job's timeout must be a number of seconds"),
    ],
)
def test_a_next_jobs_priority_and_timeout_are_checked(options: dict[str, Any], says: str) -> None:
    import jobctl
    from jobctl.errors import Invalid

    with pytest.raises(Invalid) as refused:
        jobctl.NewJob("step", **options)
    assert refused.value.message.startswith(says)


def test_a_processor_past_its_timeout_is_asked_to_stop_and_the_attempt_fails(store: FileStore) -> None:
    import jobctl

    worker = _app(store)
    stopped: list[bool] = []

    @worker.processor("slow")
    def slow(j: jobctl.Job) -> str:
        stopped.append(j.wait_stop(30))  # True once the keeper asks it to stop: at the timeout
        return "finished anyway"

    rec = Record(kind="slow", spec={})
    schedule.plan(rec, intervals=[0])
    job = store.submit(set_timeout(rec, 0.5))
    started = time.monotonic()
    summary = worker.drain()
    assert time.monotonic() - started < 20
    assert stopped == [True, True] and summary.ran == {job: "failed"}
    final = store.load(job)
    assert (final.state, final.error) == ("failed", "attempt 2: timed out after 0.5s")
