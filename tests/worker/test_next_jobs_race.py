"""A processor's next jobs when its holder loses the lease between submitting them and completing the job.

The holder submits the next jobs, then stalls; its lease lapses, a successor
adopts the job and runs the processor again, which submits the same derived
ids (exists-ok) and completes it. The first holder's completing write is
refused by the fencing. Every next job exists once and runs once
(docs/reference/python-api.md, "Next jobs").
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from workertools import wait_until

import jobctl
from jobctl import Record, lifecycle, processor, results, schedule
from jobctl.processor import NewJob, next_id, submit_next

pytestmark = pytest.mark.timeout(60)


def _worker(store: Any, name: str, ttl: float) -> jobctl.Worker:
    return jobctl.Worker(store, name=name, ttl=ttl, grace=0.5, poll_interval=0.05, on_event=lambda event: None)


def test_a_successor_that_runs_the_processor_again_submits_no_next_job_twice(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = Record(kind="script", spec={})
    schedule.plan(parent, pipeline="gv")
    parent_id = store.submit(parent)
    runs: Counter[str] = Counter()  # runs of the parent by epoch, and of each next job by id
    lock = threading.Lock()

    def script(j: jobctl.Job) -> jobctl.Result:
        with lock:
            runs[f"script@{j.epoch}"] += 1
        voice = NewJob("voice", {"epoch": j.epoch})  # the re-run computes another spec: the first stands
        image = NewJob("image", {"epoch": j.epoch})
        video = NewJob("video", after=[voice, image])
        return jobctl.Result(data={"epoch": j.epoch}, next_jobs=[voice, image, video])

    def stage(j: jobctl.Job) -> None:
        with lock:
            runs[j.id] += 1

    submitted, successor_done = threading.Event(), threading.Event()
    real = processor.submit_next

    def stalling(store_: Any, rec: Record, next_jobs: Any) -> list[str]:
        made = real(store_, rec, next_jobs)
        if rec.lease.owner.startswith("first@"):
            submitted.set()  # the next jobs are in the store; the holder stalls before its completing write
            successor_done.wait(30)
        return made

    monkeypatch.setattr(processor, "submit_next", stalling)
    first = _worker(store, "first", ttl=1.0)
    first.add_processor("script", script)
    outcome: list[Any] = []
    runner = threading.Thread(target=lambda: outcome.append(first.once()), daemon=True)
    runner.start()
    assert submitted.wait(30)
    held = store.load(parent_id)
    assert held.state == "running" and held.lease.owner.startswith("first@")
    wait_until(lambda: store.now() > store.load(parent_id).lease.expires_at, 10, "the stalled holder's lease to lapse")

    successor = _worker(store, "successor", ttl=5.0)
    successor.add_processor("script", script)
    for kind in ("voice", "image", "video"):
        successor.add_processor(kind, stage)
    successor.drain()
    successor_done.set()
    runner.join(30)
    assert not runner.is_alive()

    rec = store.load(parent_id)
    assert rec.state == "complete" and rec.lease.owner.startswith("successor@")
    # The successor's completing write, not the stalled holder's: it was refused by the epoch.
    assert results.result_of(rec) == {"epoch": held.lease.epoch + 1}
    assert {k: n for k, n in runs.items() if k.startswith("script@")} == {
        f"script@{held.lease.epoch}": 1,
        f"script@{held.lease.epoch + 1}": 1,
    }
    ids = [next_id(rec, n, kind) for n, kind in enumerate(["voice", "image", "video"])]
    assert sorted(store.ids()) == sorted([parent_id, *ids])  # no next job twice
    for job_id in ids:
        child = store.load(job_id)
        assert child.state == "complete" and runs[job_id] == 1, job_id
    assert store.load(ids[0]).opaque_text("spec") == f'{{"epoch":{held.lease.epoch}}}'  # the first submission stood
    assert outcome[0].counts["refused"] == 1  # the stalled holder's completing write


# -- a parent retried after its run submitted its next jobs ---------------------------------------------


def _failed_after_submitting(store: Any, parent_id: str, next_jobs: list[NewJob]) -> list[str]:
    """What a holder that stalled after submitting the next jobs leaves when its successor's run fails for good."""
    made = submit_next(store, store.load(parent_id), next_jobs)
    claimed = store.claim(parent_id, "successor", 30)
    store.finish(parent_id, claimed.lease.epoch, "failed", error="attempt 1: NotRetryable: down")
    return made


