"""--json shapes, pinned against docs/reference/json.md so the page cannot drift from the program."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

import pytest
from clitools import REPO, Clock, Jobctl

from jobctl import FileStore, Listing

DOC = REPO / "docs" / "reference" / "json.md"


def documented() -> dict[str, dict[str, Any]]:
    """Every ```json <shape>``` example of the page, parsed."""
    text = DOC.read_text(encoding="utf-8")
    return {name: json.loads(body) for name, body in re.findall(r"```json (\S+)\n(.*?)\n```", text, re.S)}


def keys(obj: dict[str, Any]) -> list[str]:
    return list(obj)


def one(jobctl: Jobctl, *args: str) -> dict[str, Any]:
    ran = jobctl(*args, "--json")
    assert ran.code == 0, ran.err
    assert len(ran.lines) == 1, ran.text
    obj: dict[str, Any] = json.loads(ran.lines[0])
    assert keys(obj)[0] == "v" and obj["v"] == 1
    return obj


def test_the_page_documents_every_shape() -> None:
    assert set(documented()) == {
        *("job", "watch-change", "watch-gone", "watch-quiet", "sweep", "gc", "paths", "alert"),
        *("run", "worker-event", "logs", "pipeline", "schedule", "schedule-remove", "init", "import", "db"),
    }


def test_the_alert_posted_to_a_webhook_has_the_documented_shape() -> None:
    from jobctl import webhook

    shape = documented()["alert"]
    made = webhook.message(
        shape["id"], shape["kind"], shape["error"], shape["attempt"], ("nightly", "download"), shape["worker"]
    )
    assert made == shape


def test_every_single_job_command_prints_the_job_shape(jobctl: Jobctl) -> None:
    shape = keys(documented()["job"])
    job = one(jobctl, "submit", "--kind", "download", "--spec", '{"url": "x", "n": 1.50}')
    assert keys(job) == shape
    assert job["spec"] == {"url": "x", "n": 1.5}
    job_id = job["id"]
    results = [
        one(jobctl, "claim", job_id, "--owner", "a", "--ttl", "300"),
        one(jobctl, "progress", job_id, "--epoch", "1", "--done", "1", "--checkpoint", '{"o": 1}'),
        one(jobctl, "checkpoint", job_id, '{"o": 2}', "--epoch", "1"),
        one(jobctl, "renew", job_id, "--epoch", "1"),
        one(jobctl, "recall", job_id, "--reason", "r"),
        one(jobctl, "show", job_id),
        one(jobctl, "intent", job_id, "pause"),
        one(jobctl, "approve", job_id),
        one(jobctl, "release", job_id, "--epoch", "1"),
        one(jobctl, "claim", job_id, "--owner", "b", "--format", "json"),
        one(jobctl, "finish", job_id, "--epoch", "2", "--state", "complete"),
        one(jobctl, "cancel", jobctl.submit()),
    ]
    for obj in results:
        assert keys(obj) == shape
    assert results[1]["checkpoint"] == {"o": 1}
    assert results[4]["recall"]["reason"] == "r"
    assert [results[6]["intent"], results[7]["intent"]] == ["pause", "run"]
    assert (results[-2]["state"], results[-1]["state"]) == ("complete", "cancelled")


def test_opaque_values_keep_their_spelling(jobctl: Jobctl) -> None:
    ran = jobctl("submit", "--kind", "k", "--spec", '{"n": 1.50, "big": 12345678901234567890, "s": "a\\/b"}', "--json")
    assert '"spec":{"n":1.50,"big":12345678901234567890,"s":"a\\/b"}' in ran.text


def test_lists_are_json_lines(jobctl: Jobctl) -> None:
    shape = keys(documented()["job"])
    a, b = jobctl.submit(), jobctl.submit()
    for command in ("list", "orphans"):
        ran = jobctl(command, "--json")
        rows = [json.loads(line) for line in ran.lines]
        assert [row["id"] for row in rows] == [a, b]
        assert all(keys(row) == shape and row["v"] == 1 for row in rows)
    jobctl("claim", a, "--owner", "x")
    jobctl("finish", a, "--epoch", "1", "--state", "complete")
    assert keys(json.loads(jobctl("wait", a, "--json").lines[0])) == shape


def test_sweep_and_paths(jobctl: Jobctl) -> None:
    shapes = documented()
    assert keys(one(jobctl, "sweep")) == keys(shapes["sweep"])
    paths = one(jobctl, "paths")
    assert keys(paths) == keys(shapes["paths"])
    assert paths["healthy"] is True and paths["rung"] == "JOB_STORE"


class _Vanishing:
    """A store whose one record is there at the first look and gone after."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.looks = 0

    def now(self) -> Any:
        return self.store.now()

    def list(self) -> Listing:
        self.looks += 1
        return self.store.list() if self.looks == 1 else Listing()

    def notices(self, *, news_only: bool = False) -> None:
        return None  # a store that cannot say when it changed: the watch polls it


def test_watch_events(jobctl: Jobctl) -> None:
    shapes = documented()
    job = jobctl.submit()
    ran = jobctl("watch", "--json", "--quiet-after", "0.2", "--exit-on-quiet", store=_Vanishing(jobctl.store()))  # type: ignore[arg-type]
    events = [json.loads(line) for line in ran.lines]
    assert [event["event"] for event in events] == ["change", "gone", "quiet"]
    change, gone, quiet = events
    assert keys(change) == keys(shapes["watch-change"])
    assert keys(change["job"]) == keys(shapes["job"])[1:]  # the job without its own "v"
    assert change["job"]["id"] == job
    assert keys(gone) == keys(shapes["watch-gone"]) and gone["id"] == job
    assert keys(quiet) == keys(shapes["watch-quiet"]) and quiet["seconds"] == 0.2


def test_plain_watch_reports_a_record_that_went_away(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    ran = jobctl("watch", "--quiet-after", "0.2", "--exit-on-quiet", store=_Vanishing(jobctl.store()))  # type: ignore[arg-type]
    assert ran.lines == [f"{job} kind=test state=pending done=0 total=0 owner=-", f"{job} gone"]


@pytest.mark.parametrize("shape", ["job", "watch-change"])
def test_documented_examples_are_well_formed(shape: str) -> None:
    obj = documented()[shape]
    job = obj if shape == "job" else obj["job"]
    assert set(job["recall"] or {}) <= {"reason", "by", "at", "until"}
    assert job["state"] in ("pending", "running", "transferred", "complete", "failed", "cancelled")


def test_gc_and_retry(jobctl: Jobctl) -> None:
    shapes = documented()
    job = jobctl.submit()
    old = jobctl.store(Clock(datetime(2020, 1, 1, tzinfo=timezone.utc)))
    old.finish(job, old.claim(job, "w", 60).lease.epoch, "failed", error="boom")
    retried = [json.loads(line) for line in jobctl("retry", job, "--json").lines]
    assert len(retried) == 1 and keys(retried[0]) == keys(shapes["job"])
    for dry in (True, False):
        ran = jobctl("gc", "--older-than", "1d", "--json", *(["--dry-run"] if dry else []))
        objs = [json.loads(line) for line in ran.lines]
        assert [keys(obj) for obj in objs] == [keys(shapes["gc"])]
        assert objs[0]["id"] == job and objs[0]["removed"] is not dry
