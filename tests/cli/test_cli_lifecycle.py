"""`retry`, `gc` and `wait --fail-fast` (issue 8)."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone

import pytest
from clitools import JOBCTL, Clock, Jobctl

from jobctl.cli.main import EXIT_DRAIN_INCOMPLETE
from jobctl.lifecycle import RETRY_OF, retry_of_link
from jobctl.schedule import after_of, pipeline_of, retry_of

pytestmark = pytest.mark.timeout(60)


def _drain(jobctl: Jobctl, code: int = EXIT_DRAIN_INCOMPLETE) -> None:
    """Run what is runnable; ``code`` is 0 when every job it runs is to complete, else 17 (drain_incomplete)."""
    ran = subprocess.run([JOBCTL, "worker", "--drain", "-q"], env=jobctl.subprocess_env(), capture_output=True)
    assert ran.returncode == code, ran.stderr


def _pipeline(jobctl: Jobctl) -> tuple[str, str, str, str]:
    """fetch fails; build (after fetch) and publish (after build) are cancelled for it; lint completes."""
    fetch = jobctl("submit", "--pipeline", "p", "--stage", "fetch", "--retries", "0", "--", "sh", "-c", "exit 4")
    lint = jobctl("submit", "--pipeline", "p", "--stage", "lint", "--", "true")
    build = jobctl("submit", "--pipeline", "p", "--stage", "build", "--after", fetch.text.strip(), "--", "true")
    publish = jobctl("submit", "--pipeline", "p", "--stage", "pub", "--after", build.text.strip(), "--", "true")
    ids = (fetch.text.strip(), lint.text.strip(), build.text.strip(), publish.text.strip())
    _drain(jobctl)
    store = jobctl.store()
    assert [store.load(job).state for job in ids] == ["failed", "complete", "cancelled", "cancelled"]
    return ids


def test_retry_submits_a_new_job_with_the_same_work_and_a_link(jobctl: Jobctl) -> None:
    fetch, _lint, build, _publish = _pipeline(jobctl)
    before = jobctl.record(fetch)
    ran = jobctl("retry", fetch)
    assert ran.code == 0, ran.err
    new, old = ran.text.split()
    assert old == fetch and new != fetch
    store = jobctl.store()
    rec, was = store.load(new), store.load(fetch)
    assert (rec.state, rec.kind, rec.spec, rec.error) == ("pending", was.kind, was.spec, "")
    assert pipeline_of(rec) == ("p", "fetch")
    retry = retry_of(rec)
    assert retry is not None and retry.failures == 0 and retry.intervals == []
    assert retry_of_link(rec) == fetch and RETRY_OF in rec.extensions
    assert jobctl.record(fetch) == before  # the ended job is never reopened
    assert store.load(build).state == "cancelled"  # not without --with-dependents


def test_retry_with_dependents_resumes_the_pipeline_from_the_failed_stage(jobctl: Jobctl) -> None:
    fetch, lint, build, publish = _pipeline(jobctl)
    ran = jobctl("retry", fetch, "--with-dependents")
    assert ran.code == 0, ran.err
    pairs = [line.split() for line in ran.lines]
    assert [old for _, old in pairs] == [fetch, build, publish]  # lint completed: not redone
    new = {old: new for new, old in pairs}
    store = jobctl.store()
    assert after_of(store.load(new[build])) == [new[fetch]]
    assert after_of(store.load(new[publish])) == [new[build]]
    assert "jobctl.run/after@1" in store.load(new[build]).critical
    assert lint not in new


@pytest.mark.parametrize("state", ["pending", "complete"])
def test_retry_refuses_a_job_that_did_not_fail(jobctl: Jobctl, state: str) -> None:
    job = jobctl.submit()
    if state == "complete":
        jobctl("claim", job, "--owner", "w")
        jobctl("finish", job, "--epoch", "1", "--state", "complete")
    ran = jobctl("retry", job)
    assert ran.code == 10 and f"is {state}" in ran.err and ran.out == b""
    assert jobctl("retry", "no-such-job").code == 3


def _old(jobctl: Jobctl, job: str, state: str = "complete") -> None:
    """End ``job`` on a clock ten days back."""
    store = jobctl.store(Clock(datetime(2020, 1, 1, tzinfo=timezone.utc)))
    rec = store.claim(job, "w", 60)
    store.finish(job, rec.lease.epoch, state, error="boom" if state == "failed" else "")


def test_gc_removes_old_ended_jobs_their_work_and_logs(jobctl: Jobctl) -> None:
    old = jobctl.submit()
    _old(jobctl, old)
    recent = jobctl.submit()
    jobctl("claim", recent, "--owner", "w")
    jobctl("finish", recent, "--epoch", "1", "--state", "complete")
    live = jobctl.submit()
    _old_pending = live  # pending: never removed, however old
    store = jobctl.store()
    work = store.work_path(old)
    os.makedirs(os.path.join(work, "sub"))
    flat = os.path.join(os.path.dirname(work), ".jobctl", "logs")
    logs = os.path.join(flat, old)  # the older layout: a directory a job
    os.makedirs(logs)
    open(os.path.join(logs, "attempt-1.log"), "w").close()
    mine = [f"{old}.attempt-1.log", f"{old}.attempt-2.log", f"{old}.attempt-2.7.result"]  # a dead holder's result
    theirs = [f"{recent}.attempt-1.log", f"{old}x.attempt-1.log", f"{old}.attempt-1.log.x"]
    for name in mine + theirs:
        open(os.path.join(flat, name), "w").close()
    outside = jobctl.root.parent / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    os.symlink(outside, os.path.join(work, "link"))  # a link inside is removed, never followed

    dry = jobctl("gc", "--older-than", "1d", "--dry-run")
    assert (dry.code, dry.lines) == (0, [f"{old} complete"])
    assert os.path.exists(store.path(old)) and os.path.isdir(work)

    ran = jobctl("gc", "--older-than", "1d")
    assert (ran.code, ran.lines) == (0, [f"{old} complete"])
    assert not os.path.exists(store.path(old)) and not os.path.exists(work) and not os.path.exists(logs)
    assert sorted(os.listdir(flat)) == sorted(theirs)  # every file of the job's, and none of another's
    assert os.path.exists(store.path(old) + ".lock")  # a lock file is never deleted
    assert (outside / "keep").read_text() == "x"
    assert sorted(line.split()[0] for line in jobctl("list").lines) == sorted([recent, _old_pending])


def test_gc_keeps_what_a_remaining_job_depends_on_and_filters_by_state(jobctl: Jobctl) -> None:
    base = jobctl.submit()
    _old(jobctl, base)
    waiter = jobctl.submit("--after", base)  # pending, and it depends on base
    failed = jobctl.submit()
    _old(jobctl, failed, "failed")
    ran = jobctl("gc", "--older-than", "1h", "--state", "complete,failed")
    assert ran.lines == [f"{failed} failed"]
    assert f"kept {base}: job {waiter} depends on it" in ran.err
    assert jobctl.store().load(base).state == "complete"
    assert jobctl("gc", "--older-than", "1h", "--state", "running").code == 2
    for blank in (",", " ", " , "):  # names no state: a usage error, as an empty value is, not a silent no-op
        ran = jobctl("gc", "--older-than", "1h", "--state", blank)
        assert (ran.code, ran.out) == (2, b"") and "names no state" in ran.err
    assert jobctl("gc", "--older-than", "soon").code == 9


def test_wait_fail_fast_returns_at_the_first_failure(jobctl: Jobctl) -> None:
    slow = jobctl.submit()  # never ends in this test
    bad = jobctl.submit()
    jobctl("claim", bad, "--owner", "w")
    jobctl("finish", bad, "--epoch", "1", "--state", "failed", "--error", "boom")
    ran = jobctl("wait", slow, bad, "--fail-fast", "--timeout", "30")
    assert ran.code == 11, ran.err
    assert ran.lines == [f"{bad} failed"]
    assert bad in ran.err and "boom" in ran.err
    timed = jobctl("wait", slow, bad, "--timeout", "0.2")  # without it, the wait goes on for slow
    assert timed.code == 124
