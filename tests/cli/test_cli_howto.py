"""The how-to examples marked `<!-- executed by tests/cli/test_cli_howto.py -->` run, and say what they claim."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from clitools import JOBCTL, REPO, Jobctl

pytestmark = pytest.mark.timeout(120)

MARK = "<!-- executed by tests/cli/test_cli_howto.py -->"


def _blocks(page: str) -> list[str]:
    text = (REPO / "docs" / "howto" / page).read_text(encoding="utf-8")
    return re.findall(re.escape(MARK) + r"\n```sh\n(.*?)```", text, re.S)


def _run(jobctl: Jobctl, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = jobctl.subprocess_env(PATH=f"{Path(JOBCTL).parent}:/usr/bin:/bin")
    return subprocess.run(["sh", "-eu", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=90)


def test_the_marked_examples_are_there() -> None:
    assert len(_blocks("scripting.md")) == 2


def test_submitting_a_command(jobctl: Jobctl, tmp_path: Path) -> None:
    [block, _] = _blocks("scripting.md")
    ran = _run(jobctl, block, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["convert-in.mkv", "converting in.mkv (slow)"]
    rec = jobctl.store().load("convert-in.mkv")
    assert rec.state == "complete" and rec.spec["cwd"] == str(tmp_path)


def test_retrying_and_cleaning_up(jobctl: Jobctl, tmp_path: Path) -> None:
    [_, block] = _blocks("scripting.md")
    ran = _run(jobctl, block, tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    states = [line.split()[2] for line in lines[:2]]
    assert states == ["state=failed", "state=cancelled"]
    retried = [line.split() for line in lines[2:4]]
    assert [old for _, old in retried] == [lines[0].split()[0], lines[1].split()[0]]
    active = [line.split()[0] for line in lines[4:6]]
    assert sorted(active) == sorted(new for new, _ in retried)
    # Both ended jobs would go (the new report waits for the new fetch); --dry-run left them.
    assert lines[6:] == [f"{lines[0].split()[0]} failed", f"{lines[1].split()[0]} cancelled"]
    assert len(jobctl("list").lines) == 4
