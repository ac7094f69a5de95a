"""A second user who can write the store plants links; jobctl, run by root or by the store's owner, never follows one.

The test creates two unprivileged users (removed after): ``owner``, whose
store it is, and ``planter``, who can write the store's directories (a
shared directory, as the store is meant to be) and plants a symbolic link
where jobctl will look next. jobctl is then run, as a real process, by root
(as a nightly ``sweep`` or a root worker would be) and by the owner. Each
test checks that nothing was created, appended to or read outside the store,
and that the refusal is one line naming the path. [issue 11: 4-8]

Where users cannot be created (not root, no ``useradd``) the tests skip with
one line -- except under CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

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

REPO = Path(__file__).resolve().parents[2]
# click, rich and platformdirs: where this interpreter finds them.
LIBS = [p for p in sys.path if p.endswith("site-packages")]


@dataclass
class User:
    name: str
    uid: int
    gid: int


def _as(user: User | None) -> dict[str, object]:
    return {} if user is None else {"user": user.uid, "group": user.gid, "extra_groups": []}


def _interpreter(user: User) -> str:
    """This Python if ``user`` may run it, else the system's of the same version (a pyenv under
    /root is out of an unprivileged user's reach)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, shutil.which(version) or "", f"/usr/bin/{version}"):
        if not candidate:
            continue
        try:
            subprocess.run([candidate, "-c", "import sys"], check=True, capture_output=True, timeout=30, **_as(user))
        except (OSError, subprocess.SubprocessError):
            continue
        return candidate
    raise OSError(f"no {version} that user {user.name} may run")


def _useradd(name: str) -> User:
    subprocess.run(
        ["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/false", name],
        check=True,
        capture_output=True,
    )
    entry = pwd.getpwnam(name)
    return User(name, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[User, User, str]]:
    """``(owner, planter, a python the owner may run)``; both users removed after."""
    made: list[User] = []
    try:
        try:
            if os.geteuid() != 0 or shutil.which("useradd") is None:
                raise OSError("not root, or no useradd")
            tag = os.urandom(3).hex()
            for role in ("own", "plt"):
                made.append(_useradd(f"jc{role}{tag}"))
            python = _interpreter(made[0])
        except (OSError, subprocess.CalledProcessError) as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI must run the hostile-store tests, but users cannot be created here: {exc}")
            pytest.skip(f"cannot create users here ({exc})")
        yield made[0], made[1], python
    finally:
        for user in made:
            subprocess.run(["userdel", user.name], capture_output=True)


@dataclass
class Scene:
    base: Path  # traversable by everybody
    root: Path  # the store
    outside: Path  # a directory outside the store the planter can write
    owner: User
    planter: User
    python: str  # an interpreter both root and the users may run
    runner: str  # "root" or "owner": who runs jobctl

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "ABSTRACTION_", "PYTHON"))}
        env.update(
            {
                "JOB_STORE": str(self.root),
                "HOME": str(self.base),
                "XDG_CONFIG_HOME": str(self.base / "cfg"),
                "PYTHONPATH": os.pathsep.join([str(REPO), *LIBS]),
            }
        )
        return env

    def jobctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        who = None if self.runner == "root" else self.owner
        return subprocess.run(
            [self.python, "-m", "jobctl", *args], env=self.env(), capture_output=True, text=True, timeout=60, **_as(who)
        )

    def plant(self, script: str) -> None:
        """Run ``script`` (Python, with ``os`` and ``root``/``outside`` bound) as the planter."""
        prelude = f"import os\nroot = {str(self.root)!r}\noutside = {str(self.outside)!r}\n"
        subprocess.run([self.python, "-I", "-c", prelude + script], check=True, timeout=30, **_as(self.planter))

    def submit(self, *args: str) -> str:
        ran = self.jobctl("submit", *args)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout.strip()

    def mine(self, path: Path, data: bytes) -> None:
        """A private file of whoever runs jobctl (root-only when root runs it), outside the store."""
        path.write_bytes(data)
        path.chmod(0o600)
        if self.runner == "owner":
            os.chown(path, self.owner.uid, self.owner.gid)


