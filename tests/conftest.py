"""Shared fixtures: the shared contract's location, stores, and a clock the tests drive.

The contract (DIGEST, scenarios, vectors) lives beside the clone in CI
(``<repo>/../shared/contract``) or wherever ``JOBCTL_CONTRACT_DIR`` points.
When it cannot be found every test that needs it FAILS with a message saying
where it looked: a missing contract is a broken checkout, never a reason to
skip the conformance suite.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import jobctl

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTRACT_ENV = "JOBCTL_CONTRACT_DIR"

#: Where the fake clock starts: a whole second, far from the zero instant.
START = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def locate_contract() -> Path:
    """The contract directory this run should use (it may not exist)."""
    env = os.environ.get(CONTRACT_ENV, "")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "contract"


def _contract_problem(path: Path) -> str | None:
    if not path.is_dir():
        return f"the shared contract directory {path} does not exist"
    for part in ("DIGEST.md", "scenarios", "vectors/records", "vectors/failures", "vectors/envelope"):
        if not (path / part).exists():
            return f"the shared contract at {path} has no {part}"
    return None


@pytest.fixture(scope="session")
def contract_dir() -> Path:
    """The shared contract; fails (never skips) when it is missing."""
    path = locate_contract()
    problem = _contract_problem(path)
    if problem is not None:
        pytest.fail(
            f"{problem}. The conformance tests need the shared contract: put it at "
            f"{REPO_ROOT.parent / 'shared' / 'contract'} (beside the clone, as CI does) "
            f"or set {CONTRACT_ENV}=<path to the contract directory>.",
            pytrace=False,
        )
    return path


# -- parametrisation over contract files -----------------------------------------
#
# Collection happens before fixtures run, so the file lists are computed here.
# When the contract is missing each list holds one MISSING placeholder: the test
# still runs, asks for ``contract_dir`` and fails with the message above, instead
# of pytest quietly skipping an empty parameter set.

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


@pytest.fixture(autouse=True, scope="session")
def _private_summary_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The summary cache (jobctl.summary) of the tests' stores lives with them, not in the user's home."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
