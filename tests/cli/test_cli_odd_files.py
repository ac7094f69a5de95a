"""The command line over a store with odd things at record names, and over a disk that refuses writes.

`list`, `orphans`, `show`, `claim --next` and `worker --once` name what they
cannot read (path and why) on one stderr line and go on with the rest; `show`
of it is one `invalid` line, never a traceback or a hang. A write the disk
refuses exits 14 naming the job and the path. [issue 11: 8-11, 16]
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import JOBCTL, Jobctl
from oddfiles import bind_socket

from jobctl import errors


def plant(jobctl: Jobctl, kind: str) -> tuple[str, str]:
    """Put ``kind`` (fifo, dir, socket, sparse, link) at record ``odd-1``'s name; return (id, what stderr says)."""
    path = jobctl.root / "jobs" / "odd-1.json"
    if kind == "socket":  # its open fails (ENXIO) before any fstat: named all the same
        bind_socket(path)
        return "odd-1", f"{path} is a socket, not a record (a regular file)"
    if kind == "fifo":
        os.mkfifo(path)
        return "odd-1", f"{path} is a FIFO, not a record (a regular file)"
    if kind == "dir":
        path.mkdir()
        return "odd-1", f"{path} is a directory, not a record (a regular file)"
    if kind == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(3 << 30)
        return "odd-1", f"{path} is {3 << 30} bytes, over the {64 << 20}-byte limit on a record"
    os.symlink(jobctl.root / "jobs" / "nowhere.json", path)
    return "odd-1", f"{path} is a symbolic link, not a record; jobctl does not follow links in a store"


KINDS = ["fifo", "dir", "socket", "sparse", "link"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_readers_name_the_odd_record_and_go_on(jobctl: Jobctl, kind: str) -> None:
    good = jobctl.submit()
    odd, why = plant(jobctl, kind)
    for command in ("list", "orphans"):
        ran = jobctl(command)
        assert ran.code == errors.EXIT_FAILURE, (command, ran.err)
        assert good in ran.text and odd not in ran.text
        assert ran.err.count("\n") == 1 and "Traceback" not in ran.err
        assert ran.err.startswith(f"jobctl: job: 1 record(s) could not be read ({odd}): ") and why in ran.err

    ran = jobctl("show", odd)
    assert ran.code == errors.Invalid.exit_code and ran.out == b""
    assert ran.err.startswith("jobctl: invalid: ") and why in ran.err and ran.err.count("\n") == 1

    ran = jobctl("claim", "--next", "--owner", "me", "--format", "json")
    assert ran.code == 0, ran.err
    assert json.loads(ran.out)["id"] == good
    assert why in ran.err and ran.err.count("\n") == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_worker_once_runs_the_others_past_an_odd_record(jobctl: Jobctl, tmp_path: Path, kind: str) -> None:
    """A real worker process: before, a FIFO hung it (ignoring SIGTERM); now it runs the job and exits."""
    marker = tmp_path / "ran"
    spec = json.dumps({"argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('yes')"]})
    good = jobctl.submit("--kind", "shell", "--spec", spec)
    plant(jobctl, kind)
    proc = subprocess.run(
        [JOBCTL, "worker", "--once"],
        env=jobctl.subprocess_env(),
        capture_output=True,
        timeout=45,
    )
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "yes"
    assert jobctl.store().load(good).state == "complete"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["dir", "socket", "fifo"])
def test_an_odd_file_at_a_lock_is_invalid_naming_it(jobctl: Jobctl, kind: str) -> None:
    """Before, a directory (EISDIR) or a socket (ENXIO) at a lock was "refused: cannot create ...", exit 10."""
    job = jobctl.submit("--id", "a1")
    lock = jobctl.root / "jobs" / "a1.json.lock"
    lock.unlink()
    if kind == "dir":
        lock.mkdir()
    elif kind == "socket":
        bind_socket(lock)
    else:
        os.mkfifo(lock)
    what = {"dir": "a directory", "socket": "a socket", "fifo": "a FIFO"}[kind]
    before = jobctl.record(job)
    for command in (("claim", job, "--owner", "x"), ("cancel", job)):
        ran = jobctl(*command)
        assert ran.code == errors.Invalid.exit_code, (command, ran.err)
        assert ran.err.startswith(f"jobctl: invalid: {lock} is {what}, not a lock (a regular file)"), ran.err
        assert ran.err.count("\n") == 1 and ran.out == b""
    assert jobctl.record(job) == before


