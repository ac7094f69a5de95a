"""Helpers for the command-line tests: an isolated environment and a way to run jobctl in-process.

Every run gets an environment of its own: the store comes from ``JOB_STORE``
(a fresh directory), ``HOME`` and ``XDG_CONFIG_HOME`` point into the test's
temporary directory so no real configuration leaks in, and every variable
jobctl reads (``JOB_ID``, ``JOB_EPOCH``, ``NO_COLOR``, …) starts unset.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from jobctl import FileStore
from jobctl.cli.main import State, cli

REPO = Path(__file__).resolve().parents[3]
JOBCTL = str(Path(sys.executable).with_name("jobctl"))
ID_LINE = re.compile(rb"\A[0-9]{13}-[0-9a-f]{20}\n\Z")

#: Variables jobctl (or rich, or click) reads, unset for every test unless it sets them.
CLEARED = (
    "JOB_STORE",
    "ABSTRACTION_STORE",
    "JOB_ID",
    "JOB_EPOCH",
    "JOB_OWNER",
    "JOB_RETRY_INTERVALS",
    "NO_COLOR",
    "FORCE_COLOR",
    "TERM",
    "COLUMNS",
    "LINES",
    "_JOBCTL_COMPLETE",
)


@dataclass
class Ran:
    """What one run of jobctl left behind."""

    code: int
    out: bytes
    err: str

    @property
    def text(self) -> str:
        return self.out.decode("utf-8")

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


class Jobctl:
    """Run ``jobctl`` in this process with CliRunner; stdout is a pipe unless ``terminal``."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.home = home
        self.env: dict[str, str | None] = {name: None for name in CLEARED}
        self.env.update(
            {
                "JOB_STORE": str(root),
                "HOME": str(home),
                "XDG_CONFIG_HOME": str(home / ".config"),
            }
        )

    def __call__(
        self,
        *args: str,
        input: str | bytes | None = None,
        env: Mapping[str, str | None] | None = None,
        terminal: bool | None = None,
        store: FileStore | None = None,
    ) -> Ran:
        merged = {**self.env, **(env or {})}
        # State reads os.environ at the moment it needs it, which CliRunner has patched by then.
        obj = State(terminal=terminal, store=store)
        runner = CliRunner(catch_exceptions=False)
        result = runner.invoke(cli, list(args), input=input, env=merged, obj=obj, prog_name="jobctl")
        return Ran(result.exit_code, result.stdout_bytes, result.stderr)

    def store(self, clock: Any = None) -> FileStore:
        return FileStore(self.root, clock=clock)

    def record(self, job_id: str) -> bytes:
        return (self.root / "jobs" / f"{job_id}.json").read_bytes()

    def submit(self, *args: str) -> str:
        ran = self(*("submit", "--kind", "test", *args))
        assert ran.code == 0, ran.err
        assert ran.out.endswith(b"\n") and ran.out.count(b"\n") == 1, ran.out
        if "--id" not in args:
            assert ID_LINE.match(ran.out), ran.out
        return ran.text.strip()

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        """The same environment, for a real ``jobctl`` process."""
        env = {k: v for k, v in os.environ.items() if k not in CLEARED}
        env.update({k: v for k, v in self.env.items() if v is not None})
        env.update(extra)
        return env


class Clock:
    """A store clock the test moves by hand."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


#: Box-drawing characters rich uses for tables; none may ever reach a pipe.
BOX = set("┏┓┗┛━┃│─┌┐└┘┡┩╇╈┳┻├┤┼╭╮╰╯")


def has_box(text: str) -> bool:
    return any(ch in BOX for ch in text)
