"""``jobctl gc`` (``lifecycle.collect``) against writers that act between its listing and its removals."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from jobctl.lifecycle import collect
from jobctl.record import Record
from jobctl.runner import log_path, result_path
from jobctl.store import FileStore, Store


def _ended(store: Store, job_id: str) -> None:
    store.submit(Record(id=job_id, kind="shell", spec={}))
    rec = store.claim(job_id, "w", 60)
    store.finish(job_id, rec.lease.epoch, "complete")


def _files(store: Store, job_id: str, epoch: int) -> list[str]:
    """A running attempt's files: its work directory's, its log, its ``$JOB_RESULT``."""
    work = store.work_path(job_id)
    os.makedirs(work)
    made = [os.path.join(work, "data"), log_path(store, job_id, 1), result_path(store, job_id, 1, epoch)]
    os.makedirs(os.path.dirname(made[1]), exist_ok=True)
    for path in made:
        with open(path, "w") as f:
            f.write("x")
    return made


def test_a_job_of_the_same_id_running_by_the_removal_keeps_its_files(store: FileStore) -> None:
    """Another gc removed the job after this one listed it; a job of the same id runs now: nothing of it goes."""
    _ended(store, "nightly")
    listing = store.list
    made: list[str] = []

    def listed() -> list[Record]:
        got = listing()
        assert store.remove("nightly")  # another gc, meanwhile
        store.submit(Record(id="nightly", kind="shell", spec={}))  # `submit --id nightly`, again
        running = store.claim("nightly", "w2", 600)
        made.extend(_files(store, "nightly", running.lease.epoch))
        return got

    store.list = listed  # type: ignore[method-assign]
    result = collect(store, timedelta(0))
    assert result.removed == []
    assert store.load("nightly").state == "running"
    assert [os.path.exists(path) for path in made] == [True, True, True]


def test_a_job_ended_again_since_the_listing_is_judged_as_it_reads_now(any_store: Store, clock: Any) -> None:
    """The record under the lock is judged, not the one listed: a job of the same id that ended just now stays."""
    store = any_store
    _ended(store, "nightly")
    listing = store.list

    def listed() -> list[Record]:
        got = listing()
        assert store.remove("nightly")
        clock.advance(3600)
        _ended(store, "nightly")
        return got

    store.list = listed  # type: ignore[method-assign]
    clock.advance(1800)
    result = collect(store, timedelta(seconds=1800))
    assert result.removed == []
    assert store.load("nightly").state == "complete"
