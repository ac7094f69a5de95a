"""Which rows `list` and `watch` show, in which order, and what a terminal table leaves out (issue 8)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from clitools import JOBCTL, Jobctl

pytestmark = pytest.mark.timeout(60)


def _end(jobctl: Jobctl, job: str, state: str = "complete") -> None:
    store = jobctl.store()
    rec = store.claim(job, "w", 60)
    store.finish(job, rec.lease.epoch, state, error="boom" if state == "failed" else "")


def test_list_orders_by_creation_not_by_id_string(jobctl: Jobctl) -> None:
    two = jobctl.submit("--id", "fetch-2")
    ten = jobctl.submit("--id", "fetch-10")
    assert [line.split()[0] for line in jobctl("list").lines] == [two, ten]
    assert [line.split()[0] for line in jobctl("list", "--newest").lines] == [ten, two]


def test_list_puts_active_jobs_before_ended_ones(jobctl: Jobctl) -> None:
    old = jobctl.submit()
    pending = jobctl.submit()
    running = jobctl.submit()
    _end(jobctl, old)
    jobctl("claim", running, "--owner", "w")
    lines = jobctl("list").lines
    assert [line.split()[0] for line in lines] == [running, pending, old]
    # The plain line itself is upstream's, byte for byte.
    assert lines[2] == f"{old} kind=test state=complete done=0 checkpoint=none"
    assert [line.split()[0] for line in jobctl("list", "--active").lines] == [running, pending]
    assert [line.split()[0] for line in jobctl("list", "--limit", "1").lines] == [running]
    assert jobctl("list", "--limit", "0").code == 2


def test_list_and_watch_filter_by_pipeline(jobctl: Jobctl) -> None:
    member = jobctl.submit("--pipeline", "nightly")
    jobctl.submit("--pipeline", "weekly")
    jobctl.submit()
    assert [line.split()[0] for line in jobctl("list", "--pipeline", "nightly").lines] == [member]
    ran = jobctl("watch", "--pipeline", "nightly", "--quiet-after", "0.1", "--exit-on-quiet")
    assert [line.split()[0] for line in ran.lines] == [member]


def test_watch_filters_by_state_kind_and_active(jobctl: Jobctl) -> None:
    ended = jobctl.submit()
    pending = jobctl.submit()
    other = jobctl("submit", "--kind", "other").text.strip()
    _end(jobctl, ended)

    def ids(*args: str) -> list[str]:
        ran = jobctl("watch", *args, "--quiet-after", "0.1", "--exit-on-quiet")
        assert ran.code == 0, ran.err
        return [line.split()[0] for line in ran.lines]

    # watch lists by id: ids minted in one millisecond sort by their random part, not by submission
    assert ids("--active") == sorted([pending, other])
    assert ids("--state", "complete") == [ended]
    assert ids("--kind", "test", "--kind", "other") == sorted([ended, pending, other])
    assert ids("--kind", "other") == [other]


def test_ended_jobs_show_no_scheduling_residue(jobctl: Jobctl) -> None:
    first = jobctl.submit()
    waiting = jobctl.submit("--after", first, "--not-before", "1h")
    _end(jobctl, waiting, "cancelled")
    pending = jobctl.submit("--after", first)
    ran = jobctl("list", terminal=True, env={"COLUMNS": "200", "NO_COLOR": "1"})
    rows = {line.split("│")[0].strip(): line for line in ran.lines if "│" in line}
    assert "not before" not in rows[waiting] and first not in rows[waiting].split("│", 1)[1]
    assert "waiting for" in rows[pending] or "after" in rows[pending]


def test_a_narrow_table_drops_low_value_columns_and_cuts_long_text(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    _end(jobctl, job, "failed")
    store = jobctl.store()
    long = jobctl.submit()
    rec = store.claim(long, "an-owner-with-a-long-name", 60)
    store.finish(long, rec.lease.epoch, "failed", error="line one " * 20 + "\nline two")
    wide = jobctl("list", terminal=True, env={"COLUMNS": "250", "NO_COLOR": "1"}).text
    narrow = jobctl("list", terminal=True, env={"COLUMNS": "80", "NO_COLOR": "1"}).text
    assert "owner" in wide and "updated" in wide
    assert "owner" not in narrow and "updated" not in narrow
    for text, width in ((wide, 250), (narrow, 80)):
        assert job in text and long in text
        assert "line two" not in text  # one line per row, cut with …
        assert all(len(line) <= width for line in text.splitlines())
    assert "…" in narrow


# -- submit -- CMD (issue 8) ------------------------------------------------------------------------


def test_submit_a_command_makes_a_shell_job_run_where_it_was_submitted(
    jobctl: Jobctl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    ran = jobctl("submit", "--env", "A=1", "--env", "B=x=y", "--", "./convert.sh", "in.mkv", "--fast")
    assert ran.code == 0, ran.err
    rec = jobctl.store().load(ran.text.strip())
    assert rec.kind == "shell"
    assert rec.spec == {"argv": ["./convert.sh", "in.mkv", "--fast"], "cwd": str(here), "env": {"A": "1", "B": "x=y"}}


def test_a_submitted_command_runs_in_the_submitters_directory(jobctl: Jobctl, tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    (here / "hello.sh").write_text('#!/bin/sh\necho "hello from $(pwd) $GREETING"\n')
    (here / "hello.sh").chmod(0o755)
    env = jobctl.subprocess_env()
    argv = [JOBCTL, "submit", "--env", "GREETING=hi", "--", "./hello.sh"]
    job = subprocess.run(argv, cwd=here, env=env, capture_output=True, check=True).stdout.decode().strip()
    ran = subprocess.run([JOBCTL, "run", job], cwd=tmp_path, env=env, capture_output=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.decode() == f"hello from {here} hi\n"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ('{"argv": "echo hi"}', "argv"),
        ('{"argv": []}', "argv"),
        ('{"argv": ["echo", 1]}', "argv"),
        ('{"argv": ["echo"], "cwd": 3}', "cwd"),
        ('{"argv": ["echo"], "env": {"A": 1}}', "env"),
        ('{"argv": ["echo"], "timeout": 0}', "timeout"),
        ('{"argv": ["echo"], "timeout": "9"}', "timeout"),
    ],
)
def test_a_bad_shell_spec_is_refused_at_submit(jobctl: Jobctl, spec: str, field: str) -> None:
    ran = jobctl("submit", "--kind", "shell", "--spec", spec)
    assert ran.code == 9 and ran.out == b"", ran.err
    assert ran.err.startswith("jobctl: invalid: ") and f'"{field}"' in ran.err and ran.err.count("\n") == 1
    assert not list((jobctl.root / "jobs").glob("*.json"))


@pytest.mark.parametrize(
    "args",
    [
        ("submit", "--spec", "{}", "--", "true"),
        ("submit", "--kind", "fetch", "--", "true"),
        ("submit", "--env", "A=1", "--kind", "k"),
        ("submit", "--env", "NOEQUALS", "--", "true"),
        ("submit",),
    ],
)
def test_submit_command_usage_errors(jobctl: Jobctl, args: tuple[str, ...]) -> None:
    ran = jobctl(*args)
    assert ran.code == 2, ran.err
