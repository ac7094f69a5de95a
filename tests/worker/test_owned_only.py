"""--owned-only: a worker (root's by default) runs only records whose file its own user owns.

Anyone who can write ``jobs/`` can make a worker run a command as the
worker's user (docs/security.md). These tests give a record to another uid
(root may chown to any uid; no account is needed) and check that the record
is named once and left alone, untouched, while the worker's own jobs run.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from workertools import submit, wait_until

from jobctl import FileStore
from jobctl.cli.main import EXIT_DRAIN_INCOMPLETE, State, cli
from jobctl.errors import Untrusted
from jobctl.worker import Event, Worker

# About who owns a record file (st_uid) and links to it: a database row has neither.
pytestmark = [pytest.mark.timeout(60), pytest.mark.file_only("file owners and links")]

STRANGER = 54321


@pytest.fixture(autouse=True)
def _root_only() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the ownership tests need root (to give a record to another uid); CI runs as root")
        pytest.skip("needs root to give a record to another uid")


def invoke(root: Path, *args: str) -> Result:
    environ = {"JOB_STORE": str(root), "JOBCTL_CONFIG": str(root.parent / "no-config.ini")}
    state = State(terminal=False, env=environ)
    return CliRunner().invoke(cli, list(args), obj=state, env=environ, catch_exceptions=False)


def foreign(store: FileStore, marker: Path) -> str:
    """A job whose record file belongs to another uid: it would create ``marker`` if it ran."""
    job = submit(store, ["touch", str(marker)])
    os.chown(store.path(job), STRANGER, STRANGER)
    return job


def test_root_refuses_a_record_it_does_not_own_by_default(store: FileStore, root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    job = foreign(store, marker)
    before = Path(store.path(job)).read_bytes()
    mine = submit(store, ["true"])
    result = invoke(root, "worker", "--drain", "--quiet")
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if job in line]
    assert len(lines) == 1 and lines[0].startswith(f"jobctl worker: untrusted {job}"), result.stderr
    assert f"uid {STRANGER}" in lines[0]
    assert not marker.exists()
    assert Path(store.path(job)).read_bytes() == before  # left alone: not claimed, not rewritten
    assert os.stat(store.path(job)).st_uid == STRANGER
    assert store.load(mine).state == "complete"


def test_any_owner_runs_it(store: FileStore, root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    job = foreign(store, marker)
    assert invoke(root, "worker", "--drain", "--any-owner").exit_code == 0
    assert marker.exists() and store.load(job).state == "complete"


def test_run_next_passes_over_it_and_run_id_refuses_it(store: FileStore, root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    job = foreign(store, marker)
    mine = submit(store, ["true"])
    result = invoke(root, "run", "--next")
    assert result.exit_code == 0, result.stderr
    assert f"jobctl: {job}: skipped:" in result.stderr and store.load(mine).state == "complete"
    refused = invoke(root, "run", job)
    assert refused.exit_code == Untrusted.exit_code
    assert refused.stderr.startswith(f"jobctl: refused: job {job}: its record is owned by uid {STRANGER}")
    assert not marker.exists()
    assert invoke(root, "run", "--next", "--any-owner").exit_code == 0
    assert marker.exists()


def test_a_looping_worker_names_it_once(store: FileStore, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    job = foreign(store, marker)
    events: list[Event] = []
    store.owned_by = os.geteuid()
    loop = Worker(store, poll_interval=0.02, ttl=5, on_event=events.append, notices=False)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: any(e.what == "untrusted" for e in events), what="the untrusted event")
        # Let the loop pass over the store many more times, then prove it went on working.
        for _ in range(3):
            mine = submit(store, ["true"])
            wait_until(lambda mine=mine: store.load(mine).state == "complete", what="the worker's own job")
    finally:
        loop.request_stop(immediate=True)
        thread.join(30)
    assert [e.job_id for e in events if e.what == "untrusted"] == [job]
    assert not marker.exists()


def test_a_record_swapped_between_the_reads_is_refused(store: FileStore) -> None:
    job = submit(store, ["true"])
    store.owned_by = os.geteuid()
    path = store.path(job)
    with pytest.raises(Untrusted, match="changed while"):
        store._owned(path, Path(path).read_bytes() + b" ")
    os.symlink(path, path + ".link.json")
    with pytest.raises(Untrusted, match="cannot be opened"):
        store._owned(path + ".link.json", b"")
    store._owned(path, Path(path).read_bytes())  # its own, as read: accepted


def test_a_doomed_record_of_another_user_is_not_rewritten(store: FileStore, root: Path, tmp_path: Path) -> None:
    from jobctl import Record, schedule

    first = submit(store, ["false"])
    rec = Record(kind="shell", spec={"argv": ["touch", str(tmp_path / "ran")]})
    schedule.plan(rec, after=[first])
    theirs = store.submit(rec)
    os.chown(store.path(theirs), STRANGER, STRANGER)
    before = Path(store.path(theirs)).read_bytes()
    assert invoke(root, "worker", "--drain").exit_code == EXIT_DRAIN_INCOMPLETE  # its first job failed
    assert store.load(first).state == "failed"
    # Root would cancel its own dependent; another user's record it leaves as it was.
    assert Path(store.path(theirs)).read_bytes() == before
    assert os.stat(store.path(theirs)).st_uid == STRANGER
