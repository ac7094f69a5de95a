"""The worker loop in this process (fast checks of its rules); tests/worker/test_processes.py uses real workers.

One test here starts a worker process all the same: an idle worker woken by the store's notices.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from workertools import in_process, job_argv, read_log, submit

from jobctl import FileStore, Record, runner, schedule
from jobctl.worker import Event, Worker

pytestmark = pytest.mark.timeout(60)


def worker(store: FileStore, **options: object) -> Worker:
    return in_process(store, **options)


def test_the_owner_is_unique_to_the_process(store: FileStore) -> None:
    assert worker(store, name="batch").owner == f"batch@{socket.gethostname()}:{os.getpid()}"


def test_drain_runs_what_its_own_jobs_unblock(store: FileStore, side_log: Path) -> None:
    a = submit(store, job_argv("exit", 0), side_log)
    b = submit(store, job_argv("exit", 0), side_log, after=[a])
    c = submit(store, job_argv("exit", 0), side_log, after=[b])
    summary = worker(store).run("drain")
    assert summary["complete"] == 3
    assert [line["id"] for line in read_log(side_log) if line["event"] == "start"] == [a, b, c]


def test_once_runs_only_what_was_runnable_at_the_start(store: FileStore, side_log: Path) -> None:
    a = submit(store, job_argv("exit", 0), side_log)
    b = submit(store, job_argv("exit", 0), side_log, after=[a])
    summary = worker(store).run("once")
    assert summary["complete"] == 1
    assert store.load(a).state == "complete" and store.load(b).state == "pending"


def test_oldest_first(store: FileStore, side_log: Path) -> None:
    ids = [submit(store, job_argv("exit", 0), side_log) for _ in range(5)]
    worker(store, concurrency=1).run("drain")
    assert [line["id"] for line in read_log(side_log) if line["event"] == "start"] == ids


def test_kinds_without_a_processor_are_left_alone(store: FileStore) -> None:
    foreign = store.submit(Record(kind="download", spec={"url": "x"}))
    mine = submit(store, ["true"])
    summary = worker(store).run("drain")
    assert summary["complete"] == 1
    assert store.load(foreign).state == "pending" and store.load(foreign).lease.epoch == 0
    assert store.load(mine).state == "complete"


def counting_starts(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """Count the guardian processes started and the store's notices opened (the board's, a keeper's lookout)."""
    guardians: list[int] = []
    notices: list[int] = []
    spawn, listen = runner.Guardian._spawn, store.notices

    def counted_spawn(guardian: runner.Guardian) -> None:
        guardians.append(1)
        spawn(guardian)

    def counted_notices(**options: Any) -> Any:
        notices.append(1)
        return listen(**options)

    monkeypatch.setattr(runner.Guardian, "_spawn", counted_spawn)
    monkeypatch.setattr(store, "notices", counted_notices)
    return guardians, notices


