"""``jobctl worker`` on a PostgreSQL store: the same loop, children reaching the store by its URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobctl import Record, schedule

JOBCTL = str(Path(sys.executable).parent / "jobctl")


def shell(store: Any, script: str, **plan: Any) -> str:
    rec = Record(kind="shell", spec={"argv": ["sh", "-c", script]})
    schedule.plan(rec, **plan)
    job_id: str = store.submit(rec)
    return job_id


@pytest.mark.timeout(120)
def test_worker_drains_a_database_store(pg_store: Any, tmp_path: Path) -> None:
    s = pg_store
    seen = tmp_path / "seen"
    first = shell(s, f'echo "$JOB_STORE" > {seen} && {JOBCTL} checkpoint \'{{"k": 1}}\' --done 1')
    second = shell(s, "true", after=[first])
    flaky = shell(s, 'test "$JOB_ATTEMPT" -ge 2', intervals=[0])
    broken = shell(s, "exit 3")
    doomed = shell(s, "true", after=[broken])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_", "ABSTRACTION_"))}
    env.update({"JOB_STORE": s.url, "JOBCTL_CONFIG": str(tmp_path / "no-config.ini"), "HOME": str(tmp_path)})
    proc = subprocess.run(
        [JOBCTL, "worker", "--drain", "--poll-interval", "0.1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    states = {r.id: r for r in s.list()}
    assert states[first].state == "complete" and states[first].checkpoint == {"k": 1}, proc.stderr
    assert states[second].state == "complete"
    assert states[flaky].state == "complete" and schedule.attempt(states[flaky]) == 2
    assert states[broken].state == "failed"
    assert states[doomed].state == "cancelled"
    # the child reached the store by the URL, not by a path made of it
    assert seen.read_text().strip() == s.url
    logs = subprocess.run(
        [JOBCTL, "--json", "logs", flaky], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert logs.returncode == 0, logs.stderr
    attempts = [json.loads(line) for line in logs.stdout.splitlines()]
    assert len(attempts) == 2, attempts  # both attempts' logs, kept on this host
