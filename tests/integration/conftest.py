"""Fixtures for tests that run real processes against one store."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ACTORS = Path(__file__).with_name("_actors.py")
REPO = Path(__file__).resolve().parents[2]

Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start ``_actors.py <role> <args>`` with line-buffered text pipes on stdin and stdout.

    Every process started here is killed (if still running), reaped and its
    pipes closed at teardown, so a failing test leaves nothing behind and no
    ``ResourceWarning`` (warnings are errors in this suite).
    """
    started: list[subprocess.Popen[str]] = []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)

    def start(role: str, *args: object) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(ACTORS), role, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=env,
        )
        started.append(proc)
        return proc

    yield start

    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass  # stdin of a killed child: the flush on close hits a broken pipe
