"""The worker's view of a store (jobctl.board): what it offers next, and what it never reads twice."""

from __future__ import annotations

import os
from collections.abc import ItemsView, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from workertools import submit, wait_until

from jobctl import FileStore, Record, schedule
from jobctl.board import Board

pytestmark = pytest.mark.timeout(30)


def finished(store: FileStore, state: str = "complete", **plan: object) -> str:
    rec = Record(kind="shell", spec={"argv": ["true"]})
    schedule.plan(rec, **plan)  # type: ignore[arg-type]
    job_id = store.submit(rec)
    claimed = store.claim(job_id, "w", 30)
    store.finish(job_id, claimed.lease.epoch, state)
    return job_id


@pytest.fixture(params=[True, False], ids=["notices", "rescan"])
def notices(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_oldest_runnable_first_of_the_kinds_it_runs(store: FileStore, notices: bool) -> None:
    other = store.submit(Record(id="1-a", kind="other", spec={}))
    first = store.submit(Record(id="2-b", kind="shell", spec={"argv": ["true"]}))
    second = store.submit(Record(id="3-c", kind="shell", spec={"argv": ["true"]}))
    board = Board(store, ["shell"], notices=notices)
    now = store.now()
    assert board.pick(now).record.id == first  # type: ignore[union-attr]
    assert board.pick(now, exclude={first}).record.id == second  # type: ignore[union-attr]
    assert board.runnable_ids(now) == [first, second]
    assert other not in board.runnable_ids(now)
    board.close()


def test_dependencies_wait_then_run_and_a_failed_one_dooms(store: FileStore, notices: bool) -> None:
    dep = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    waiting = submit(store, ["true"], after=[dep])
    bad = finished(store, "failed")
    doomed = submit(store, ["true"], after=[bad])
    missing = submit(store, ["true"], after=["1-nosuchjob"])
    board = Board(store, None, notices=notices)
    pick = board.pick(store.now())
    assert pick.record is not None and pick.record.id == dep
    assert {(rec.id, why) for rec, why in pick.doomed} <= {
        (doomed, f"dependency {bad} ended failed"),
        (missing, "dependency 1-nosuchjob does not exist"),
    }
    assert [r.id for r, _ in board.survey_doomed(store.now())] == [doomed, missing]
    assert board.runnable_ids(store.now()) == [dep]
    claimed = store.claim(dep, "w", 30)
    store.finish(dep, claimed.lease.epoch, "complete")
    # A rescan sees the finish at once; a notice on PostgreSQL comes some time after the commit.
    wait_until(
        lambda: board.refresh(force=not notices) or board.runnable_ids(store.now()) == [waiting],
        what="the finished dependency to let its job run",
    )
    board.close()


@pytest.mark.file_only("breaks the record file itself; a database row's bytes are only ever written whole")
def test_an_unreadable_dependency_makes_a_job_wait_not_die(store: FileStore, root: Path) -> None:
    dep = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    job = submit(store, ["true"], after=[dep])
    Path(store.path(dep)).write_text("{ not a record")
    board = Board(store, None)
    assert board.states[dep] == "unreadable"
    assert board.runnable_ids(store.now()) == []
    assert board.survey_doomed(store.now()) == []
    assert job in board.open
    board.close()


def test_time_alone_changes_the_answer_and_the_board_says_when(store: FileStore) -> None:
    later = store.now() + timedelta(seconds=30)
    job = submit(store, ["true"], start_after=later)
    held = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    lease = store.claim(held, "somebody", 10).lease
    board = Board(store, None)
    pick = board.pick(store.now())
    assert pick.record is None and pick.wake == lease.expires_at  # the lease lapses first
    assert lease.expires_at is not None
    assert board.pick(lease.expires_at).record.id == held  # type: ignore[union-attr]  # an orphan then
    assert board.pick(later, exclude={held}).record.id == job  # type: ignore[union-attr]
    board.close()


def test_paused_jobs_wait_unless_a_dead_owner_left_them_running(store: FileStore) -> None:
    paused = submit(store, ["true"], hold=True)
    stranded = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    store.claim(stranded, "dead", 0.05)
    store.set_intent(stranded, "pause", "ops")
    board = Board(store, None)
    now = store.now() + timedelta(seconds=1)
    # Running under a dead owner: adopted so it can be released properly [JOB-I12].
    assert board.runnable_ids(now) == [stranded]
    assert paused in board.open
    board.close()


def test_finished_records_are_not_read_again(store: FileStore) -> None:
    done = [finished(store) for _ in range(30)]
    board = Board(store, None)
    assert board.watching, "notices are expected (inotify on Linux, LISTEN on PostgreSQL)"
    reads = board.reads
    # Rewriting a finished record's file (a renewal is allowed on terminal records [JOB-T6]) is seen and skipped.
    for job_id in done:
        store.renew(job_id, store.load(job_id).lease.epoch, 5)
    fresh = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    # The notices come in the order of the writes, and on PostgreSQL some time after them: once the board
    # has the new job, it has had every renewal's notice before it.
    wait_until(lambda: board.refresh() or fresh in board.states, what="the board to see the new job")
    assert board.reads == reads + 1 and board.runnable_ids(store.now()) == [fresh]
    board.close()


def test_the_rescanning_board_reads_only_what_is_not_final(store: FileStore) -> None:
    for _ in range(30):
        finished(store)
    board = Board(store, None, notices=False)
    reads = board.reads
    store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    board.refresh(force=True)
    assert board.reads == reads + 1
    board.close()


@pytest.mark.file_only("unlinks the record file behind the store's back")
def test_a_deleted_record_leaves_the_board(store: FileStore, notices: bool) -> None:
    job = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    board = Board(store, None, notices=notices)
    os.unlink(store.path(job))
    board.refresh(force=not notices)
    assert job not in board.states and board.pick(store.now()).record is None
    board.close()


class CountingStates(dict[str, str]):
    """A listing's states that count how often the whole of them is read."""

    reads = 0

    def items(self) -> ItemsView[str, str]:
        CountingStates.reads += 1
        return super().items()

    def __iter__(self) -> Iterator[str]:
        CountingStates.reads += 1
        return super().__iter__()


def test_the_start_builds_no_finished_state_until_a_look_up_needs_one(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 100,000 records, copying every finished state cost more than the rest of a pick [JOB-T1]."""
    done = [finished(store, state) for state in ("complete", "failed", "cancelled")]
    free = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    waiting = submit(store, ["true"], after=[done[0]])
    whole = store.list()
    expected = {rec.id: rec.state for rec in whole}
    real = store.list_open

    def counted() -> object:
        listing = real()
        listing.states = CountingStates(listing.states)
        return listing

    monkeypatch.setattr(store, "list_open", counted)
    CountingStates.reads = 0
    board = Board(store, None, notices=False)
    assert board.pick(store.now()).record.id == free  # type: ignore[union-attr]  # it waits for nothing
    assert CountingStates.reads == 0
    assert board.pick(store.now(), exclude={free}).record.id == waiting  # type: ignore[union-attr]
    assert CountingStates.reads == 1  # its dependency's state, from the listing, once
    assert dict(board.states) == expected and board.states == expected
    store.finish(free, store.claim(free, "w", 30).lease.epoch, "complete")
    board.refresh(force=True)
    assert dict(board.states) == {**expected, free: "complete"} and board.open.keys() == {waiting}
    board.close()
