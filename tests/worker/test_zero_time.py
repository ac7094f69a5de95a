"""No record jobctl writes holds an instant before 1970 unless it was read that way (DIGEST §10.4).

Upstream's C++ reader refuses year one (Go's zero instant), so a record jobctl
submitted with it could be neither claimed, shown nor listed there. Every
operation of the store and a worker's drain run here, and after each one
every record on disk is scanned.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from workertools import job_argv, submit

from jobctl import FileStore, Record
from jobctl.worker import Worker

# About the file binding's bytes: records are read and planted as files in jobs/ (a Go seed among them).
pytestmark = [pytest.mark.timeout(60), pytest.mark.file_only("scans and plants the record files themselves")]

DATA = Path(__file__).resolve().parent.parent / "data"
GO_SEED = DATA / "go-zero-pending.json"
_INSTANT = re.compile(rb'"(\d{4})-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?[Zz+-][^"]*"')


def _before_1970(data: bytes) -> set[bytes]:
    return {m.group(0) for m in _INSTANT.finditer(data) if int(m.group(1)) < 1970}


def assert_no_created_pre_1970(store: FileStore, read: dict[str, set[bytes]], step: str) -> None:
    """Every pre-1970 instant on disk must be one the record held when it was planted (read, not created)."""
    for path in sorted(Path(store.jobs_dir).glob("*.json")):
        found = _before_1970(path.read_bytes())
        allowed = read.get(path.stem, set())
        assert found <= allowed, f"after {step}: {path.name} holds {sorted(found - allowed)}"


def test_no_operation_creates_an_instant_before_1970(store: FileStore, tmp_path: Path) -> None:
    read: dict[str, set[bytes]] = {}
    seed_id = "1788673445494-0123456789abcdef0123"  # the id inside the seed
    shutil.copyfile(GO_SEED, Path(store.jobs_dir) / f"{seed_id}.json")
    read[seed_id] = _before_1970(GO_SEED.read_bytes())
    assert read[seed_id] == {b'"0001-01-01T00:00:00.000000Z"'}  # the seed really holds Go's zero

    def check(step: str) -> None:
        assert_no_created_pre_1970(store, read, step)

    check("planting")
    # A write that leaves the lease alone echoes the year-one value it read.
    store.set_intent(seed_id, "pause", "ops")
    assert b'"expires_at": "0001-01-01T00:00:00.000000Z"' in (Path(store.jobs_dir) / f"{seed_id}.json").read_bytes()
    check("set_intent on a Go-written record")
    store.set_intent(seed_id, "run", "ops")

    a = store.submit(Record(kind="k", spec={"n": 1}))
    check("submit")
    assert b'"expires_at": "1970-01-01T00:00:00.000000Z"' in Path(store.path(a)).read_bytes()
    rec = store.claim(a, "me", 30)
    check("claim")
    store.renew(a, rec.lease.epoch, 60)
    check("renew")
    store.progress(a, rec.lease.epoch, 3, checkpoint={"at": 3})
    check("progress")

    def put(r: Record) -> None:
        r.checkpoint = {"at": 4}

    store.update(a, rec.lease.epoch, put)
    check("update")
    store.recall(a, rec.lease.epoch, "rebalance", "ops", 10)
    check("recall")
    store.release(a, rec.lease.epoch)
    check("release")
    rec = store.claim(a, "me", 30)
    store.finish(a, rec.lease.epoch, "complete", done=5)
    check("finish")
    b = store.submit(Record(kind="k", spec={"n": 2}))
    store.cancel(b, "ops")
    check("cancel")
    store.sweep()
    check("sweep")

    # A worker's drain: a job that completes, one that fails and retries, one
    # that waits for another, and the Go-written record adopted and run.
    ok = submit(store, job_argv("exit", 0))
    submit(store, job_argv("exit", 3), intervals=[0.05])
    submit(store, job_argv("exit", 0), after=[ok])
    Worker(store, poll_interval=0.05, ttl=2.0, grace=0.5).run("drain")
    check("worker --drain")
    assert store.load(seed_id).state == "complete"  # the Go-written record was run, and rewritten
