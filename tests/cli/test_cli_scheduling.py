"""`submit`'s scheduling options and `claim --next`: only runnable orphans are taken, oldest first."""

from __future__ import annotations

import json
from typing import Any

from clitools import Clock, Jobctl


def _extensions(jobctl: Jobctl, job: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(jobctl.record(job))
    extensions: dict[str, Any] = record.get("extensions", {})
    return extensions


def test_submit_writes_the_scheduling_extensions(jobctl: Jobctl) -> None:
    first = jobctl.submit()
    job = jobctl.submit(
        "--retries",
        "2",
        "--retry-intervals",
        "5,15",
        "--no-retry-on",
        "2,64",
        "--after",
        first,
        "--pipeline",
        "nightly",
        "--stage",
        "fetch",
    )
    ext = _extensions(jobctl, job)
    assert ext["jobctl.run/retry@1"] == {"intervals": [5, 15], "no_retry_on": [2, 64], "failures": 0}
    assert ext["jobctl.run/after@1"] == {"jobs": [first]}
    assert ext["jobctl.run/pipeline@1"] == {"name": "nightly", "stage": "fetch"}
    record = json.loads(jobctl.record(job))
    assert "jobctl.run/after@1" in record["critical"]


def test_hold_submits_paused_until_approved(jobctl: Jobctl) -> None:
    job = jobctl.submit("--hold", "--by", "alice")
    record = json.loads(jobctl.record(job))
    assert record["intent"]["want"] == "pause" and record["intent"]["by"] == "alice"
    assert jobctl("orphans").out == b""
    assert jobctl("claim", "--next").code == 3
    jobctl("approve", job)
    assert jobctl("claim", "--next", "--owner", "w").lines == [f"{job} epoch=1 state=running checkpoint=none"]


def test_claim_next_takes_the_oldest_runnable_orphan_of_the_kind(jobctl: Jobctl) -> None:
    fetch = jobctl("submit", "--kind", "fetch").text.strip()
    build = jobctl("submit", "--kind", "build", "--after", fetch).text.strip()
    late = jobctl("submit", "--kind", "fetch", "--not-before", "1h").text.strip()
    other = jobctl("submit", "--kind", "fetch").text.strip()
    assert jobctl("claim", "--next", "--kind", "build").code == 3  # waits for fetch
    assert jobctl("claim", "--next", "--kind", "fetch", "--owner", "w").lines[0].startswith(f"{fetch} epoch=1")
    assert jobctl("claim", "--next", "--kind", "fetch", "--owner", "w").lines[0].startswith(f"{other} epoch=1")
    assert jobctl("claim", "--next", "--kind", "fetch").code == 3  # `late` is not due yet
    jobctl("finish", fetch, "--epoch", "1", "--state", "complete")
    assert jobctl("claim", "--next", "--owner", "w").lines[0].startswith(f"{build} epoch=1")
    assert late not in jobctl("list", "--state", "running").text


def test_claim_next_format_env_is_ready_for_eval(jobctl: Jobctl) -> None:
    job = jobctl("submit", "--kind", "backup", "--id", "b-1").text.strip()
    jobctl("claim", job, "--owner", "a", "--ttl", "0")
    jobctl("checkpoint", job, "{}", "--epoch", "1")  # refused: lapsed
    ran = jobctl("claim", "--next", "--format", "env", "--owner", "b")
    assert ran.out == b"JOB_ID=b-1 JOB_EPOCH=2 JOB_KIND=backup JOB_CHECKPOINT=null\n"


def test_env_format_quotes_the_checkpoint_for_the_shell(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a", "--ttl", "300")
    jobctl("checkpoint", job, '{"name": "it\'s"}', "--epoch", "1")
    jobctl("release", job, "--epoch", "1")
    ran = jobctl("claim", job, "--format", "env", "--owner", "c")
    assert ran.text == f"JOB_ID={job} JOB_EPOCH=2 JOB_KIND=test JOB_CHECKPOINT=" + '\'{"name":"it\'"\'"\'s"}\'\n'


def test_not_before_accepts_a_delay_or_an_instant(jobctl: Jobctl, fixed_clock: Clock) -> None:
    store = jobctl.store(fixed_clock)
    soon = jobctl("submit", "--kind", "k", "--not-before", "90s", store=store).text.strip()
    then = jobctl("submit", "--kind", "k", "--not-before", "2031-01-01T00:00:00Z", store=store).text.strip()
    assert _extensions(jobctl, soon)["jobctl.run/retry@1"]["not_before"] == "2030-01-02T03:05:35.987654Z"
    assert _extensions(jobctl, then)["jobctl.run/retry@1"]["not_before"] == "2031-01-01T00:00:00.000000Z"
    assert jobctl("submit", "--kind", "k", "--not-before", "tomorrow").code == 9


def test_list_json_shows_attempt_dependencies_and_stage(jobctl: Jobctl) -> None:
    first = jobctl.submit()
    job = jobctl.submit("--after", first, "--pipeline", "nightly", "--retries", "1")
    rows = {row["id"]: row for row in map(json.loads, jobctl("list", "--json").lines)}
    row = rows[job]
    assert (row["attempt"], row["after"], row["pipeline"], row["stage"]) == (1, [first], "nightly", "test")
    assert row["blocked"] == {"reason": "waiting", "detail": f"waiting for {first} (pending)"}
    assert rows[first]["blocked"] is None


def _break_scheduling(jobctl: Jobctl, job: str) -> None:
    path = jobctl.root / "jobs" / f"{job}.json"
    record = json.loads(path.read_text())
    record["content"].append("jobctl.run/retry@1")
    record["extensions"] = {"jobctl.run/retry@1": "not an object"}
    path.write_text(json.dumps(record, indent=2) + "\n")


def test_one_malformed_record_does_not_stop_claim_next(jobctl: Jobctl) -> None:
    broken = jobctl.submit()
    good = jobctl.submit()
    _break_scheduling(jobctl, broken)
    ran = jobctl("claim", "--next", "--owner", "w")
    assert ran.out == f"{good} epoch=1 state=running checkpoint=none\n".encode()
    assert ran.err == f"jobctl: {broken}: skipped: extension jobctl.run/retry@1 is not an object\n"
    rows = {row["id"]: row for row in map(json.loads, jobctl("list", "--json").lines)}
    assert rows[broken]["blocked"]["reason"] == "invalid"


def test_submit_refuses_a_job_that_would_wait_for_itself(jobctl: Jobctl) -> None:
    # A dependency may not exist yet: cyc-c is accepted, and so is cyc-b, which waits for it.
    assert jobctl("submit", "--kind", "k", "--id", "cyc-c", "--after", "cyc-a").code == 0
    assert jobctl("submit", "--kind", "k", "--id", "cyc-b", "--after", "cyc-c").code == 0
    ran = jobctl("submit", "--kind", "k", "--id", "cyc-a", "--after", "elsewhere", "--after", "cyc-b")
    assert ran.code == 9 and ran.out == b""
    assert ran.err.startswith("jobctl: invalid: job cyc-a would wait for itself: cyc-a -> cyc-b -> cyc-c -> cyc-a;")
    assert jobctl("show", "cyc-a").code == 3  # nothing written (not_found)
    # An id already taken is the submit's own refusal, or none with --exists-ok.
    assert jobctl("submit", "--kind", "k", "--id", "cyc-b", "--after", "cyc-c").code == 15
    assert jobctl("submit", "--kind", "k", "--id", "cyc-b", "--after", "cyc-c", "--exists-ok").code == 0
    # Waiting on a job that waits for others is no cycle.
    assert jobctl("submit", "--kind", "k", "--id", "tail", "--after", "cyc-b").code == 0
