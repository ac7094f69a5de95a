"""Fixtures for the HTTP tests (the helpers themselves are in support/webtools.py)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# As tests/cli: --import-mode=importlib puts no test directory on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from webtools import Server, serve_env, start_server, stop

from jobctl import FileStore


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


@pytest.fixture
def server(start: Callable[..., Server]) -> Server:
    return start()
