"""Helpers for the worker tests: job commands, worker processes, side-effect logs (fixtures: conftest.py)."""

from __future__ import annotations

import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobctl import FileStore, Record, schedule
from jobctl.guardian import Guardian, LeaseRecord
from jobctl.worker import Worker

HERE = Path(__file__).resolve().parent
JOB = str(HERE / "_job.py")
DRIVER = str(HERE / "_driver.py")


#: Where conftest's autouse fixture puts the test's config file path (tmp_path/no-config.ini).
CONFIG_ENV = "WORKER_TEST_CONFIG"


def no_config() -> str:
    """The test's config file: absent unless the test writes it, beside the test's other files, whatever the store."""
    return os.environ[CONFIG_ENV]


def job_argv(*args: object) -> list[str]:
    """The argv of a test job command (``_job.py``)."""
    return [sys.executable, JOB, *map(str, args)]


def submit(store: FileStore, argv: list[str], log: Path | None = None, kind: str = "shell", **plan: Any) -> str:
    """Submit a ``shell`` job running ``argv``; ``plan`` goes to :func:`jobctl.schedule.plan`."""
    spec: dict[str, Any] = {"argv": argv}
    if log is not None:
        spec["env"] = {"SIDE_LOG": str(log)}
    rec = Record(kind=kind, spec=spec)
    schedule.plan(rec, **plan)
    return store.submit(rec)


def in_process(store: FileStore, **options: object) -> Worker:
    """A worker in this process, quick to poll and with short leases unless told otherwise."""
    options.setdefault("poll_interval", 0.05)
    options.setdefault("ttl", 2.0)
    options.setdefault("grace", 0.5)
    return Worker(store, **options)  # type: ignore[arg-type]


def wait_until(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def gone(pid: int) -> bool:
    """True when ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError):  # reaped before the open, or between it and the read
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


class WorkerProcess:
    """A worker in its own process (``_driver.py``), its events read as they come."""

    def __init__(self, root: Path, mode: str = "loop", **options: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, DRIVER, str(root), mode, json.dumps(options)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        ready = self.next_event(lambda e: e["what"] == "ready")
        self.owner: str = ready["owner"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def next_event(self, match: Callable[[dict[str, Any]], bool], timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"worker {self.proc.pid}: no matching event; saw {self.seen}")
            self.seen.append(event)
            if match(event):
                return event

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.wait(10)

    def wait(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()
        while not self.events.empty():
            self.seen.append(self.events.get())
        return code

    def summary(self) -> dict[str, int]:
        for event in reversed(self.seen):
            if event["what"] == "summary":
                counts: dict[str, int] = event["counts"]
                return counts
        pytest.fail("the worker printed no summary")

    def stop(self) -> None:
        """End the worker whatever state it is in (the fixture's teardown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(1)
            except subprocess.TimeoutExpired:  # a job still running within its shutdown grace (30 s)
                self.proc.send_signal(signal.SIGTERM)  # the second: its jobs are stopped at once
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.wait(15)


class Guarded:
    """``sleep 60`` started by a :class:`Guardian` as a job's child, without a worker: Popen's poll and wait.

    Its end comes as the guardian tells it, on the start's channel.
    """

    def __init__(self, guardian: Guardian, kill_at: float, record: LeaseRecord | None = None) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            self.child = guardian.start(
                ["sleep", "60"],
                shutil.which("sleep") or "/bin/sleep",
                {"PATH": os.defpath},
                cwd=None,
                stdout=null,
                stderr=None,
                stdin=None,
                kill_at=kill_at,
                record=record,
            )
        finally:
            os.close(null)
        self.guardian = guardian
        self.pid = self.child.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        chan = self.child.chan
        if self.returncode is None and select.select([chan], [], [], 0)[0]:
            line = (self.child.rest + chan.recv(64)).split(b"\n")[0]
            assert line[:1] == b"X", line
            self.returncode = os.waitstatus_to_exitcode(int(line[1:]))
            self.child.close()
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["sleep", "60"], timeout)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            self.guardian.signal(self.child, signal.SIGKILL)
            self.wait(10)