def test_a_pass_that_runs_nothing_starts_no_guardian_and_no_lookout(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cron job's ``worker --once`` that finds nothing to run pays for no process and no second inotify."""
    store.submit(Record(kind="download", spec={"url": "x"}))  # nothing here runs it
    guardians, notices = counting_starts(store, monkeypatch)
    assert worker(store).run("once").ran == {}
    assert (guardians, notices) == ([], [1])  # the board's notices only


def test_the_first_job_run_starts_the_guardian_and_the_lookout(
    store: FileStore, side_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [submit(store, job_argv("exit", 0), side_log) for _ in range(3)]
    guardians, notices = counting_starts(store, monkeypatch)
    summary = worker(store, concurrency=2).run("drain")
    assert summary.ran == dict.fromkeys(ids, "complete")
    assert (guardians, notices) == ([1], [1, 1])  # one of each for the whole worker, however many jobs


def test_a_job_is_not_started_when_no_guardian_can_be_started(
    store: FileStore, side_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No code of a job runs unsupervised: without a guardian process the child gets no go."""

    def refused(_guardian: runner.Guardian) -> None:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(runner.Guardian, "_spawn", refused)
    job = submit(store, job_argv("exit", 0), side_log)
    events: list[Event] = []
    worker(store, on_event=events.append).run("once")
    assert [line for line in read_log(side_log) if line["event"] == "start"] == []
    said = [e.detail for e in events if e.job_id == job and e.what in ("failed", "retry")]
    expected = "no guardian process to supervise it (cannot start the guardian: Resource temporarily unavailable)"
    assert len(said) == 1 and expected in said[0], said


def test_a_handler_runs_its_kind(store: FileStore, tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = store.submit(Record(kind="download", spec={"url": "x"}))
    worker(store, handlers={"download": f'cat > {out}; echo " $JOB_ID" >> {out}'}).run("drain")
    assert store.load(job).state == "complete"
    assert out.read_text() == f'{{"url":"x"}} {job}\n'


def test_a_failure_cancels_the_whole_chain_below_it(store: FileStore) -> None:
    a = submit(store, ["false"])
    b = submit(store, ["true"], after=[a])
    c = submit(store, ["true"], after=[b])
    unrelated = submit(store, ["true"])
    events: list[Event] = []
    worker(store, on_event=events.append).run("drain")
    assert store.load(a).state == "failed"
    assert (store.load(b).state, store.load(b).error) == ("cancelled", f"cancelled: dependency {a} ended failed")
    assert (store.load(c).state, store.load(c).error) == ("cancelled", f"cancelled: dependency {b} ended cancelled")
    assert store.load(unrelated).state == "complete"
    assert store.load(b).want == "cancel"  # recorded as asked, by the worker
    assert [e.job_id for e in events if e.what == "cancelled"] == [b, c]


def test_a_missing_dependency_cancels_at_once(store: FileStore) -> None:
    job = submit(store, ["true"], after=["1-nosuchjob"])
    worker(store).run("once")
    rec = store.load(job)
    assert rec.state == "cancelled" and "1-nosuchjob does not exist" in rec.error


def named(store: FileStore, job_id: str, after: str) -> str:
    """Submit a ``true`` job under ``job_id`` that waits for ``after``."""
    rec = Record(id=job_id, kind="shell", spec={"argv": ["true"]})
    schedule.plan(rec, after=[after])
    return store.submit(rec)


def test_a_cycle_of_two_jobs_is_cancelled_naming_it(store: FileStore) -> None:
    # A dependency may name a job that does not exist yet, so two submits make a cycle.
    b = named(store, "cyc-b", "cyc-a")
    a = named(store, "cyc-a", "cyc-b")
    events: list[Event] = []
    worker(store, on_event=events.append).run("drain")
    assert (store.load(a).state, store.load(a).error) == (
        "cancelled",
        "cancelled: waits for itself: cyc-a -> cyc-b -> cyc-a",
    )
    assert (store.load(b).state, store.load(b).error) == (
        "cancelled",
        "cancelled: waits for itself: cyc-b -> cyc-a -> cyc-b",
    )
    assert store.load(a).want == "cancel"  # as any doomed dependency: asked, then written under a claim
    assert sorted(e.job_id for e in events if e.what == "cancelled") == [a, b]  # each once
    assert not [e for e in events if e.what == "started"]


def test_a_longer_cycle_and_its_dependents_are_cancelled_by_one_drain(store: FileStore) -> None:
    x1 = named(store, "x1", "x3")
    x2 = named(store, "x2", "x1")
    x3 = named(store, "x3", "x2")
    below = submit(store, ["true"], after=[x2])  # waits on a member of the cycle, not on itself
    first = submit(store, ["true"])
    then = submit(store, ["true"], after=[first])  # a chain without a cycle still runs, in order
    events: list[Event] = []
    worker(store, on_event=events.append).run("drain")
    assert store.load(x1).error == "cancelled: waits for itself: x1 -> x3 -> x2 -> x1"
    assert store.load(x2).error == "cancelled: waits for itself: x2 -> x1 -> x3 -> x2"
    assert store.load(x3).error == "cancelled: waits for itself: x3 -> x2 -> x1 -> x3"
    assert (store.load(below).state, store.load(below).error) == (
        "cancelled",
        "cancelled: dependency x2 ended cancelled",
    )
    assert [store.load(j).state for j in (first, then)] == ["complete", "complete"]
    assert [e.job_id for e in events if e.what == "started"] == [first, then]
    assert sorted(e.job_id for e in events if e.what == "cancelled") == sorted([x1, x2, x3, below])


def test_once_cancels_a_cycle_too(store: FileStore) -> None:
    rec = Record(id="one-a", kind="shell", spec={"argv": ["true"]})
    rec.extensions[schedule.AFTER] = {"jobs": ["one-a"]}  # planted: plan refuses it, another writer may not
    rec.critical.append(schedule.AFTER)
    a = store.submit(rec)
    worker(store).run("once")
    assert store.load(a).error == "cancelled: waits for itself: one-a -> one-a"


def test_a_held_job_waits_for_approval(store: FileStore) -> None:
    job = submit(store, ["true"], hold=True)
    worker(store).run("drain")
    assert store.load(job).state == "pending"
    store.set_intent(job, "run", "approver")
    worker(store).run("drain")
    assert store.load(job).state == "complete"


def test_a_cancel_asked_of_a_queued_job_is_honoured_without_running_it(store: FileStore, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    job = submit(store, ["touch", str(marker)])
    store.set_intent(job, "cancel", "dave")
    events: list[Any] = []
    summary = worker(store, on_event=events.append).run("drain")
    rec = store.load(job)
    assert (rec.state, rec.error) == ("cancelled", "cancelled at the request of dave") and not marker.exists()
    assert [event.what for event in events if event.job_id == job] == ["cancelled"]  # never logged as started
    assert (summary["cancelled"], summary["started"]) == (1, 0)


def test_the_alert_runs_once_when_a_job_finally_fails(store: FileStore, tmp_path: Path) -> None:
    out = tmp_path / "alerts"
    job = submit(store, ["sh", "-c", "exit 7"], intervals=[0.05])
    alert = f'echo "$JOB_ID|$JOB_KIND|$JOB_ERROR|$JOB_ATTEMPT|$JOB_EPOCH" >> {out}'
    summary = worker(store, on_failure=alert).run("drain")
    # drain waits for the retry of a job it ran, then the final failure alerts once
    assert (summary["retry"], summary["failed"], summary["alert"]) == (1, 1, 1)
    assert store.load(job).state == "failed" and not summary.all_complete
    assert out.read_text() == f"{job}|shell|attempt 2: exit status 7|2|\n"


class CountingWorker(Worker):
    """A worker that counts its main loop's waits."""

    waits = 0

    def _idle(self, *args: Any) -> None:
        self.waits += 1
        super()._idle(*args)


@pytest.mark.file_only("another FileStore handle on the same directory writes beside the worker")
def test_writes_to_the_store_do_not_wake_a_worker_whose_slots_are_all_taken(store: FileStore, tmp_path: Path) -> None:
    flag = tmp_path / "writes-done"
    job = store.submit(Record(kind="shell", spec={"argv": ["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.02; done"]}))
    worker = CountingWorker(store, concurrency=1, poll_interval=30.0)
    seen: dict[str, int] = {}
    written: list[str] = []

    def write_elsewhere() -> None:
        other = FileStore(store.root)
        for _ in range(30):  # somebody else's submits while the job runs: notices the worker's board gets
            written.append(other.submit(Record(kind="elsewhere", spec={})))
            time.sleep(0.01)
        flag.touch()

    def on_event(event: Event) -> None:
        seen[event.what] = worker.waits
        if event.what == "started":
            threading.Thread(target=write_elsewhere).start()

    worker.on_event = on_event
    summary = worker.run("drain")
    assert summary.ran == {job: "complete"}
    assert len(written) == 30  # the writes happened while the job ran (it waited for them)
    # One wait from the start to the end: the slot's report ended it, not the 30 writes.
    assert seen["complete"] - seen["started"] == 1


#: A poll interval no test waits out: a job taken before it was learnt of by a notice (Store.notices).
LONG_POLL = 600.0


def test_an_idle_worker_takes_a_new_job_without_waiting_its_poll_interval(store: FileStore, workers: Any) -> None:
    """inotify on a directory, LISTEN/NOTIFY on PostgreSQL: either wakes the idle worker."""
    w = workers(poll_interval=LONG_POLL)
    first = submit(store, ["true"])
    # Its first job done, the worker has looked and found nothing more: it is idle, for LONG_POLL.
    w.next_event(lambda e: e["what"] == "complete" and e["id"] == first, timeout=30)
    second = submit(store, ["true"])
    w.next_event(lambda e: e["what"] == "complete" and e["id"] == second, timeout=30)
