"""A file store belongs to one user: ``paths``/``doctor`` say so when the current user cannot fully use it.

Run as root and as a second, unprivileged user the test creates (useradd;
removed after). The second user runs jobctl in a forked child of the test
process that has dropped root (setgid/setuid) -- no new interpreter, so the
test needs no install the second user can read. Where users cannot be
created the tests are skipped with one line; under ``CI=true`` that is a
failure instead.
"""

from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from clitools import Jobctl, Ran

from jobctl.cli.main import cli

pytestmark = pytest.mark.timeout(60)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


def _cannot(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the two-user tests: {why}")
    pytest.skip(f"two-user tests need root and useradd: {why}")


@pytest.fixture
def other_user() -> Iterator[User]:
    """A fresh unprivileged user, removed after the test."""
    if os.geteuid() != 0:
        _cannot("not root")
    useradd, userdel = shutil.which("useradd"), shutil.which("userdel")
    if useradd is None or userdel is None:
        _cannot("no useradd/userdel")
    name = f"jobctl-t{os.getpid() % 100000}{os.urandom(2).hex()}"
    made = subprocess.run(
        [str(useradd), "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        _cannot(f"useradd failed: {made.stderr.strip()}")
    try:
        entry = pwd.getpwnam(name)
        yield User(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run([str(userdel), name], capture_output=True, check=False)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user can reach (pytest's own tmp_path is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="jobctl-users-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


#: What the commands run here import lazily: imported before the fork, because the second
#: user cannot read root's Python installation to import them after it.
WARM = (
    "configparser",
    "fcntl",
    "stat",
    "traceback",
    "platformdirs",
    "jobctl.settings",
    "jobctl.schedule",
    "jobctl.lock",
    "jobctl.cli.upkeep",
    "jobctl.cli.submit",
    "jobctl.cli.render",
)


def as_user(user: User, store: Path, *args: str) -> Ran:
    """``jobctl ARGS`` with ``--store STORE``, run by ``user`` in a forked child that dropped root."""
    import importlib

    for name in WARM:
        importlib.import_module(name)
    import platformdirs

    platformdirs.user_config_dir("jobctl", appauthor=False)  # its own lazy imports, too
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its pipes and exit status
        code = 70
        try:
            os.close(out_r)
            os.close(err_r)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            os.environ.clear()
            os.environ.update({"HOME": str(store.parent), "XDG_CONFIG_HOME": str(store.parent / "cfg")})
            sys.stdout = io.TextIOWrapper(os.fdopen(out_w, "wb"), encoding="utf-8", write_through=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(err_w, "wb"), encoding="utf-8", write_through=True)
            try:
                cli.main(args=["--store", str(store), *args], prog_name="jobctl", standalone_mode=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # a traceback must reach the test, which fails on it
                import traceback

                traceback.print_exc(file=sys.stderr)
                code = 71
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r, "rb") as out, os.fdopen(err_r, "rb") as err:
        stdout, stderr = out.read(), err.read()
    _, status = os.waitpid(pid, 0)
    return Ran(os.waitstatus_to_exitcode(status), stdout, stderr.decode())


def as_root(store: Path, *args: str) -> Ran:
    home = store.parent / "root-home"
    home.mkdir(exist_ok=True)
    return Jobctl(store, home)("--store", str(store), *args)


def doctor(ran: Ran) -> dict[str, object]:
    assert "Traceback" not in ran.err, ran.err
    report: dict[str, object] = json.loads(ran.text)
    return report


def test_a_second_user_is_told_the_owners_store_is_not_theirs(other_user: User, shared: Path) -> None:
    store = shared / "store"
    assert as_root(store, "submit", "--kind", "k").code == 0
    ran = as_user(other_user, store, "doctor", "--json")
    report = doctor(ran)
    assert ran.code == 1 and report["healthy"] is False
    access, owner = str(report["check_access"]), str(report["check_owner"])
    assert access.startswith(f"FAILED: {other_user.name} (uid {other_user.uid}) cannot write {store / 'jobs'}")
    assert owner.startswith("FAILED: records or locks") and "owned by root (uid 0)" in owner
    for verdict in (access, owner):
        assert "a file store belongs to one user" in verdict and "the PostgreSQL store" in verdict
    plain = as_user(other_user, store, "paths")
    assert plain.code == 1 and "check_owner=FAILED: " in plain.text


def test_root_is_told_the_users_records_are_not_its_own(other_user: User, shared: Path) -> None:
    store = shared / "store"
    store.mkdir()
    os.chown(store, other_user.uid, other_user.gid)
    made = as_user(other_user, store, "submit", "--kind", "k", "--id", "theirs-1")
    assert made.code == 0, made.err
    mine = as_user(other_user, store, "doctor", "--json")
    report = doctor(mine)
    assert mine.code == 0 and report["healthy"] is True, report  # the owner's store is fine for its owner
    assert {k: v for k, v in report.items() if k.startswith("check_")} == {
        "check_open": "ok",
        "check_access": "ok",
        "check_owner": "ok",
        "check_lock": "ok",
        "check_rename": "ok",
        "check_leases": "ok",
    }
    # Root can read and write anything, but every record it rewrote would become root's,
    # locking its owner out: the check names the owner's files.
    ran = as_root(store, "doctor", "--json")
    report = doctor(ran)
    assert ran.code == 1 and report["check_access"] == "ok"
    owner = str(report["check_owner"])
    assert f"2 owned by {other_user.name} (uid {other_user.uid}): theirs-1.json, theirs-1.json.lock" in owner, owner
    assert "the PostgreSQL store" in owner


def test_a_record_the_owner_cannot_read_fails_the_check(other_user: User, shared: Path) -> None:
    store = shared / "store"
    store.mkdir()
    os.chown(store, other_user.uid, other_user.gid)
    assert as_user(other_user, store, "submit", "--kind", "k", "--id", "locked-out").code == 0
    (store / "jobs" / "locked-out.json").chmod(0)
    ran = as_user(other_user, store, "doctor", "--json")
    report = doctor(ran)
    assert ran.code == 1
    assert "1 not readable and writable: locked-out.json" in str(report["check_owner"]), report


def test_root_on_its_own_store_is_healthy(shared: Path) -> None:
    store = shared / "store"
    assert as_root(store, "submit", "--kind", "k").code == 0
    ran = as_root(store, "doctor", "--json")
    assert ran.code == 0 and doctor(ran)["healthy"] is True