@pytest.fixture(params=["root", "owner"])
def scene(request: pytest.FixtureRequest, users: tuple[User, User, str]) -> Iterator[Scene]:
    owner, planter, python = users
    base = Path(tempfile.mkdtemp(prefix="jobctl-hostile-"))
    try:
        base.chmod(0o755)
        root, outside = base / "store", base / "outside"
        for directory in (root, root / "jobs", root / "work", outside):
            directory.mkdir()
            # Shared, and without the sticky bit: the kernel's protected_symlinks
            # must not be what saves jobctl here.
            directory.chmod(0o777)
            os.chown(directory, owner.uid, owner.gid)
        os.chown(outside, planter.uid, planter.gid)
        yield Scene(base, root, outside, owner, planter, python, request.param)
    finally:
        shutil.rmtree(base)


def one_line(ran: subprocess.CompletedProcess[str], code: int, *parts: str) -> str:
    assert ran.returncode == code, (ran.returncode, ran.stderr)
    assert ran.stderr.count("\n") == 1 and "Traceback" not in ran.stderr, ran.stderr
    for part in parts:
        assert part in ran.stderr, (part, ran.stderr)
    return ran.stderr


@pytest.mark.timeout(120)
def test_a_link_at_a_lock_never_creates_its_target(scene: Scene) -> None:
    """Item 5: ``sweep`` (of one record and of all) and a write refuse the link and create nothing."""
    job = scene.submit("--kind", "t")
    lock = scene.root / "jobs" / f"{job}.json.lock"
    target = scene.outside / "nologin"
    scene.plant(
        f"os.unlink({str(lock)!r})\nos.symlink({str(target)!r}, {str(lock)!r})\n"
        f"open({str(scene.root / 'jobs' / job)!r} + '.json.abc1.tmp', 'w').close()\n"
        # A lock link for a job that does not exist yet, for submit --id.
        f"os.symlink(outside + '/fresh', root + '/jobs/fresh-1.json.lock')\n"
    )
    record = (scene.root / "jobs" / f"{job}.json").read_bytes()
    for args in (("sweep", job), ("sweep",), ("claim", job, "--owner", "me")):
        one_line(scene.jobctl(*args), 9, f"{lock} is a symbolic link", "does not follow links")
    one_line(
        scene.jobctl("submit", "--kind", "t", "--id", "fresh-1"),
        9,
        f"{scene.root}/jobs/fresh-1.json.lock is a symbolic link",
    )
    assert sorted(os.listdir(scene.outside)) == []
    assert (scene.root / "jobs" / f"{job}.json").read_bytes() == record
    assert not (scene.root / "jobs" / "fresh-1.json").exists()


@pytest.mark.timeout(120)
def test_a_linked_jobs_directory_is_refused(scene: Scene) -> None:
    """Item 6: ``jobs/`` replaced by a link: nothing is written into (or read from) its target."""
    scene.submit("--kind", "t")
    elsewhere = scene.outside / "jobs"
    scene.plant(
        "os.rename(root + '/jobs', root + '/jobs.old')\n"
        "os.mkdir(outside + '/jobs', 0o777)\nos.chmod(outside + '/jobs', 0o777)\n"
        "os.symlink(outside + '/jobs', root + '/jobs')\n"
    )
    for args in (("submit", "--kind", "t"), ("list",), ("sweep",), ("show", "x-1")):
        one_line(scene.jobctl(*args), 9, f"{scene.root}/jobs is a symbolic link, not a directory")
    assert os.listdir(elsewhere) == []


