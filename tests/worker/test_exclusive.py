"""Exclusive keys and ``--limit KIND=N`` through real worker processes, on both stores.

Every job logs its start and end (``_job.py sleep``) to one side log; jobs
of one key must never overlap there, however many workers fight over them.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from workertools import JOB, WorkerProcess, job_argv, read_log, wait_until

from jobctl import FileStore, Record
from jobctl.exclusive import set_exclusive

pytestmark = pytest.mark.timeout(180)


def submit_keyed(store: FileStore, log: Path, key: str | None, seconds: float, kind: str = "shell") -> str:
    """A ``shell`` job that sleeps ``seconds`` (logging its start and end), with exclusive ``key`` when given."""
    rec = Record(kind=kind, spec={"argv": job_argv("sleep", seconds), "env": {"SIDE_LOG": str(log)}})
    if key is not None:
        set_exclusive(rec, key)
    return store.submit(rec)


def spans(log: Path) -> dict[str, tuple[int, int]]:
    """Each job's (start, end) in nanoseconds, from the side log."""
    starts: dict[str, int] = {}
    out: dict[str, tuple[int, int]] = {}
    for line in read_log(log):
        if line["event"] == "start":
            starts[line["id"]] = line["t"]
        elif line["event"] == "end":
            out[line["id"]] = (starts[line["id"]], line["t"])
    return out


def most_at_once(intervals: list[tuple[int, int]]) -> int:
    """The most of ``intervals`` that overlap at one instant."""
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    now = most = 0
    for _, step in points:
        now += step
        most = max(most, now)
    return most


def all_ended(store: FileStore, ids: list[str]) -> bool:
    return all(store.load(job_id).terminal for job_id in ids)


def test_workers_never_run_two_jobs_of_one_key_at_once(
    store: FileStore, workers: Callable[..., WorkerProcess], side_log: Path
) -> None:
    """Three workers of three slots each, eight jobs of key "db" and four of another: one "db" job at a time.

    The workers are up and idle first, so that every one of them wakes to the same new jobs at once and
    races for them: without the key's lock in the claim, two of them take two "db" jobs together.
    """
    procs = [workers("loop", concurrency=3) for _ in range(3)]
    keyed = [submit_keyed(store, side_log, "db", 0.3) for _ in range(8)]
    others = [submit_keyed(store, side_log, "cache", 0.3) for _ in range(4)]
    plain = [submit_keyed(store, side_log, None, 0.3) for _ in range(4)]
    wait_until(lambda: all_ended(store, keyed + others + plain), timeout=120, what="every job to end")
    for proc in procs:
        proc.stop()
    ran = spans(side_log)
    assert [store.load(j).state for j in keyed + others + plain] == ["complete"] * 16
    assert most_at_once([ran[j] for j in keyed]) == 1, "two jobs of key db ran at once"
    assert most_at_once([ran[j] for j in others]) == 1, "two jobs of key cache ran at once"
    # The key holds back only its own jobs: the others ran beside them.
    assert most_at_once([ran[j] for j in keyed + others + plain]) > 1
    # Oldest first within a key: each started after the one submitted before it ended.
    order = sorted(keyed, key=lambda j: ran[j][0])
    assert order == keyed


def test_racing_claims_of_the_next_job_never_run_two_of_one_key(
    store: FileStore, root: object, side_log: Path, tmp_path: Path
) -> None:
    """Rounds of five `jobctl run --next` processes started together over six jobs of one key.

    Nothing but the claim keeps them apart here (no worker's view): each process lists the runnable
    jobs, and the one that loses the oldest to another goes on to the next of the same key. Its claim
    must find the key taken.
    """
    import os
    import subprocess

    keyed = [submit_keyed(store, side_log, "db", 0.3) for _ in range(6)]
    env = {**os.environ, "JOB_STORE": str(root), "JOBCTL_CONFIG": str(tmp_path / "no-config.ini")}
    argv = [sys.executable, "-m", "jobctl", "run", "--next", "--ttl", "5"]
    for _ in range(20):
        if all_ended(store, keyed):
            break
        procs = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(5)]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode in (0, 3), err  # ran one, or found nothing it may start
    ran = spans(side_log)
    assert [store.load(j).state for j in keyed] == ["complete"] * 6
    assert most_at_once([ran[j] for j in keyed]) == 1, "two jobs of key db ran at once"


def test_limit_runs_at_most_n_of_a_kind(
    store: FileStore, workers: Callable[..., WorkerProcess], side_log: Path
) -> None:
    """--limit render=1 on a worker of four slots: one render at a time, and the other kind beside it."""
    renders = [store.submit(Record(kind="render", spec={})) for _ in range(4)]
    shells = [submit_keyed(store, side_log, None, 0.3) for _ in range(4)]
    render = f"SIDE_LOG={shlex.quote(str(side_log))} {shlex.join([sys.executable, JOB, 'sleep', '0.3'])}"
    proc = workers("drain", concurrency=4, handlers={"render": render}, limits={"render": 1})
    assert proc.wait(90) == 0
    ran = spans(side_log)
    assert most_at_once([ran[j] for j in renders]) == 1
    assert most_at_once([ran[j] for j in renders + shells]) > 1
