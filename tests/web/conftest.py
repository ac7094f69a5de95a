"""Fixtures for the HTTP tests (the helpers themselves are in support/webtools.py)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# As tests/cli: --import-mode=importlib puts no test directory on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from devtools import Browser, find_chromium
from webtools import Server, serve_env, start_server, stop

from jobctl import FileStore, open_store


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``start(*args, **env)``: a ``jobctl serve`` on a fresh store; stopped, and checked quiet, at teardown."""
    running: list[Server] = []

    def launch(*args: str, **env: str) -> Server:
        root = tmp_path / f"store{len(running)}"
        store = FileStore(root)
        proc, url = start_server(root, *args, **env)
        server = Server(proc, url, store, serve_env(root, **env))
        running.append(server)
        return server

    yield launch
    for server in running:
        err = stop(server.proc)
        assert server.proc.returncode == -signal.SIGTERM, err  # stopped by the signal, as uvicorn ends
        assert "Traceback" not in err, err


@pytest.fixture(params=["file", "postgres"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``served(*args, **env)``: a ``jobctl serve`` on a fresh store of each kind; stopped, and checked quiet."""
    running: list[Server] = []

    def launch(*args: str, **env: str) -> Server:
        root = tmp_path / f"store{len(running)}"
        if request.param == "file":
            store = FileStore(root)
        else:
            from jobctl.store import postgres

            url = request.getfixturevalue("pg_url")
            postgres.init(url)
            env = {"JOB_STORE": url, **env}
            store = open_store(url)
            request.addfinalizer(store.close)
        proc, url_served = start_server(root, *args, **env)
        server = Server(proc, url_served, store, serve_env(root, **env))  # type: ignore[arg-type]
        running.append(server)
        return server

    yield launch
    for server in running:
        err = stop(server.proc)
        assert server.proc.returncode == -signal.SIGTERM, err
        assert "Traceback" not in err, err


@pytest.fixture
def server(start: Callable[..., Server]) -> Server:
    return start()


@pytest.fixture(scope="module")
def refusing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for a module's tests that only send what is refused (it stays empty: they check that)."""
    root = tmp_path_factory.mktemp("refusals") / "store"
    store = FileStore(root)
    proc, url = start_server(root)
    yield Server(proc, url, store, serve_env(root))
    err = stop(proc)
    assert "Traceback" not in err, err


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Browser]:
    """A headless chromium; skipped without one, except under ``CI=true``, where it fails (as test_page.py)."""
    binary = find_chromium()
    if binary is None:
        reason = "no chromium (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test is mandatory in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    browser = Browser(binary, tmp_path / "profile")
    try:
        yield browser
    finally:
        browser.close()
