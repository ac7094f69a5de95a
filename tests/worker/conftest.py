"""Fixtures for the worker tests (the helpers themselves are in workertools.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The suite runs with --import-mode=importlib, which puts no test directory on
# sys.path; the worker tests share workertools.py, so this directory goes there.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workertools import WorkerProcess

from jobctl import FileStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> FileStore:
    return FileStore(root)


@pytest.fixture
def side_log(tmp_path: Path) -> Path:
    return tmp_path / "side.log"


@pytest.fixture
def workers(root: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start workers on the test's store; every one still running at the end is stopped."""
    started: list[WorkerProcess] = []

    def start(mode: str = "loop", **options: Any) -> WorkerProcess:
        options.setdefault("poll_interval", 0.1)
        options.setdefault("ttl", 2.0)
        options.setdefault("grace", 0.5)
        proc = WorkerProcess(root, mode, **options)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()
