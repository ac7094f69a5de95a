"""``sweep`` when one record's lock is refused: the rest is swept and counted all the same."""

from __future__ import annotations

import json
import os

import pytest
from clitools import Jobctl

from jobctl.errors import Invalid, JobError
from jobctl.store.base import Store


def test_a_refused_lock_leaves_its_record_and_the_count_is_printed(jobctl: Jobctl) -> None:
    kept, swept = jobctl.submit(), jobctl.submit()
    jobs = jobctl.root / "jobs"
    (jobs / f"{kept}.json.aaa111.tmp").write_text("half a record")
    (jobs / f"{swept}.json.bbb222.tmp").write_text("half a record")
    (jobs / f"{swept}.json.ccc333.tmp").write_text("half a record")
    lock = jobs / f"{kept}.json.lock"
    lock.unlink(missing_ok=True)
    os.symlink("/etc/passwd", lock)  # a second user's link where the lock should be
    ran = jobctl("sweep")
    assert ran.out == b"removed=2\n", ran.err
    lines = ran.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobctl: invalid: ") and kept in lines[0], ran.err
    assert ran.code == Invalid.exit_code
    assert sorted(p.name for p in jobs.glob("*.tmp")) == [f"{kept}.json.aaa111.tmp"]
    as_json = jobctl("sweep", "--json")
    assert (as_json.code, json.loads(as_json.out)) == (Invalid.exit_code, {"v": 1, "removed": 0})
    one = jobctl("sweep", kept)
    assert (one.code, one.out) == (Invalid.exit_code, b"removed=0\n")


def test_two_refused_locks_are_two_lines(jobctl: Jobctl) -> None:
    jobs = jobctl.root / "jobs"
    for job in (jobctl.submit(), jobctl.submit()):
        (jobs / f"{job}.json.x1.tmp").write_text("")
        (jobs / f"{job}.json.lock").unlink(missing_ok=True)
        os.symlink("/etc/passwd", jobs / f"{job}.json.lock")
    ran = jobctl("sweep")
    assert (ran.code, ran.out) == (Invalid.exit_code, b"removed=0\n")
    assert len(ran.err.splitlines()) == 2, ran.err


def test_the_library_hands_back_refusals_or_raises(any_store: Store) -> None:
    refused: list[JobError] = []
    assert any_store.sweep(None, refused) == 0 and refused == []
    with pytest.raises(JobError):
        any_store.sweep("a/b", refused)  # an id no record can have is refused as ever, not collected


def test_sweep_of_an_id_with_no_record_leaves_no_lock_behind(jobctl: Jobctl) -> None:
    """No record, no lock [JOB-L3 keeps only an existing record's]; a killed first write's temporary still goes."""
    jobs = jobctl.root / "jobs"
    ran = jobctl("sweep", "1796506950377-b9011ed2f2c0d7580bdb")
    assert (ran.code, ran.out) == (0, b"removed=0\n"), ran.err
    (jobs / "1796506950378-b9011ed2f2c0d7580bdb.json.abc123.tmp").write_text("a submit killed before its rename")
    assert jobctl("sweep").out == b"removed=1\n"
    assert sorted(p.name for p in jobs.iterdir()) == []
    kept = jobctl.submit()
    assert jobctl("sweep", kept).code == 0
    assert (jobs / f"{kept}.json.lock").exists()  # an existing record's lock stays


def test_sweep_keeps_a_lock_that_was_there_before_its_record_went(jobctl: Jobctl) -> None:
    jobs = jobctl.root / "jobs"
    gone = jobctl.submit()
    (jobs / f"{gone}.json").unlink()  # as gc removes a record: its lock stays [JOB-L3]
    assert jobctl("sweep", gone).code == 0
    assert (jobs / f"{gone}.json.lock").exists()
