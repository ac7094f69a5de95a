"""Fixtures for the command-line tests (the helpers themselves are in support/clitools.py)."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

# The suite runs with --import-mode=importlib, which puts no test directory on
# sys.path; the CLI tests share support/clitools.py, so that directory goes
# there. Not this one: it holds a conftest.py that would shadow other suites'.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from clitools import Clock, Jobctl

from jobctl import FileStore


@pytest.fixture
def jobctl(tmp_path: Path) -> Jobctl:
    home = tmp_path / "home"
    home.mkdir()
    FileStore(tmp_path / "store")  # only submit and init create a store; the tests start with one
    return Jobctl(tmp_path / "store", home)


@pytest.fixture
def fixed_clock() -> Clock:
    return Clock(datetime(2030, 1, 2, 3, 4, 5, 987654, tzinfo=timezone.utc))
