"""A job cannot read its worker's secrets, nor its guardian's, though it runs as the same user.

The worker runs as an unprivileged user (``nobody`` when the suite runs as
root; the suite's own user otherwise) with secrets in its environment and
one in an open descriptor (a memfd). Its job (``_snoop.py``) tries every way
``/proc`` offers a process of the same user: the environment, the command
line, the memory, the descriptors, of the worker and of its guardian. No
secret may reach the job's output; each try but the command line must be
refused; and the job can still read its own ``/proc`` (it is not sealed).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from workertools import HERE

import jobctl
from jobctl import FileStore, open_store
from jobctl.runner import log_read

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(sys.platform != "linux", reason="/proc and prctl: Linux")]

PREFIX = "jobctl-secret-"
#: The checkout's jobctl package, copied where any user can read it (a clone under /root is root's alone).
_PACKAGE = Path(jobctl.__file__).resolve().parent


def _no_user(why: str) -> None:
    """Skip for want of an unprivileged user; under CI=true that is a failure: the test must run there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: this test must run)")
    pytest.skip(why)


class User:
    """Who the worker runs as, and an interpreter that user can run jobctl with."""

    def __init__(self, uid: int | None, gid: int | None, python: str, path: str, scripts: Path) -> None:
        self.uid, self.gid, self.python, self.path, self.scripts = uid, gid, python, path, scripts

    def popen(self, argv: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen[bytes]:
        if self.uid is None:
            return subprocess.Popen(argv, env=env, **kw)
        return subprocess.Popen(argv, env=env, user=self.uid, group=self.gid, extra_groups=[], **kw)


def _pythons() -> list[str]:
    found = [sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]
    return [p for i, p in enumerate(found) if p and p not in found[:i]]


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Iterator[User]:
    """The suite's user when it is not root; else ``nobody``, with the first interpreter it can run jobctl with."""
    if os.geteuid() != 0:
        yield User(None, None, sys.executable, str(_PACKAGE.parent), HERE)
        return
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        _no_user("running as root, and no user 'nobody' to run the worker as")
    shelf = Path(tempfile.mkdtemp(prefix="jobctl-secrets-code-"))
    os.chmod(shelf, 0o755)
    shutil.copytree(_PACKAGE, shelf / "jobctl", ignore=shutil.ignore_patterns("__pycache__"))
    for script in ("_secret_driver.py", "_snoop.py"):  # the worker's and the job's programs, beside the copy
        shutil.copy(HERE / script, shelf / script)
    try:
        for python in _pythons():
            candidate = User(entry.pw_uid, entry.pw_gid, python, str(shelf), shelf)
            try:
                probe = candidate.popen(
                    [python, "-c", "import jobctl.worker"],
                    {"PYTHONPATH": candidate.path, "PYTHONDONTWRITEBYTECODE": "1"},
                    cwd="/",
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            except OSError:
                continue  # the user cannot reach it
            if probe.wait(30) == 0:
                yield candidate
                return
        _no_user("no Python interpreter that user 'nobody' can run jobctl with")
    finally:
        shutil.rmtree(shelf, ignore_errors=True)


@pytest.fixture
def place(user: User) -> Iterator[Path]:
    """A directory the worker's user owns (pytest's own is root's alone when the suite runs as root)."""
    path = Path(tempfile.mkdtemp(prefix="jobctl-secrets-"))
    os.chmod(path, 0o755)
    if user.uid is not None:
        os.chown(path, user.uid, user.gid or 0)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.file_only  # the sealing is the process's, whatever the store; this worker's user needs a store it owns
def test_a_job_reads_no_secret_of_its_worker_or_guardian(user: User, place: Path) -> None:
    root = place / "store"
    env_secret, webhook_secret, fd_secret = (PREFIX + secrets.token_hex(16) for _ in range(3))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": user.path,
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": str(place),
        "JOBCTL_CONFIG": str(place / "no-config.ini"),
        "PGPASSWORD": env_secret,
        "WEBHOOK_SECRET": webhook_secret,
        "FD_SECRET": fd_secret,  # the driver moves it into a memfd and out of its environment
    }
    worker = user.popen(
        [user.python, str(user.scripts / "_secret_driver.py"), str(root), PREFIX],
        env,
        cwd=place,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, err = worker.communicate(timeout=90)
    assert worker.returncode == 0, err.decode()
    store: FileStore = open_store(root)  # type: ignore[assignment]
    (job,) = [r.id for r in store.list()]
    log = (log_read(store, job, 1) or b"").decode()
    assert store.load(job).state == "complete", log
    for secret in (env_secret, webhook_secret, fd_secret):
        assert secret not in log, log
    lines = [line.split() for line in log.splitlines() if not line.startswith("---")]
    assert ["guardians", "1"] in lines, log  # the job found its guardian to try
    targets = [line[2] for line in lines if line[0] == "target"]
    assert len(targets) == 2, log
    for pid in targets:
        tries = {line[0]: line[2] for line in lines if len(line) > 2 and line[1] == pid and line[0] != "target"}
        # EACCES (13) or EPERM (1): every door but the command line is shut.
        assert tries["environ"].startswith("denied") and tries["mem"].startswith("denied"), log
        assert tries["fd"].startswith("denied"), log
        assert tries["cmdline"] == "ok", log  # world-readable, and it holds no secret (checked above)
    own = [line for line in lines if line[0] == "environ" and line[1] not in targets]
    assert own and own[0][2] == "ok", log  # the job itself is as dumpable as any program: not sealed
