"""Fixtures for the worker tests (the helpers themselves are in workertools.py).

Every test that asks for ``store`` or ``root`` runs on both backends: a
directory and a PostgreSQL schema (the session's one server, a fresh schema
a test). ``root`` is where the store is -- a directory's path, or the
database URL -- which is what ``--store``/``JOB_STORE`` and the worker
processes take. A test that is inherently about files (inodes, links, file
owners, lock files, the guardian's reading of the record file) is marked
``file_only`` with why, and runs on the directory only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The suite runs with --import-mode=importlib, which puts no test directory on
# sys.path; the worker tests share workertools.py, so this directory goes there.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workertools import CONFIG_ENV, WorkerProcess

import jobctl
from jobctl import FileStore

BACKENDS = ("file", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("file_only")
        metafunc.parametrize("backend", ["file"] if only is not None else list(BACKENDS))


@pytest.fixture
def root(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """The store's address: ``tmp_path/store`` for a directory, an initialised schema's URL for PostgreSQL."""
    if backend == "file":
        return tmp_path / "store"
    from jobctl.store import postgres

    url: str = request.getfixturevalue("pg_url")
    postgres.init(url)
    return url


@pytest.fixture
def store(root: Any, request: pytest.FixtureRequest) -> FileStore:
    """The test's store, on the system clock (typed as the file store: the tests use the common protocol)."""
    opened = jobctl.open_store(root)
    close = getattr(opened, "close", None)
    if close is not None:
        request.addfinalizer(close)
    return opened  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's own config file path (workertools.no_config), beside its other files: a database has no directory."""
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "no-config.ini"))


@pytest.fixture
def side_log(tmp_path: Path) -> Path:
    return tmp_path / "side.log"


@pytest.fixture
def workers(root: Any) -> Iterator[Callable[..., WorkerProcess]]:
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