@pytest.mark.timeout(120)
def test_a_link_at_a_record_is_not_read(scene: Scene) -> None:
    """Item 7: ``show`` and ``list`` do not read a private file through a link at a record's name."""
    job = scene.submit("--kind", "t", "--spec", '{"public": true}')
    record = (scene.root / "jobs" / f"{job}.json").read_bytes()
    secret = scene.outside / "secret.json"
    scene.mine(secret, record.replace(b'"public": true', b'"SECRET": true').replace(job.encode(), b"peek-1"))
    scene.plant(f"os.symlink({str(secret)!r}, root + '/jobs/peek-1.json')\n")
    ran = scene.jobctl("show", "peek-1")
    one_line(ran, 9, f"{scene.root}/jobs/peek-1.json is a symbolic link")
    assert "SECRET" not in ran.stdout + ran.stderr
    ran = scene.jobctl("list", "--json")
    one_line(ran, 1, "(peek-1)", "is a symbolic link")
    assert [json.loads(line)["id"] for line in ran.stdout.splitlines()] == [job]
    assert "SECRET" not in ran.stdout


PLANTS = {
    # work/.jobctl itself a link to a directory outside
    "jobctl-dir": "os.symlink(outside, root + '/work/.jobctl')\n",
    # work/.jobctl/logs itself a link to a directory outside
    "logs-dir": "os.makedirs(root + '/work/.jobctl')\nos.symlink(outside, root + '/work/.jobctl/logs')\n",
    # work/.jobctl/logs/<id> (the older layout's directory a job) a link to a directory outside
    "job-dir": "os.makedirs(root + '/work/.jobctl/logs')\nos.symlink(outside, root + '/work/.jobctl/logs/' + job)\n",
    # the attempt log itself a link to a private file outside
    "log-file": (
        "os.makedirs(root + '/work/.jobctl/logs')\n"
        "os.symlink(outside + '/private.log', root + '/work/.jobctl/logs/' + job + '.attempt-1.log')\n"
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", sorted(PLANTS))
def test_attempt_logs_never_leave_the_store(scene: Scene, where: str) -> None:
    """Item 4: a run appends no output through a planted link; ``logs`` prints nothing through one."""
    job = scene.submit("--kind", "shell", "--spec", json.dumps({"argv": ["echo", "job output"]}))
    private = scene.outside / "private.log"
    scene.mine(private, b"private\n")
    os.chmod(scene.outside, 0o777)
    scene.plant(f"job = {job!r}\n" + PLANTS[where])
    ran = scene.jobctl("run", job)
    assert ran.returncode == 0, ran.stderr
    assert "job output" in ran.stdout  # the job still ran; its output went where the runner's goes
    assert private.read_bytes() == b"private\n"
    assert sorted(os.listdir(scene.outside)) == ["private.log"]
    state = json.loads(scene.jobctl("show", job, "--json").stdout)["state"]
    assert state == "complete"
    ran = scene.jobctl("logs", job)
    one_line(ran, 9, "is a symbolic link", "does not follow links")
    assert "private" not in ran.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scene", ["owner"], indirect=True)  # root reads a mode 000 file
def test_a_record_the_reader_cannot_read_is_named_and_the_rest_run(scene: Scene) -> None:
    """Item 8, for real: the owner (not root) meets a mode 000 record; list, orphans and the worker go on."""
    marker = scene.base / "ran"
    spec = json.dumps({"argv": ["sh", "-c", f"echo yes > {marker}"]})
    good = scene.submit("--kind", "shell", "--spec", spec)
    locked = scene.submit("--kind", "shell", "--spec", spec.replace("yes", "no"))
    os.chmod(scene.base, 0o777)
    (scene.root / "jobs" / f"{locked}.json").chmod(0o000)
    why = f"cannot read {scene.root}/jobs/{locked}.json: Permission denied"
    for command in ("list", "orphans"):
        ran = scene.jobctl(command)
        one_line(ran, 1, f"({locked})", why)
        assert good in ran.stdout and locked not in ran.stdout
    one_line(scene.jobctl("show", locked), 10, why)
    ran = scene.jobctl("worker", "--once")
    assert ran.returncode == 0, ran.stderr
    assert marker.read_text() == "yes\n"
