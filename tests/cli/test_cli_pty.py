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
from pathlib import Path

import pytest
from clitools import JOBCTL, REPO, Jobctl, has_box

pytestmark = pytest.mark.timeout(60)


Stage = tuple[Callable[[bytes], bool], Callable[[subprocess.Popen[bytes]], None]]


def interrupt(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)


def in_pty(
    argv: list[str],
    env: dict[str, str],
    stages: tuple[Stage, ...] = (),
    deadline: float = 30.0,
    columns: int = 200,
    rows: int = 40,
) -> tuple[int, bytes]:
    """Run ``argv`` with a pty as its terminal, ``columns`` wide; return its exit code and output.

    ``stages`` are (condition, action) pairs taken in turn: once the output
    that arrived since the previous action satisfies a condition, its action
    runs (submit a job, send SIGINT, ...). ``deadline`` only bounds a hung
    test; nothing here measures how fast anything happened.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
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


# -- tables that fit the terminal (issue 8) --------------------------------------------------------


def _mixed_store(jobctl: Jobctl, running: int, pending: int, ended: int) -> dict[str, str]:
    """Jobs in a mix of states, with long text where a table is tempted to wrap; id -> state."""
    store = jobctl.store()
    states: dict[str, str] = {}
    for n in range(running + pending + ended):
        kind = "convert-a-rather-long-kind-name" if n % 3 == 0 else "fetch"
        job = jobctl.submit("--total", "10") if kind == "fetch" else jobctl("submit", "--kind", kind).text.strip()
        states[job] = "pending"
    ids = list(states)
    for job in ids[:running]:
        store.claim(job, "worker-on-a-rather-long-host-name.example.com:4242", 600)
        states[job] = "running"
    for n, job in enumerate(ids[running + pending :]):
        rec = store.claim(job, "w", 600)
        state = "failed" if n % 2 else "complete"
        error = "exit 3: " + "a long error that goes on and on " * 4 + "\nand a second line" if n % 2 else ""
        store.finish(job, rec.lease.epoch, state, error=error)
        states[job] = state
    return states


def _visible_rows(text: str, states: dict[str, str]) -> list[str]:
    """The ids whose row was drawn; each must carry its full id and its state on one line."""
    seen = []
    for line in text.splitlines():
        for job, state in states.items():
            if job in line:
                assert state in line, f"{job} drawn without its state {state}: {line!r}"
                seen.append(job)
    return seen


@pytest.mark.parametrize("columns", [80, 120])
def test_list_fits_the_terminal_with_whole_ids_and_states(jobctl: Jobctl, columns: int) -> None:
    states = _mixed_store(jobctl, running=2, pending=2, ended=4)
    code, output = in_pty([JOBCTL, "list"], _env(jobctl, NO_COLOR="1"), columns=columns)
    text = output.decode()
    assert code == 0, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= columns, text
    seen = _visible_rows(text, states)
    assert sorted(seen) == sorted(states), text  # every job, each on exactly one line
    order = [states[job] for job in seen]
    assert order == sorted(order, key=lambda s: {"running": 0, "pending": 1}.get(s, 2)), order  # active first
    assert "…" in text  # the long error was cut, not wrapped
    if columns == 80:
        assert "owner" not in text and "updated" not in text  # low-value columns go first


@pytest.mark.parametrize("columns", [80, 120])
def test_watch_keeps_running_jobs_visible_and_says_what_it_hid(jobctl: Jobctl, columns: int) -> None:
    states = _mixed_store(jobctl, running=5, pending=10, ended=15)
    running = [job for job, state in states.items() if state == "running"]
    code, output = in_pty(
        [JOBCTL, "watch"],
        _env(jobctl, NO_COLOR="1"),
        stages=((lambda out: b"rows hidden" in out, interrupt),),
        columns=columns,
        rows=16,
    )
    text = output.decode(errors="replace")
    assert code == 0, text
    seen = set(_visible_rows(text, states))
    assert set(running) <= seen, text
    assert "19 more rows hidden (4 active, 15 ended)" in text, text  # 16 lines hold 11 rows


def test_watch_filters_on_a_terminal(jobctl: Jobctl) -> None:
    states = _mixed_store(jobctl, running=1, pending=1, ended=2)
    code, output = in_pty(
        [JOBCTL, "watch", "--active"],
        _env(jobctl, NO_COLOR="1"),
        stages=((lambda out: b"not ended" in out and b"pending" in out, interrupt),),
        columns=120,
    )
    text = output.decode(errors="replace")
    assert code == 0, text
    seen = set(_visible_rows(text, states))
    assert seen == {job for job, state in states.items() if state in ("running", "pending")}, text


def test_the_demo_prints_no_escape_codes_into_a_pipe_or_under_no_color(jobctl: Jobctl, tmp_path: Path) -> None:
    """examples/demo.sh: bold headings on a terminal, plain ones into a pipe and under NO_COLOR."""
    demo = str(REPO / "examples" / "demo.sh")
    env = _env(jobctl, DEMO_STORE=str(tmp_path / "demo-store"), PATH=f"{Path(JOBCTL).parent}:{os.environ['PATH']}")
    # The demo's own steps lean on two-second leases, which a loaded machine can outlast; what is
    # checked here is only how its headings are drawn, so its exit status is not.
    piped = subprocess.run(["sh", demo], env=env, capture_output=True, timeout=60)
    assert b"== submit a job" in piped.stdout and b"\x1b" not in piped.stdout + piped.stderr
    _code, output = in_pty(["sh", demo], {**env, "NO_COLOR": "1"}, deadline=60)
    assert b"== submit a job" in output and b"\x1b" not in output


@pytest.mark.parametrize("columns", [80, 120])
def test_wait_shows_whole_ids_and_states(jobctl: Jobctl, columns: int) -> None:
    states = _mixed_store(jobctl, running=0, pending=0, ended=4)
    code, output = in_pty([JOBCTL, "wait", *states], _env(jobctl, NO_COLOR="1"), columns=columns)
    text = output.decode(errors="replace")
    assert code == 11, text  # two of them failed
    assert set(_visible_rows(text, states)) == set(states), text


def test_a_record_s_own_text_is_drawn_as_text_never_as_markup_or_escapes(jobctl: Jobctl) -> None:
    """Another writer may put rich markup or an escape in kind, owner, error or pipeline: tables show it as text."""
    from jobctl import Record

    store = jobctl.store()
    closing = store.submit(Record(kind="[/]", spec={}))  # a closing tag with nothing to close: rich refuses it
    store.claim(closing, "[/]owner", 300)
    styled = store.submit(Record(kind="[bold]k", spec={}))
    escaped = store.submit(Record(kind="e\x1b[31mred", spec={}))
    epoch = store.claim(escaped, "w", 60).lease.epoch
    store.finish(escaped, epoch, "failed", error="[/] went\x1b[2J wrong")
    env = _env(jobctl, NO_COLOR="1")  # no colour: any escape in the output came from a record
    code, output = in_pty([JOBCTL, "list"], env)
    text = output.decode(errors="replace")
    assert code == 0 and "Traceback" not in text, text
    assert "[/]owner" in text and "[bold]k" in text and "e\\x1b[31mred" in text, text
    assert b"\x1b" not in output, text
    for job, shown in ((closing, "[/]owner (epoch 1"), (styled, "[bold]k"), (escaped, "[/] went\\x1b[2J wrong")):
        code, output = in_pty([JOBCTL, "show", job], env)
        text = output.decode(errors="replace")
        assert code == 0 and shown in text, text
        assert b"\x1b" not in output, text
    # A watch's title names the kinds it was given.
    code, output = in_pty(
        [JOBCTL, "watch", "--kind", "[/]"],
        _env(jobctl),
        stages=((lambda out: b"of kind [/]" in out and closing.encode() in out, interrupt),),
    )
    text = output.decode(errors="replace")
    assert code == 0 and "Traceback" not in text, text