def _stages() -> list[NewJob]:
    voice = NewJob("voice")
    return [voice, NewJob("video", after=[voice])]


def _counting(store: Any, runs: Counter[str]) -> jobctl.Worker:
    worker = _worker(store, "w", ttl=5.0)
    worker.add_processor("script", lambda j: jobctl.Result(next_jobs=_stages()))
    for kind in ("voice", "video"):
        worker.add_processor(kind, lambda j: runs.update([j.kind]))
    return worker


def test_a_parent_retried_with_its_dependents_runs_each_next_stage_once(store: Any) -> None:
    """The page's Retry (`jobctl retry --with-dependents`) and the new parent's run make one job a stage."""
    parent = Record(kind="script", spec={})
    schedule.plan(parent, pipeline="gv")
    parent_id = store.submit(parent)
    voice, video = _failed_after_submitting(store, parent_id, _stages())
    runs: Counter[str] = Counter()
    worker = _counting(store, runs)
    worker.drain()  # cancels the next jobs: their parent failed
    assert {store.load(i).state for i in (voice, video)} == {"cancelled"}
    answers = lifecycle.retry(store, parent_id, with_dependents=True, by="alice")
    assert [(a.old, a.created) for a in answers] == [(parent_id, True), (voice, True), (video, True)]
    worker.drain()
    assert runs == {"voice": 1, "video": 1}
    new_parent, new_voice, new_video = (a.new for a in answers)
    assert store.load(new_parent).state == "complete"
    assert {store.load(i).state for i in (new_voice, new_video)} == {"complete"}
    assert len(store.ids()) == 6
    assert schedule.after_of(store.load(new_video)) == [new_parent, new_voice]


def test_a_parent_retried_alone_makes_its_next_jobs_the_replacements_a_later_retry_finds(store: Any) -> None:
    parent_id = store.submit(Record(kind="script", spec={}))
    voice, video = _failed_after_submitting(store, parent_id, _stages())
    runs: Counter[str] = Counter()
    worker = _counting(store, runs)
    worker.drain()
    (alone,) = lifecycle.retry(store, parent_id, by="alice")  # `jobctl retry` without its dependents
    worker.drain()
    assert runs == {"voice": 1, "video": 1}
    new_voice, new_video = (
        lifecycle.replacement_of(store, store.load(voice)),
        lifecycle.replacement_of(store, store.load(video)),
    )
    assert new_voice is not None and new_video is not None  # the new run's next jobs replace the ended ones
    assert schedule.after_of(store.load(new_video)) == [alone.new, new_voice]
    again = lifecycle.retry(store, parent_id, with_dependents=True, by="bob")  # a second click, later
    assert [(a.new, a.created) for a in again] == [(alone.new, False), (new_voice, False), (new_video, False)]
    worker.drain()
    assert runs == {"voice": 1, "video": 1} and len(store.ids()) == 6


def test_a_parent_retried_twice_takes_over_the_next_jobs_down_the_chain(store: Any) -> None:
    parent_id = store.submit(Record(kind="script", spec={}))
    _failed_after_submitting(store, parent_id, _stages())
    runs: Counter[str] = Counter()
    worker = _counting(store, runs)
    worker.drain()
    second, voice, video = (a.new for a in lifecycle.retry(store, parent_id, with_dependents=True, by="alice"))
    # The replacement's run, too, submits its next jobs (the ones the retry made) and then fails for good.
    assert _failed_after_submitting(store, second, _stages()) == [voice, video]
    worker.drain()
    (third,) = lifecycle.retry(store, second, by="alice")
    worker.drain()
    assert runs == {"voice": 1, "video": 1} and store.load(third.new).state == "complete"
    third_voice = lifecycle.replacement_of(store, store.load(voice))
    third_video = lifecycle.replacement_of(store, store.load(video))
    assert third_voice is not None and third_video is not None
    assert schedule.after_of(store.load(third_video)) == [third.new, third_voice]
    assert len(store.ids()) == 9
