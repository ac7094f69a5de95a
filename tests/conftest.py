"""Shared fixtures: the shared contract's location, stores, and a clock the tests drive.

The contract (DIGEST, scenarios, vectors) lives beside the clone in CI
(``<repo>/../shared/contract``) or wherever ``JOBCTL_CONTRACT_DIR`` points.
The project's own tests need nothing outside the repository (records and
scenarios of its own are in ``tests/data``). The conformance tests that read
upstream's files SKIP, with one line naming what is missing, when the
contract cannot be found; ``JOBCTL_REQUIRE_CONTRACT=1`` (set by ``.ci/run``)
turns that skip into a failure, so CI never passes without them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import jobctl

sys.path.insert(0, str(Path(__file__).resolve().parent))  # importlib mode puts no test directory on sys.path

from contractdir import CONTRACT_ENV, locate_contract

REPO_ROOT = Path(__file__).resolve().parent.parent
REQUIRE_ENV = "JOBCTL_REQUIRE_CONTRACT"
#: Every skip for a missing contract starts with this (``.ci/run`` counts them).
SKIP_PREFIX = "upstream conformance files not found"

#: Where the fake clock starts: a whole second, far from the zero instant.
START = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _contract_problem(path: Path) -> str | None:
    if not path.is_dir():
        return f"the shared contract directory {path} does not exist"
    for part in ("DIGEST.md", "scenarios", "vectors/records", "vectors/failures", "vectors/envelope"):
        if not (path / part).exists():
            return f"the shared contract at {path} has no {part}"
    return None


def contract_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


@pytest.fixture(scope="session")
def contract_dir() -> Path:
    """The shared contract; skips when it is missing, fails instead under ``JOBCTL_REQUIRE_CONTRACT=1``."""
    path = locate_contract()
    problem = _contract_problem(path)
    if problem is not None:
        line = f"{SKIP_PREFIX}: {problem} (set {CONTRACT_ENV}=<dir>)"
        if contract_required():
            pytest.fail(f"{line}; {REQUIRE_ENV} is set, so the conformance suite must run", pytrace=False)
        pytest.skip(line)
    return path


# -- parametrisation over contract files -----------------------------------------
#
# Collection happens before fixtures run, so the file lists are computed here.
# When the contract is missing each list holds one MISSING placeholder: the test
# still runs, asks for ``contract_dir`` and skips (or fails) with the line above,
# instead of pytest quietly collecting an empty parameter set.

MISSING = "contract-missing"


def _files(pattern: str) -> list[str]:
    root = locate_contract()
    if _contract_problem(root) is not None:
        return [MISSING]
    found = sorted(str(p.relative_to(root)) for p in root.glob(pattern))
    return found or [MISSING]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    params = {
        "scenario_name": "scenarios/*.txt",
        "record_vector": "vectors/records/*.json",
        "failure_vector": "vectors/failures/*.json",
        "accept_vector": "vectors/envelope/accept.*.json",
        "invalid_vector": "vectors/envelope/invalid.*.json",
    }
    for name, pattern in params.items():
        if name in metafunc.fixturenames:
            files = _files(pattern)
            metafunc.parametrize(name, files, ids=[Path(f).name for f in files])


# -- clocks and stores -----------------------------------------------------------


class FakeClock:
    """A clock the test moves by hand. ``clock()`` (what FileStore calls) returns ``.now``."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now = self.now + timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def make_clock() -> Callable[..., FakeClock]:
    """The FakeClock class, for tests that need more than one clock (or one per example)."""
    return FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "root"


@pytest.fixture
def store(store_root: Path) -> jobctl.FileStore:
    """A file store on the system clock."""
    return jobctl.FileStore(store_root)


@pytest.fixture
def clocked_store(store_root: Path, clock: FakeClock) -> jobctl.FileStore:
    """A file store whose ``now`` is ``clock``."""
    return jobctl.FileStore(store_root, clock=clock)


# -- PostgreSQL ------------------------------------------------------------------
#
# One server per session (started here, or named by JOBCTL_TEST_PG_URL), one
# fresh schema per test. Without server binaries or the driver the tests that
# need a server skip with one reason; under CI=true they fail instead, so a CI
# machine that lost its server can never pass by skipping.

import pgserver  # noqa: E402


def _pg_unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL tests are mandatory in CI: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL: {reason}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[pgserver.Server]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _pg_unavailable("psycopg is not installed (pip install -e '.[dev]')")
    url = os.environ.get(pgserver.URL_ENV, "")
    if url:
        yield pgserver.Server(url)
        return
    bin = pgserver.bindir()
    if bin is None:
        _pg_unavailable(f"no initdb/pg_ctl found (apt-get install postgresql, or set {pgserver.URL_ENV})")
    try:
        server = pgserver.Server.start(bin)  # type: ignore[arg-type]  # _pg_unavailable does not return
    except RuntimeError as exc:
        _pg_unavailable(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: pgserver.Server) -> str:
    """A URL whose connections see a schema of their own, empty."""
    return pg_server.fresh_schema()


def _postgres_store(request: pytest.FixtureRequest, clock: FakeClock | None) -> jobctl.Store:
    from jobctl.store import postgres

    url = request.getfixturevalue("pg_url")
    postgres.init(url)
    store = postgres.PostgresStore(url, clock=clock)
    request.addfinalizer(store.close)
    return store


@pytest.fixture(params=["file", "postgres"])
def any_store(request: pytest.FixtureRequest, store_root: Path, clock: FakeClock) -> jobctl.Store:
    """Every backend in turn, on ``clock``: the contract tests run unchanged against each (huey's StorageTests)."""
    if request.param == "file":
        return jobctl.FileStore(store_root, clock=clock)
    return _postgres_store(request, clock)


@pytest.fixture
def pg_store(request: pytest.FixtureRequest) -> jobctl.Store:
    """An initialised PostgreSQL store in a fresh schema, on the server's clock."""
    return _postgres_store(request, None)


@pytest.fixture(autouse=True, scope="session")
def _private_summary_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The summary cache (jobctl.summary) of the tests' stores lives with them, not in the user's home."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
