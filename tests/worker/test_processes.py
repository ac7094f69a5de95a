"""Workers as real processes: SIGKILL and adoption, several workers on one store, retries, pipelines, stops.

Each worker is ``_driver.py`` (the library's Worker in its own process, with
the CLI's signal handling); each job is ``_job.py`` or a shell one-liner that
writes a side-effect log. Assertions are about order and overlap as the logs
and the store record them, never about how fast anything ran.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from _campaign import children, cmdline
from workertools import WorkerProcess, gone, job_argv, read_log, submit, wait_until

from jobctl import FileStore, StaleEpoch, schedule
from jobctl.record import held
from jobctl.runner import log_files
from jobctl.store.file import is_orphan

pytestmark = pytest.mark.timeout(90)

Workers = Any  # the fixture's start function


def test_a_sigkilled_worker_is_adopted_after_the_ttl_and_the_job_resumes(
    store: FileStore, side_log: Path, tmp_path: Path, workers: Workers
) -> None:
    marker, late = tmp_path / "adopted", tmp_path / "late.json"
    job = submit(
        store,
        job_argv("steps", 8, 0.15, "--escape", marker, late, "--hold", marker),
        side_log,
    )
    first: WorkerProcess = workers(ttl=1.5)
    wait_until(lambda: any(e.get("i", 0) >= 3 for e in read_log(side_log)), what="three checkpoints")
    first.kill()
    starts = [e for e in read_log(side_log) if e["event"] == "start"]
    assert len(starts) == 1
    killed_epoch, child = starts[0]["epoch"], starts[0]["pid"]
    # The worker's guardian takes the child down with it.
    wait_until(lambda: gone(child), 10, "the orphaned child to die")
    before = store.load(job)
    last = before.checkpoint["i"]
    assert before.state == "running" and before.lease.epoch == killed_epoch

    second: WorkerProcess = workers(ttl=1.5)
    adopted = second.next_event(lambda e: e["what"] == "started")
    assert f"adopted from {first.owner}" in adopted["detail"]
    resumed = wait_until(lambda: [e for e in read_log(side_log) if e["event"] == "start"][1:], what="the resumed start")
    # The killed worker's epoch is refused now that somebody else holds the job [JOB-L5].
    with pytest.raises(StaleEpoch):
        store.progress(job, killed_epoch, 0, checkpoint={"i": 0})
    marker.touch()  # let the escaped grandchild try its late write, then let the resumed run go on
    second.next_event(lambda e: e["what"] == "complete")
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    assert json.loads(late.read_text()) == {"verdict": "stale_epoch", "epoch": killed_epoch}

    rec = store.load(job)
    assert rec.state == "complete" and rec.checkpoint == {"i": 8} and rec.progress.done == 8
    assert resumed[0]["epoch"] > killed_epoch
    assert resumed[0]["resumed_from"] == last and json.loads(resumed[0]["checkpoint_env"]) == {"i": last}
    steps = [e["i"] for e in read_log(side_log) if e["event"] == "step"]
    assert steps[: steps.index(last) + 1] == list(range(1, last + 1))
    assert steps[steps.index(last) + 1 :] == list(range(last + 1, 9))  # resumed, nothing redone


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read()
    return stat[stat.rindex(")") + 2] == "T"


def _intervals(log: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for line in log:
        run = runs.setdefault((line["id"], line["epoch"]), {"id": line["id"], "epoch": line["epoch"]})
        run[line["event"]] = line["t"]
        run.setdefault("pid", line["pid"])
        run.setdefault("ppid", line.get("ppid"))
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs.values():
        by_job[run["id"]].append(run)
    for spans in by_job.values():
        spans.sort(key=lambda r: r["start"])
    return by_job


SHELL_JOB = (
    'printf \'{"id":"%s","epoch":%s,"event":"start","t":%s,"pid":%s,"ppid":%s}\\n\' '
    '"$JOB_ID" "$JOB_EPOCH" "$(date +%s%N)" "$$" "$PPID" >> "$SIDE_LOG"; '
    "sleep 0.$((RANDOM % 3 + 1)); "
    'printf \'{"id":"%s","epoch":%s,"event":"end","t":%s,"pid":%s}\\n\' '
    '"$JOB_ID" "$JOB_EPOCH" "$(date +%s%N)" "$$" >> "$SIDE_LOG"'
)


def test_several_workers_never_run_a_job_twice_at_once(
    store: FileStore, side_log: Path, workers: Workers, backend: str
) -> None:
    # Every worker is up before the jobs come: one started first would run them all while the others start.
    # The premise is that only the victim's runs are cut short, so no live worker may miss a renewal: a
    # database renewal is a transaction of four round trips to a server process that, on a busy two-core
    # machine, waits its turn for the CPU at each, so its lease gets the room a second does not leave.
    ttl = 1.0 if backend == "file" else 3.0
    pool: list[WorkerProcess] = [workers(concurrency=2, ttl=ttl) for _ in range(4)]
    jobs = [submit(store, ["bash", "-c", SHELL_JOB], side_log) for _ in range(36)]
    victim = pool[0]

    def victim_holds() -> dict[str, int]:
        """The jobs the victim holds (running under its lease), with their epochs, as the store says."""
        found = {}
        for job_id in jobs:
            rec = store.load(job_id)
            if rec.state == "running" and rec.lease.owner == victim.owner:
                found[job_id] = rec.lease.epoch
        return found

    # The premise by construction, not by timing: stop the victim while it holds a job, so that no job it
    # holds can end under it, and kill it only if it still holds one then; otherwise let it go on and retry.
    [guardian] = wait_until(
        lambda: [pid for pid in children(victim.proc.pid) if b"\0-I\0-S\0-c\0" in cmdline(pid)],
        what="the first worker's guardian",
    )
    while True:
        wait_until(victim_holds, what="the first worker to hold a job")
        victim.signal(signal.SIGSTOP)
        wait_until(lambda: stopped(victim.proc.pid), 10, "the first worker to be stopped")
        holding = victim_holds()
        if holding:
            break
        victim.signal(signal.SIGCONT)
    victim.kill()
    # Its guardian kills every group it had, then exits: from then on none of its children can write.
    wait_until(lambda: gone(guardian), 10, "the killed worker's guardian to act")
    killed_at: dict[str, int] = {}
    for span in (s for runs in _intervals(read_log(side_log)).values() for s in runs):
        if span["ppid"] == guardian and "end" not in span:  # its children are its guardian's
            wait_until(lambda pid=span["pid"]: gone(pid), 10, "the killed worker's jobs to die")
            killed_at[span["id"]] = time.time_ns()
    # Every job it held at its death is adopted: claimed again, at a later epoch, by another worker.
    for job_id, epoch in holding.items():
        wait_until(lambda j=job_id, e=epoch: store.load(j).lease.epoch > e, 60, f"{job_id} to be adopted")

    wait_until(lambda: all(store.load(j).state == "complete" for j in jobs), 60, "every job to complete")
    for proc in pool[1:]:
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0

    spans = _intervals(read_log(side_log))
    assert set(spans) == set(jobs)
    for job_id, runs in spans.items():
        for before, after in itertools.pairwise(runs):
            end = before.get("end", killed_at.get(job_id))
            assert end is not None, f"{job_id}: a run that never ended, and not by the kill"
            assert end < after["start"], f"{job_id} ran twice at once: {before} and {after}"
            assert before["epoch"] < after["epoch"]
        assert "end" in runs[-1]


def test_retries_follow_the_schedule_and_the_alert_fires(
    store: FileStore, side_log: Path, tmp_path: Path, workers: Workers
) -> None:
    alerts = tmp_path / "alerts"
    flaky = submit(store, job_argv("flaky", 3), side_log, intervals=[0.3, 0.5, 0.5])
    doomed = submit(store, job_argv("exit", 1), side_log, intervals=[0.2, 0.2])
    fatal = submit(store, job_argv("exit", 64), side_log, intervals=[0.2, 0.2], no_retry_on=[64])
    alert = f'printf "%s|%s|%s|%s\\n" "$JOB_ID" "$JOB_KIND" "$JOB_ERROR" "$JOB_ATTEMPT" >> {alerts}'
    worker: WorkerProcess = workers(concurrency=3, on_failure=alert)
    wait_until(lambda: all(store.load(j).terminal for j in (flaky, doomed, fatal)), 30, "all three to end")
    wait_until(lambda: alerts.exists() and len(alerts.read_text().splitlines()) == 2, 10, "two alerts")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0

    log = read_log(side_log)
    runs = defaultdict(list)
    for line in log:
        runs[line["id"]].append(line)
    # flaky: fails twice, passes on the third attempt; each retry waits its interval.
    attempts = [(e["attempt"], e["event"]) for e in runs[flaky]]
    assert attempts == [(1, "start"), (1, "end"), (2, "start"), (2, "end"), (3, "start"), (3, "end")]
    ends = [e["t"] for e in runs[flaky] if e["event"] == "end"]
    starts = [e["t"] for e in runs[flaky] if e["event"] == "start"]
    for gap, end, start in zip((0.3, 0.5), ends[:2], starts[1:], strict=True):
        assert (start - end) / 1e9 >= gap - 0.01, "a retry started before its not-before time"
    rec = store.load(flaky)
    assert rec.state == "complete" and rec.extensions[schedule.RETRY]["failures"] == 2
    # doomed: three attempts, failed only after the last.
    assert [e["attempt"] for e in runs[doomed] if e["event"] == "start"] == [1, 2, 3]
    rec = store.load(doomed)
    assert (rec.state, rec.error) == ("failed", "attempt 3: exit status 1")
    # fatal: a non-retryable exit code fails at once.
    assert [e["attempt"] for e in runs[fatal] if e["event"] == "start"] == [1]
    assert (store.load(fatal).state, store.load(fatal).error) == ("failed", "attempt 1: exit status 64")
    assert sorted(alerts.read_text().splitlines()) == sorted(
        [f"{doomed}|shell|attempt 3: exit status 1|3", f"{fatal}|shell|attempt 1: exit status 64|1"]
    )


def test_a_fan_out_fan_in_pipeline_runs_in_order_with_parallel_stages(
    store: FileStore, side_log: Path, tmp_path: Path, workers: Workers
) -> None:
    b_mark, c_mark = tmp_path / "b", tmp_path / "c"
    fetch = submit(store, job_argv("exit", 0), side_log, pipeline="nightly", stage="fetch")
    left = submit(store, job_argv("barrier", b_mark, c_mark), side_log, after=[fetch], pipeline="nightly", stage="left")
    right = submit(
        store, job_argv("barrier", c_mark, b_mark), side_log, after=[fetch], pipeline="nightly", stage="right"
    )
    join = submit(store, job_argv("exit", 0), side_log, after=[left, right], pipeline="nightly", stage="join")
    worker: WorkerProcess = workers("drain", concurrency=3)
    assert worker.wait() == 0
    assert all(store.load(j).state == "complete" for j in (fetch, left, right, join))
    log = read_log(side_log)
    at = {(e["id"], e["event"]): e["t"] for e in log}
    # Fan-out after fetch; the two middle stages ran at the same time (each waited for the other to start);
    # fan-in only after both.
    assert at[(fetch, "end")] < min(at[(left, "start")], at[(right, "start")])
    assert at[(left, "start")] < at[(right, "end")] and at[(right, "start")] < at[(left, "end")]
    assert [e["met"] for e in log if "met" in e] == [True, True]
    assert max(at[(left, "end")], at[(right, "end")]) < at[(join, "start")]


def test_a_failed_stage_cancels_its_dependents_with_a_reason(
    store: FileStore, side_log: Path, workers: Workers
) -> None:
    fetch = submit(store, job_argv("exit", 3), side_log, pipeline="p", stage="fetch")
    left = submit(store, job_argv("exit", 0), side_log, after=[fetch], pipeline="p", stage="left")
    right = submit(store, job_argv("exit", 0), side_log, after=[fetch], pipeline="p", stage="right")
    join = submit(store, job_argv("exit", 0), side_log, after=[left, right], pipeline="p", stage="join")
    worker: WorkerProcess = workers("drain", concurrency=2)
    assert worker.wait() == 0
    assert store.load(fetch).state == "failed"
    for job in (left, right):
        rec = store.load(job)
        assert (rec.state, rec.error) == ("cancelled", f"cancelled: dependency {fetch} ended failed")
    rec = store.load(join)
    assert rec.state == "cancelled" and rec.error in (
        f"cancelled: dependency {left} ended cancelled",
        f"cancelled: dependency {right} ended cancelled",
    )
    assert {e["id"] for e in read_log(side_log)} == {fetch}  # nothing after it ran


def test_cancel_pause_and_recall_of_running_jobs(store: FileStore, side_log: Path, workers: Workers) -> None:
    cancel = submit(store, job_argv("sleep", 60, "--ignore-term"), side_log)
    pause = submit(store, job_argv("sleep", 60), side_log)
    recall = submit(store, job_argv("sleep", 60, "--ignore-term"), side_log)
    worker: WorkerProcess = workers(concurrency=3, ttl=3.0, grace=0.5)
    wait_until(lambda: len({e["id"] for e in read_log(side_log) if e["event"] == "start"}) == 3, what="three starts")
    pids = {e["id"]: e["pid"] for e in read_log(side_log) if e["event"] == "start"}
    wait_until(lambda: all(store.load(j).checkpoint for j in (cancel, pause, recall)), what="first checkpoints")

    store.set_intent(cancel, "cancel", "alice")
    store.set_intent(pause, "pause", "bob")
    held_epoch = store.load(recall).lease.epoch
    store.recall(recall, held_epoch, "maintenance", "ops", 2.0)

    wait_until(lambda: store.load(cancel).state == "cancelled", what="the cancel")
    rec = store.load(cancel)
    assert "alice" in rec.error and rec.checkpoint is not None
    wait_until(lambda: store.load(pause).lease.owner == "", what="the pause")
    rec = store.load(pause)
    assert (rec.state, rec.want) == ("pending", "pause") and not is_orphan(rec, store.now())
    # The recalled job is released (recall kept, checkpoint kept: the runner tests look at the record in
    # between) and, an orphan again, adopted by the same worker once the recall's grace has passed (no
    # other worker is there to take it), which resumes from the checkpoint.
    worker.next_event(lambda e: e["what"] == "released" and e["id"] == recall and e["detail"] == "recall")
    again = wait_until(lambda: [e for e in read_log(side_log) if e["id"] == recall and e["event"] == "start"][1:])
    assert again[0]["epoch"] > held_epoch
    assert json.loads(again[0]["checkpoint_env"])["slept"] >= 1
    for job in (cancel, pause, recall):
        assert wait_until(lambda job=job: gone(pids[job]), 5, "the stopped child to be gone")
    # The stubborn children (SIGTERM ignored) were SIGKILLed after the grace.
    for job in (cancel,):
        [(_, path)] = log_files(store, job)
        assert "killed by SIGKILL (cancel:" in Path(path).read_text()

    # The paused one waits until somebody says run, then resumes from its checkpoint.
    assert store.load(pause).lease.owner == ""
    store.set_intent(pause, "run", "bob")
    wait_until(lambda: held(store.load(pause).lease, store.now()), what="the resumed job to be claimed")
    resumed = wait_until(lambda: [e for e in read_log(side_log) if e["id"] == pause and e["event"] == "start"][1:])
    assert resumed[0]["checkpoint_env"] is not None and json.loads(resumed[0]["checkpoint_env"])["slept"] >= 1
    worker.signal(signal.SIGTERM)
    worker.next_event(lambda e: e["what"] == "stopping")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_sigterm_lets_running_jobs_finish_and_a_second_stops_them(
    store: FileStore, side_log: Path, workers: Workers
) -> None:
    short = submit(store, job_argv("sleep", 0.5), side_log)
    worker: WorkerProcess = workers(shutdown_grace=30)
    worker.next_event(lambda e: e["what"] == "started")
    queued = submit(store, job_argv("sleep", 0.1), side_log)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert store.load(short).state == "complete"  # finished within the grace
    assert store.load(queued).state == "pending" and store.load(queued).lease.epoch == 0  # nothing new claimed

    long = submit(store, job_argv("sleep", 60), side_log)
    worker = workers(shutdown_grace=30)
    wait_until(lambda: any(e["id"] == long and e["event"] == "start" for e in read_log(side_log)), what="start")
    pid = next(e["pid"] for e in read_log(side_log) if e["id"] == long and e["event"] == "start")
    worker.signal(signal.SIGTERM)
    worker.next_event(lambda e: e["what"] == "stopping")  # signals do not queue: wait till it is seen
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    rec = store.load(long)
    assert rec.state == "pending" and rec.lease.owner == "" and is_orphan(rec, store.now())  # released for others
    assert gone(pid)


def test_a_recalled_job_is_left_for_another_worker(store: FileStore, side_log: Path, workers: Workers) -> None:
    """The worker that gives a recalled job back does not take it again within the grace [JOB-I9]."""
    job = submit(store, job_argv("sleep", 60), side_log)
    first: WorkerProcess = workers(concurrency=1, ttl=3.0)
    wait_until(lambda: store.load(job).checkpoint, what="the first checkpoint")
    rec = store.load(job)
    assert rec.lease.owner.startswith(first.owner)
    second: WorkerProcess = workers(concurrency=1, ttl=3.0, poll_interval=1.0)  # slower to look than the giver
    store.recall(job, rec.lease.epoch, "rebalance", "ops", 5.0)
    first.next_event(lambda e: e["what"] == "released" and e["id"] == job)
    second.next_event(lambda e: e["what"] == "started" and e["id"] == job)
    assert store.load(job).lease.owner.startswith(second.owner)
    starts = wait_until(lambda: [e for e in read_log(side_log) if e["id"] == job and e["event"] == "start"][1:])
    assert len(starts) == 1 and starts[0]["epoch"] == rec.lease.epoch + 1  # the giver did not take it back between