@pytest.mark.parametrize("bad", ["²", "1e9"])
def test_a_record_size_limit_that_is_no_whole_number_is_one_invalid_line(jobctl: Jobctl, bad: str) -> None:
    """Before, "²" (a digit to str.isdigit(), not to int()) was a ValueError traceback."""
    job = jobctl.submit()
    ran = jobctl("show", job, env={"JOBCTL_MAX_RECORD_BYTES": bad})
    assert ran.code == errors.Invalid.exit_code and ran.out == b""
    assert ran.err.startswith(
        f"jobctl: invalid: JOBCTL_MAX_RECORD_BYTES must be a whole number of bytes of at least 1, not {bad!r}"
    )
    assert ran.err.count("\n") == 1


def _efbig(limit: int) -> None:
    # SIGXFSZ ignored, the write past RLIMIT_FSIZE fails with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.timeout(60)
def test_a_write_the_disk_refuses_exits_14_and_changes_nothing(jobctl: Jobctl) -> None:
    """A real jobctl process under RLIMIT_FSIZE: the kernel answers EFBIG mid-write, no mock involved."""
    small = jobctl.submit()
    jobs = jobctl.root / "jobs"
    before = sorted(os.listdir(jobs))
    big = json.dumps({"blob": "x" * 100_000})

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [JOBCTL, *args],
            env=jobctl.subprocess_env(),
            capture_output=True,
            timeout=30,
            preexec_fn=lambda: _efbig(32 * 1024),
        )

    proc = run("submit", "--kind", "test", "--id", "big-1", "--spec", big)
    err = proc.stderr.decode()
    assert proc.returncode == errors.EXIT_WRITE_FAILED == 14, err
    assert proc.stdout == b""
    assert err == (
        f"jobctl: refused: job big-1: cannot write {jobs}/big-1.json: File too large; nothing was changed; "
        f"{errors.WriteFailed.hint}\n"
    )
    assert sorted(os.listdir(jobs)) == before  # no record, no temporary, no stray lock

    ran = jobctl("claim", small, "--owner", "me")
    assert ran.code == 0
    record = jobctl.record(small)
    proc = run("progress", small, "--epoch", "1", "--done", "1", "--checkpoint", big)
    assert proc.returncode == 14, proc.stderr
    assert f"job {small}: cannot write {jobs}/{small}.json: File too large; nothing was changed" in proc.stderr.decode()
    assert jobctl.record(small) == record
    assert sorted(os.listdir(jobs)) == before


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["link", "file", "fifo"])
def test_an_odd_work_directory_stops_only_what_uses_it(jobctl: Jobctl, kind: str, tmp_path: Path) -> None:
    """A link, file or FIFO planted at work/: reading the store goes on; what needs work/ refuses it."""
    job = jobctl.submit()
    work = jobctl.root / "work"
    os.rmdir(work)
    outside = tmp_path / "outside"
    outside.mkdir()
    if kind == "link":
        os.symlink(outside, work)
    elif kind == "file":
        work.write_bytes(b"")
    else:
        os.mkfifo(work)
    for args in (("list",), ("show", job), ("orphans",)):
        ran = jobctl(*args)
        assert ran.code == 0, (args, ran.err)
        assert job in ran.text
    ran = jobctl("logs", job)
    assert ran.code != 0 and "Traceback" not in ran.err and ran.err.count("\n") == 1
    assert str(work) in ran.err
    assert list(outside.iterdir()) == []
