"""The suite needs nothing outside the repository; CI's variable makes the conformance files mandatory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# One conformance test that reads upstream's files, and one of the project's own scenarios.
TARGETS = ["tests/contract/test_vectors.py::test_asks", "tests/contract/test_scenarios.py::test_own_scenario"]


def _pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("JOBCTL_CONTRACT_DIR", "JOBCTL_REQUIRE_CONTRACT")}
    base["JOBCTL_CONTRACT_DIR"] = str(tmp_path / "no-contract-here")
    base.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *TARGETS],
        cwd=REPO_ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_missing_contract_skips_the_conformance_tests_with_one_line(tmp_path: Path) -> None:
    ran = _pytest(tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    skips = [line for line in ran.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skips) == 1, ran.stdout
    assert "upstream conformance files not found" in skips[0] and "no-contract-here" in skips[0]
    progress = ran.stdout.splitlines()[0]
    assert progress.count(".") >= 1 and progress.count("s") == 1, ran.stdout  # the own scenario still ran


def test_the_ci_variable_turns_the_skip_into_a_failure(tmp_path: Path) -> None:
    ran = _pytest(tmp_path, JOBCTL_REQUIRE_CONTRACT="1")
    assert ran.returncode != 0
    assert "JOBCTL_REQUIRE_CONTRACT is set" in ran.stdout
    assert not [line for line in ran.stdout.splitlines() if line.startswith("SKIPPED")], ran.stdout


def test_ci_run_requires_the_contract() -> None:
    script = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "export JOBCTL_REQUIRE_CONTRACT=1" in script
    assert "upstream conformance files not found" in script  # and counts the skips
