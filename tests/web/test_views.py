"""The API's job shape and the submission check, without a server: the same words as the command line."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from webtools import serve_env

from jobctl import FileStore, Invalid, Record
from jobctl.schedule import plan
from jobctl.web.submission import idempotent_id, record_from
from jobctl.web.views import changed_pipelines, changed_views, job_view, pipeline_names, pipeline_view, step

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_the_step_of_each_kind_of_job(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    pending = store.submit(Record(id="", kind="k", spec={}))
    held = store.submit(plan(Record(id="", kind="k", spec={}), hold=True, by="ops"))
    running = store.submit(Record(id="", kind="k", spec={}))
    store.claim(running, "w", 60)
    done = store.submit(Record(id="", kind="k", spec={}))
    store.finish(done, store.claim(done, "w", 60).lease.epoch, "complete")
    failed = store.submit(Record(id="", kind="k", spec={}))
    store.finish(failed, store.claim(failed, "w", 60).lease.epoch, "failed", error="exit status 2")
    cancelled = store.submit(Record(id="", kind="k", spec={}))
    store.cancel(cancelled, "ops")
    now = store.now()
    got = {job_id: step(store.load(job_id), now) for job_id in (pending, held, running, done, failed, cancelled)}
    assert list(got.values()) == ["pending", "held", "running", "done", "failed", "cancelled"]
    store.set_intent(held, "run", "ops")
    assert step(store.load(held), now) == "pending"  # approved: it may start


def test_a_submission_makes_the_record_jobctl_submit_makes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = FileStore(root)
    args = ["--kind", "report", "--spec", '{"day": 1}', "--total", "5", "--requires", "pdf,net"]
    args += ["--retries", "2", "--retry-intervals", "5,50", "--no-retry-on", "2,64", "--after", "a1"]
    args += ["--pipeline", "nightly", "--stage", "sum", "--hold", "--by", "ops"]
    ran = subprocess.run(
        [sys.executable, "-m", "jobctl", "submit", *args],
        env=serve_env(root),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    by_cli = store.load(ran.stdout.strip())
    body = {
        "kind": "report",
        "spec": {"day": 1},
        "total": 5,
        "requires": ["pdf", "net"],
        "retries": 2,
        "retry_intervals": [5, 50],
        "no_retry_on": [2, 64],
        "after": ["a1"],
        "pipeline": "nightly",
        "stage": "sum",
        "hold": True,
        "by": "ops",
    }
    by_http = store.load(store.submit(record_from(body, NOW, "http@127.0.0.1")))
    assert by_http.extensions == by_cli.extensions
    assert by_http.critical == by_cli.critical
    assert (by_http.kind, by_http.progress.total, by_http.requires) == (by_cli.kind, 5, ["pdf", "net"])
    assert by_http.intent is not None and by_cli.intent is not None
    assert (by_http.intent.want, by_http.intent.by) == (by_cli.intent.want, by_cli.intent.by) == ("pause", "ops")
    assert job_view(by_http, NOW)["spec"] == {"day": 1}


@pytest.mark.parametrize("key", ["", "x" * 201, "naïve", "tab\there"])
def test_an_idempotency_key_must_be_short_printable_ascii(key: str) -> None:
    with pytest.raises(Invalid, match="Idempotency-Key"):
        idempotent_id(key)


def test_the_same_key_is_the_same_id_everywhere() -> None:
    # What docs/reference/http.md promises: a server restarted, or another on the same store, maps a key alike.
    assert idempotent_id("order-1234") == "http-" + hashlib.sha256(b"order-1234").hexdigest()[:40]
    assert idempotent_id("order-1234") != idempotent_id("order-1235")


def test_the_stream_sends_a_job_again_only_when_its_view_moved(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    a = store.submit(Record(id="", kind="k", spec={}))
    b = store.submit(Record(id="", kind="k", spec={}))
    seen, changed, gone = changed_views({}, store.list(), NOW)
    assert [v["id"] for v in changed] == sorted([a, b]) and gone == []  # listing order: by id
    epoch = store.claim(a, "w", 60).lease.epoch
    seen, changed, gone = changed_views(seen, store.list(), NOW)
    assert [v["id"] for v in changed] == [a]
    store.renew(a, epoch, 180)  # a renewal moves nothing a page shows
    seen, changed, gone = changed_views(seen, store.list(), NOW)
    assert changed == []
    store.cancel(b, "ops")
    store.remove(b)
    seen, changed, gone = changed_views(seen, store.list(), NOW)
    assert changed == [] and gone == [b]


def test_the_stream_says_of_each_pipeline_what_the_api_says(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")

    def add(kind: str, pipeline: str | None, after: tuple[str, ...] = ()) -> str:
        rec = Record(id="", kind=kind, spec={})
        if pipeline is not None or after:
            plan(rec, pipeline=pipeline, after=after)
        return store.submit(rec)

    outside = add("fetch", None)  # a job of no pipeline that a stage waits for: its state is in the stage's detail
    add("fetch", "a")
    add("report", "a", (outside,))
    other = add("fetch", "b")
    records = list(store.list())
    now = store.now()
    seen, changed, gone = changed_pipelines({}, records, now)
    whole = {name: pipeline_view(records, name, now) for name in pipeline_names(records)}
    assert {view["name"]: view for view in changed} == whole and gone == []
    again, changed, gone = changed_pipelines(seen, records, now)
    assert again == seen and changed == [] and gone == []  # nothing moved: nothing sent

    store.finish(outside, store.claim(outside, "w", 60).lease.epoch, "complete")  # moves a stage of "a" only
    store.cancel(other, "ops")
    assert store.remove(other)  # the last job of "b": the pipeline is gone
    records = list(store.list())
    _, changed, gone = changed_pipelines(seen, records, now)
    assert changed == [pipeline_view(records, "a", now)] and gone == ["b"]
