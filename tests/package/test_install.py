"""jobctl as its users get it: the wheel built from this checkout, installed outside it.

Once per session the release files are copied out of the checkout, the sdist
is built from the copy and the wheel from the sdist (``python -m build``,
as ``make dist`` does, but with this environment's setuptools instead of an
isolated one, to spare a download). The wheel is then installed twice, the
two ways the README gives: with pip into a fresh virtual environment, and
with ``pipx`` into a scratch ``PIPX_HOME``. Every command below is the
installed ``jobctl``, run from a directory outside the checkout with no
``PYTHONPATH``, so nothing can fall back on the source tree.

The dependencies (the versions this test environment runs) are downloaded
once into a wheelhouse, and both installs take them from there: building and
installing needs the package index only for that one download (and pipx's
own first start). Select these tests with ``-m package``, skip them with
``-m "not package"``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest

import jobctl
from jobctl.record import MODELS

pytestmark = [pytest.mark.package, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
VERSION = jobctl.__version__
#: Never part of a release, whatever the checkout holds.
NOT_RELEASED = shutil.ignore_patterns(
    ".git", ".venv*", "dist", "build", "*.egg-info", "__pycache__", "*.pyc", ".*_cache", ".hypothesis", "demo-store"
)


def _run(argv: list[str | Path]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path
    wheelhouse: Path


@dataclass(frozen=True)
class Installed:
    how: str
    bin: Path  # where the installed jobctl is
    python: Path  # the interpreter of the environment it was installed into
    prefix: Path  # that environment
    home: Path  # a directory outside the checkout: cwd and HOME of every run

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "JOB_", "JOBCTL_", "VIRTUAL_ENV"))}
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}", HOME=str(self.home), **extra)
        return env

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "jobctl"), *args],
            env=self.env(**env),
            cwd=self.home,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel, built from a copy of the checkout, and a wheelhouse of the dependencies."""
    top = tmp_path_factory.mktemp("dist")
    source = top / "source"
    shutil.copytree(REPO, source, ignore=NOT_RELEASED)
    out = top / "out"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source])
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(out.iterdir())
    wheelhouse = top / "wheelhouse"
    # The runtime dependencies and the postgres extra's, at the versions this environment runs.
    runtime = ("click", "rich", "platformdirs", "psycopg", "psycopg-binary", "typing-extensions")
    pins = [f"{name}=={metadata.version(name)}" for name in runtime]
    pins.append("pip")  # pipx refreshes the pip of its shared environment, from the same place
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", wheelhouse, *pins])
    return Dist(wheels[0], sdists[0], wheelhouse)


@pytest.fixture(scope="session")
def installs(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Installed]:
    """The wheel installed with pip into a fresh venv and with pipx, both at once."""
    top = tmp_path_factory.mktemp("installs")
    home = top / "home"
    home.mkdir()
    assert not top.is_relative_to(REPO)
    offline = ["--no-index", "--find-links", str(dist.wheelhouse)]

    venv = top / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    pip = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            *offline,
            f"jobctl[postgres] @ {dist.wheel.as_uri()}",  # the venv gets the optional extra too
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pipx_home, pipx_bin = top / "pipx-home", top / "pipx-bin"
    pipx_env = {
        **os.environ,
        "PIPX_HOME": str(pipx_home),
        "PIPX_BIN_DIR": str(pipx_bin),
        "PIPX_MAN_DIR": str(top / "pipx-man"),
        "PIPX_DEFAULT_PYTHON": sys.executable,
    }
    pipx = subprocess.Popen(
        [sys.executable, "-m", "pipx", "install", "--pip-args", " ".join(offline), dist.wheel],
        env=pipx_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for name, proc in (("pip", pip), ("pipx", pipx)):
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name} install exited {proc.returncode}:\n{output}"
    return {
        "venv": Installed("venv", venv / "bin", venv / "bin" / "python", venv, home),
        "pipx": Installed(
            "pipx", pipx_bin, pipx_home / "venvs" / "jobctl" / "bin" / "python", pipx_home / "venvs" / "jobctl", home
        ),
    }


@pytest.fixture(params=["venv", "pipx"])
def installed(request: pytest.FixtureRequest, installs: dict[str, Installed]) -> Installed:
    return installs[request.param]


# -- what is in the release ------------------------------------------------------------------


def test_the_wheel_holds_the_package_its_type_marker_and_license_and_nothing_else(dist: Dist) -> None:
    info = f"jobctl-{VERSION}.dist-info/"
    assert dist.wheel.name == f"jobctl-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(dist.wheel) as whl:
        names = set(whl.namelist())
        meta = Parser().parsestr(whl.read(info + "METADATA").decode())
        license_text = whl.read(info + "licenses/LICENSE")
        entry_points = whl.read(info + "entry_points.txt").decode()
    sources = {p.relative_to(REPO).as_posix() for p in (REPO / "jobctl").rglob("*.py")}
    assert sources <= names  # the whole package, subpackages included
    assert "jobctl/py.typed" in names  # the library is typed (PEP 561)
    assert sorted(n for n in names if not n.startswith(("jobctl/", info))) == []  # no tests, no bench
    # Besides the modules, only what runs needs: the type marker, the PostgreSQL store's named queries,
    # and the page jobctl serve ships (no build step, no external assets).
    others = sorted(n for n in names if n.startswith("jobctl/") and not n.endswith((".py", "py.typed")))
    sql = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "jobctl" / "store" / "postgres").glob("*.sql"))
    assert "jobctl/store/postgres/queries.sql" in sql and "jobctl/store/postgres/migrate-2.sql" in sql
    page = ["jobctl/web/static/index.html", "jobctl/web/static/page.css", "jobctl/web/static/page.js"]
    assert others == sorted(sql + page)
    assert license_text == (REPO / "LICENSE").read_bytes()
    assert meta["Version"] == VERSION
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.10"
    runtime = sorted(r.split(">=")[0] for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r)
    assert runtime == ["click", "platformdirs", "rich"]
    web = sorted(r.split(">=")[0] for r in meta.get_all("Requires-Dist") or [] if 'extra == "web"' in r)
    assert web == ["starlette", "uvicorn"]  # jobctl serve's, in an extra of their own
    assert "jobctl = jobctl.cli:main" in entry_points and "jobctl-replay = jobctl.replay:main" in entry_points


