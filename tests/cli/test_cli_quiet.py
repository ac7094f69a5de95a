"""Quiet when there is nothing to do, and `run`'s exit status (issue 8)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from clitools import JOBCTL, Jobctl

from jobctl.errors import NoStore

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("command", ["claim", "run"])
def test_quiet_next_with_nothing_runnable_says_nothing(jobctl: Jobctl, command: str) -> None:
    loud = jobctl(command, "--next", "--kind", "backup")
    assert loud.code == 3 and "not_found" in loud.err
    quiet = jobctl(command, "--next", "-q", "--kind", "backup")
    assert (quiet.code, quiet.out, quiet.err) == (3, b"", "")


@pytest.mark.parametrize("command", ["claim", "run"])
def test_quiet_still_prints_real_errors(jobctl: Jobctl, command: str, tmp_path: Path) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("")
    ran = jobctl(command, "--next", "-q", "--kind", "backup", env={"JOB_STORE": str(afile / "store")})
    assert ran.code == NoStore.exit_code and ran.err.startswith("jobctl: no_store: "), (ran.code, ran.err)


def test_quiet_without_next_is_a_usage_error(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    assert jobctl("claim", job, "-q").code == 2
    assert jobctl("run", job, "-q", "--", "true").code == 2


def test_run_exits_with_the_commands_own_status(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    ran = jobctl("run", job, "--", "sh", "-c", "exit 42")
    assert ran.code == 42, ran.err
    assert jobctl.store().load(job).state == "failed"
    job = jobctl.submit()
    assert jobctl("run", job, "--", "true").code == 0


def test_the_run_loop_in_the_help_runs_jobs_until_none_is_left(jobctl: Jobctl, tmp_path: Path) -> None:
    """The loop `jobctl run --help` shows: each job once, then a quiet end with 3."""
    help_text = jobctl("run", "--help").text
    loop = "while jobctl run --next -q --kind resize -- ./resize.sh; do :; done"
    assert loop in help_text
    (tmp_path / "resize.sh").write_text('#!/bin/sh\necho "$JOB_ID" >> done.txt\n')
    (tmp_path / "resize.sh").chmod(0o755)
    jobs = [jobctl("submit", "--kind", "resize").text.strip() for _ in range(3)]
    env = jobctl.subprocess_env(PATH=f"{Path(JOBCTL).parent}:/usr/bin:/bin")
    ran = subprocess.run(["sh", "-c", loop], cwd=tmp_path, env=env, capture_output=True)
    assert (ran.returncode, ran.stderr) == (0, b"")  # a silent end: nothing left
    assert (tmp_path / "done.txt").read_text().split() == jobs
    assert {jobctl.store().load(job).state for job in jobs} == {"complete"}


def test_the_run_loop_stops_at_a_job_that_fails(jobctl: Jobctl, tmp_path: Path) -> None:
    first = jobctl("submit", "--kind", "resize").text.strip()
    second = jobctl("submit", "--kind", "resize").text.strip()
    env = jobctl.subprocess_env(PATH=f"{Path(JOBCTL).parent}:/usr/bin:/bin")
    loop = "while jobctl run --next -q --kind resize -- sh -c 'exit 42'; do :; done"
    ran = subprocess.run(["sh", "-c", loop], cwd=tmp_path, env=env, capture_output=True)
    assert f"{first} failed".encode() in ran.stderr  # the failure is said, not hidden by -q
    assert jobctl.store().load(first).state == "failed"
    assert jobctl.store().load(second).state == "pending"  # the loop stopped there


def test_a_malformed_handler_is_a_usage_error(jobctl: Jobctl) -> None:
    for command in (("run", "--next"), ("worker", "--once")):
        ran = jobctl(*command, "--handler", "resize")
        assert ran.code == 2 and "KIND=COMMAND" in ran.err, ran.err


def test_an_unreadable_spec_file_is_one_line(jobctl: Jobctl, tmp_path: Path) -> None:
    ran = jobctl("submit", "--kind", "k", "--spec", f"@{tmp_path / 'missing.json'}")
    assert ran.code == 9 and ran.out == b""
    assert ran.err.count("\n") == 1 and ran.err.startswith("jobctl: invalid: --spec: cannot read "), ran.err


# -- the smaller things (issue 8) ------------------------------------------------------------------


def test_a_command_typo_gets_a_suggestion(jobctl: Jobctl) -> None:
    ran = jobctl("lst")
    assert ran.code == 2 and "Did you mean 'list'?" in ran.err, ran.err
    ran = jobctl("frobnicate")
    assert ran.code == 2 and "No such command 'frobnicate'." in ran.err and "Did you mean" not in ran.err


def test_an_unknown_pipeline_says_so(jobctl: Jobctl) -> None:
    jobctl.submit("--pipeline", "nightly")
    ran = jobctl("pipeline", "nighly")
    assert ran.code == 3
    assert ran.err == (
        "jobctl: not_found: no such pipeline nighly: no job was submitted with --pipeline nighly; "
        "the pipelines here: nightly\n"
    )


def test_paths_says_absent_default_without_nested_brackets(jobctl: Jobctl) -> None:
    lines = dict(line.split("=", 1) for line in jobctl("paths").lines)
    assert lines["worker.config"].endswith(" (absent, default)"), lines["worker.config"]
    assert lines["worker.retry_intervals"].endswith(" (default, submit's default)")


def test_a_stopping_worker_says_it_claims_nothing_more() -> None:
    from jobctl.worker import Event

    line = Event("stopping", detail="claiming nothing more; 0 job(s) to finish or stop").line()
    assert line == "stopping: claiming nothing more; 0 job(s) to finish or stop"
    assert Event("started", "j1", "shell", "attempt 1").line() == "started j1 kind=shell attempt 1"
