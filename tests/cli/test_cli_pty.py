"""The real thing: the installed ``jobctl`` under a pseudo-terminal, and the same commands piped."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable

import pytest
from clitools import JOBCTL, Jobctl, has_box

pytestmark = pytest.mark.timeout(60)


Stage = tuple[Callable[[bytes], bool], Callable[[subprocess.Popen[bytes]], None]]


def interrupt(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)


def in_pty(
    argv: list[str], env: dict[str, str], stages: tuple[Stage, ...] = (), deadline: float = 30.0
) -> tuple[int, bytes]:
    """Run ``argv`` with a pty as its terminal, 200 columns wide; return its exit code and output.

    ``stages`` are (condition, action) pairs taken in turn: once the output
    that arrived since the previous action satisfies a condition, its action
    runs (submit a job, send SIGINT, ...). ``deadline`` only bounds a hung
    test; nothing here measures how fast anything happened.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    output = b""
    mark = 0
    pending = list(stages)
    give_up = time.monotonic() + deadline
    try:
        while True:
            if time.monotonic() > give_up:
                raise AssertionError(f"gave up waiting; output so far:\n{output.decode(errors='replace')}")
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk:
                    break
                output += chunk
                if pending and pending[0][0](output[mark:]):
                    _, action = pending.pop(0)
                    mark = len(output)
                    action(proc)
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=10), output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def _env(jobctl: Jobctl, **extra: str) -> dict[str, str]:
    return jobctl.subprocess_env(TERM="xterm-256color", **extra)


def test_list_draws_a_rich_table_on_a_terminal(jobctl: Jobctl) -> None:
    job = jobctl.submit("--total", "10")
    jobctl("claim", job, "--owner", "worker-1", "--ttl", "300")
    code, output = in_pty([JOBCTL, "list"], _env(jobctl))
    text = output.decode()
    assert code == 0, text
    assert has_box(text) and "\x1b[" in text
    assert job in text and "worker-1" in text and "running" in text


def test_no_color_under_a_terminal(jobctl: Jobctl) -> None:
    jobctl.submit()
    code, output = in_pty([JOBCTL, "list"], _env(jobctl, NO_COLOR="1"))
    assert code == 0
    assert has_box(output.decode()) and b"\x1b[" not in output


def test_watch_draws_a_live_table_that_follows_changes(jobctl: Jobctl) -> None:
    job = jobctl.submit("--total", "10")
    late: list[str] = []
    code, output = in_pty(
        [JOBCTL, "watch"],
        _env(jobctl),
        stages=(
            (lambda out: job.encode() in out, lambda proc: late.append(jobctl.submit())),
            (lambda out: late[0].encode() in out, interrupt),
        ),
    )
    text = output.decode(errors="replace")
    assert code == 0, text  # Ctrl-C is how a watch ends
    assert has_box(text) and "Ctrl-C to stop" in text
    assert job in text and late[0] in text
    assert "Traceback" not in text


def test_piped_output_has_no_escape_codes_or_boxes(jobctl: Jobctl) -> None:
    job = jobctl.submit("--total", "10")
    jobctl("claim", job, "--owner", "worker-1", "--ttl", "300")
    env = _env(jobctl, FORCE_COLOR="1", COLORTERM="truecolor")
    for argv in (
        ["list"],
        ["orphans"],
        ["show", job],
        ["paths"],
        ["watch", "--quiet-after", "0.2", "--exit-on-quiet"],
        ["wait", job, "--timeout", "0"],
    ):
        proc = subprocess.run([JOBCTL, *argv], env=env, capture_output=True, check=False, timeout=30)
        assert proc.returncode in (0, 124), (argv, proc.stderr)
        for stream in (proc.stdout, proc.stderr):
            assert b"\x1b" not in stream, argv
            assert not has_box(stream.decode()), argv
    listed = subprocess.run([JOBCTL, "list"], env=env, capture_output=True, check=True, timeout=30)
    assert listed.stdout == f"{job} kind=test state=running done=0 checkpoint=none\n".encode()