def test_the_sdist_carries_the_license_and_the_changelog(dist: Dist) -> None:
    top = f"jobctl-{VERSION}/"
    with tarfile.open(dist.sdist) as sdist:
        names = set(sdist.getnames())
        pkg_info = sdist.extractfile(top + "PKG-INFO")
        assert pkg_info is not None
        meta = Parser().parsestr(pkg_info.read().decode())
    assert {top + "LICENSE", top + "CHANGELOG.md", top + "README.md", top + "pyproject.toml"} <= names
    assert top + "jobctl/py.typed" in names
    assert (meta["Version"], meta["License-Expression"], meta.get_all("License-File")) == (
        VERSION,
        "Apache-2.0",
        ["LICENSE"],
    )


# -- the installed program -------------------------------------------------------------------


def test_help_and_version_of_the_installed_command(installed: Installed) -> None:
    helped = installed("--help")
    assert (helped.returncode, helped.stderr) == (0, "")
    assert helped.stdout.startswith("Usage: jobctl")
    version = installed("--version")
    assert (version.returncode, version.stderr) == (0, "")
    lines = version.stdout.splitlines()
    assert lines[0] == f"jobctl {VERSION}"
    assert {line.strip() for line in lines} >= set(MODELS)


def test_the_library_imports_from_the_installed_environment(installed: Installed) -> None:
    probe = (
        "import json, importlib.metadata as md, pathlib, jobctl; "
        "here = pathlib.Path(jobctl.__file__).parent; "
        "print(json.dumps([str(here), jobctl.__version__, md.version('jobctl'), (here / 'py.typed').exists()]))"
    )
    ran = subprocess.run(
        [str(installed.python), "-c", probe],
        env=installed.env(),
        cwd=installed.home,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    where, version, dist_version, typed = json.loads(ran.stdout)
    assert Path(where).is_relative_to(installed.prefix) and not Path(where).is_relative_to(REPO)
    assert version == dist_version == VERSION  # one version source, seen by the code and by the metadata
    assert typed


def test_a_job_survives_its_holder_with_the_installed_command(installed: Installed) -> None:
    """submit -> claim -> checkpoint -> release -> claim again: the new holder resumes from the checkpoint."""
    store = installed.home / f"store-{installed.how}"
    env = {"JOB_STORE": str(store)}

    def ok(*args: str) -> str:
        ran = installed(*args, **env)
        assert (ran.returncode, ran.stderr) == (0, ""), args
        return ran.stdout

    job = ok("submit", "--kind", "fetch", "--spec", '{"url": "https://example.invalid/big.iso", "chunk": 1.50}')
    job = job.strip()
    first = json.loads(ok("claim", job, "--owner", "worker-a", "--ttl", "60", "--json"))
    assert (first["owner"], first["epoch"], first["checkpoint"]) == ("worker-a", 1, None)
    ok("checkpoint", job, '{"offset": 4096}', "--epoch", "1", "--done", "4096")
    released = json.loads(ok("release", job, "--epoch", "1", "--json"))
    assert (released["state"], released["owner"], released["orphan"]) == ("pending", "", True)
    second = json.loads(ok("claim", job, "--owner", "worker-b", "--ttl", "60", "--json"))
    assert (second["owner"], second["epoch"]) == ("worker-b", 2)  # adopted: the epoch rose
    assert (second["checkpoint"], second["done"]) == ({"offset": 4096}, 4096)  # and it resumes from there
    assert second["spec"] == {"url": "https://example.invalid/big.iso", "chunk": 1.50}

    late = installed("checkpoint", job, '{"offset": 8192}', "--epoch", "1", **env)  # the first holder, too late
    assert late.returncode == 5 and late.stderr.startswith("jobctl: stale_epoch:"), late.stderr
    record = store / "jobs" / f"{job}.json"
    assert '"chunk": 1.50' in record.read_text()  # the spec kept token for token
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def test_the_postgres_extra_installs_and_serves_a_database_store(installs: dict[str, Installed], pg_url: str) -> None:
    """``jobctl[postgres]`` from the wheel: the driver imports, and the installed command runs a job on a server."""
    venv = installs["venv"]
    env = {"JOB_STORE": pg_url}

    def ok(*args: str) -> str:
        ran = venv(*args, **env)
        assert (ran.returncode, ran.stderr) == (0, ""), (args, ran.stderr)
        return ran.stdout

    ok("db", "init")
    job = ok("submit", "--kind", "fetch", "--spec", '{"n": 1}').strip()
    claimed = json.loads(ok("claim", "--next", "--owner", "host-a", "--ttl", "60", "--format", "json"))
    assert (claimed["id"], claimed["epoch"]) == (job, 1)
    ok("finish", job, "--epoch", "1", "--state", "complete")
    assert json.loads(ok("show", job, "--json"))["state"] == "complete"
    plain = installs["pipx"]("--store", pg_url, "list")  # installed without the extra: one line saying what to install
    assert plain.returncode != 0 and "postgres" in plain.stderr and "Traceback" not in plain.stderr, plain.stderr
