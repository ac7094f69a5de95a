"""``submit --exclusive``, ``claim ID`` of a job whose key is held, and ``worker --limit``: their refusals.

Each is one line on stderr and a documented exit code (docs/reference/exit-codes.md); nothing is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def jobctl(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JOB_STORE": str(store), "JOBCTL_CONFIG": str(store.parent / "no-config.ini")}
    return subprocess.run(
        [sys.executable, "-m", "jobctl", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_submit_keeps_the_key_and_show_says_it(tmp_path: Path) -> None:
    store = tmp_path / "store"
    made = jobctl(store, "submit", "--exclusive", "db-migrate", "--", "true")
    assert made.returncode == 0, made.stderr
    job_id = made.stdout.strip()
    shown = json.loads(jobctl(store, "show", job_id, "--json").stdout)
    assert shown["exclusive"] == "db-migrate"
    listed = [json.loads(line) for line in jobctl(store, "list", "--json").stdout.splitlines()]
    assert [job["exclusive"] for job in listed if "id" in job] == ["db-migrate"]


@pytest.mark.parametrize(
    ("key", "code", "words"),
    [
        ("a\nb", 9, "--exclusive 'a\\nb' holds a character that is not printable"),
        ("k" * 201, 9, "--exclusive is 201 bytes long; at most 200"),
        ("   ", 9, "--exclusive is blank"),
        ("", 2, "--exclusive"),
    ],
)
def test_submit_refuses_a_bad_key_in_one_line(tmp_path: Path, key: str, code: int, words: str) -> None:
    store = tmp_path / "store"
    got = jobctl(store, "submit", "--exclusive", key, "--", "true")
    assert got.returncode == code and got.stdout == ""
    # A refusal is one line; a usage error is click's, whose one "Error:" line names the option.
    lines = got.stderr.strip().splitlines() if code != 2 else [got.stderr.strip().splitlines()[-1]]
    assert len(lines) == 1 and words in lines[0], got.stderr
    assert not (store / "jobs").exists() or not any((store / "jobs").glob("*.json"))


def test_claim_of_a_job_whose_key_is_held_names_the_key_and_its_holder(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = jobctl(store, "submit", "--exclusive", "db", "--", "true").stdout.strip()
    second = jobctl(store, "submit", "--exclusive", "db", "--", "true").stdout.strip()
    assert jobctl(store, "claim", first, "--owner", "w1").returncode == 0
    got = jobctl(store, "claim", second, "--owner", "w2")
    assert got.returncode == 21 and got.stdout == ""
    line = got.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"jobctl: key_held: job {second}: its exclusive key 'db' is held by job {first}")
    assert f"jobctl show {first}" in line
    assert json.loads(jobctl(store, "show", second, "--json").stdout)["state"] == "pending"


@pytest.mark.parametrize("form", ["render", "render=", "=2", "render=0", "render=-1", "render=x", "render=1.5"])
def test_worker_refuses_a_bad_limit_as_usage(tmp_path: Path, form: str) -> None:
    store = tmp_path / "store"
    jobctl(store, "init", str(store))
    got = jobctl(store, "worker", "--once", "--limit", form)
    assert got.returncode == 2, got.stderr
    error = got.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: Invalid value for '--limit'") and repr(form) in error, got.stderr
