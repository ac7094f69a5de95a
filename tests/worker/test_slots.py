"""A worker's slots (jobctl.slots): free slots claim together; a busy slot's finish claims its next job.

With every slot busy the worker picks the next jobs ahead (remembered, not
claimed); a slot that finishes its job claims the oldest of them in the same
call (``Store.finish_and_claim``: one round trip on PostgreSQL). Free slots
take their jobs in one ``Store.claim_each``. Each job still runs once: the
claims are the contract's, judged one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from workertools import in_process, job_argv, read_log, submit, wait_until

from jobctl import FileStore
from jobctl.worker import Worker

pytestmark = pytest.mark.timeout(90)


def worker(store: FileStore, **options: object) -> Worker:
    options.setdefault("ttl", 5.0)
    return in_process(store, **options)


def spy(store: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every answer of ``store.<name>``, in order."""
    answers: list[Any] = []
    real: Callable[..., Any] = getattr(store, name)

    def spied(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        answers.append(got)
        return got

    monkeypatch.setattr(store, name, spied)
    return answers


def starts(side_log: Path) -> list[str]:
    return [line["id"] for line in read_log(side_log) if line["event"] == "start"]


def test_a_slot_claims_its_next_job_with_the_finish_of_the_last(
    store: FileStore, side_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [submit(store, job_argv("exit", 0), side_log) for _ in range(16)]
    pairs = spy(store, "finish_and_claim", monkeypatch)
    batches = spy(store, "claim_each", monkeypatch)
    summary = worker(store, concurrency=3).run("drain")
    assert summary["complete"] == 16
    assert sorted(starts(side_log)) == sorted(ids)  # every job once
    records = store.list()
    assert all(r.state == "complete" and r.lease.epoch == 1 for r in records)  # each claimed once
    taken = [then for _, then in pairs if not isinstance(then, Exception)]
    assert taken, "no finish claimed the next job"
    assert batches and len(batches[0]) == 3  # the three free slots claimed together at the start


def test_jobs_picked_ahead_are_left_untouched_by_a_worker_that_stops(
    store: FileStore, side_log: Path, tmp_path: Path
) -> None:
    long = submit(store, job_argv("sleep", 30), side_log)
    rest = [submit(store, job_argv("exit", 0), side_log) for _ in range(3)]
    w = worker(store, concurrency=1)
    thread = threading.Thread(target=w.run, args=("loop",))
    thread.start()
    try:
        wait_until(lambda: long in starts(side_log), what="the long job to start")
        wait_until(lambda: w._slots.ahead() > 0, what="a job picked ahead")
    finally:
        w.request_stop(immediate=True)
        thread.join(60)
    assert not thread.is_alive()
    assert starts(side_log) == [long]
    assert store.load(long).state == "pending" and store.load(long).lease.epoch == 1  # released
    for job_id in rest:  # picked ahead, never claimed
        rec = store.load(job_id)
        assert (rec.state, rec.lease.epoch, rec.lease.owner) == ("pending", 0, "")


def test_two_workers_sharing_the_jobs_run_each_once(store: FileStore, side_log: Path) -> None:
    """Two workers' batch claims and finish-and-claims fight over the same oldest jobs: none runs twice."""
    ids = [submit(store, job_argv("exit", 0), side_log) for _ in range(30)]
    a, b = worker(store, concurrency=3, name="a"), worker(store, concurrency=3, name="b")
    threads = [threading.Thread(target=w.run, args=("drain",)) for w in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(80)
    assert sorted(starts(side_log)) == sorted(ids)
    assert all(r.state == "complete" and r.lease.epoch == 1 for r in store.list())


# -- the slots' bookkeeping of jobs picked ahead, on their own -----------------------------------


def taken(slots: Any) -> set[str]:
    """The ids the slots hold out of picks: picked ahead, or being taken by a slot's finish."""
    return {rec.id for rec in slots.picked()}


def bare_slots(store: FileStore, reports: list[Any]) -> Any:
    from jobctl.slots import Slots

    def unused(*_args: Any) -> Any:
        raise AssertionError("not reached in these tests")

    return Slots(
        store,  # type: ignore[arg-type]
        "w",
        5.0,
        1,
        post=reports.append,
        stopping=lambda: False,
        states=dict,
        cancel=unused,
        start=unused,
    )


def test_a_successor_refused_stays_out_of_picks_until_the_loop_has_the_refusal(store: FileStore) -> None:
    """The slot reports the refusal; only the loop's receiving it (``reported``) makes the job pickable again."""
    from jobctl.errors import LeaseHeld
    from jobctl.keeper import Outcome

    reports: list[Any] = []
    slots = bare_slots(store, reports)
    first, following = (submit(store, ["true"]) for _ in range(2))
    recs = {r.id: r for r in store.list()}
    slots.add_ahead(recs[following])
    assert slots._successor() is recs[following]
    assert taken(slots) == {following}
    out = Outcome(first, "shell", 1, 1, state="complete")
    out.then = (recs[following], LeaseHeld("somebody else holds it", following))
    assert slots._then(recs[first], out) is None
    assert [r.job_id for r in reports] == [first, following]
    assert taken(slots) == {following}  # still out of picks: the loop has not read the refusal yet
    slots.reported(following)
    assert taken(slots) == set()


def test_a_successor_whose_processor_still_runs_here_is_passed_over(store: FileStore) -> None:
    class StillRunning:
        left_running = True

    reports: list[Any] = []
    slots = bare_slots(store, reports)
    job = submit(store, ["true"])
    slots._left[job] = StillRunning()
    slots.add_ahead(store.load(job))
    assert slots._successor() is None  # a second run beside the first would run the job twice at once
    assert [(r.job_id, r.skip) for r in reports] == [(job, True)]


def test_a_finish_that_fails_as_a_whole_gives_its_successor_back(store: FileStore) -> None:
    """The finish-and-claim raised: the job it was to claim comes back with the refusal, not lost in ``taking``."""
    from jobctl.errors import Refused
    from jobctl.keeper import Ending, Outcome

    first, following = (submit(store, ["true"]) for _ in range(2))
    claimed = store.claim(first, "w", 30)
    nxt = store.load(following)

    class Broken:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def finish_and_claim(self, *args: Any, **kwargs: Any) -> Any:
            raise Refused("the connection was lost while committing", first)

    ending = Ending(Broken(), claimed, 1, lambda: nxt, 30.0)  # type: ignore[arg-type]
    out = ending.finish(Outcome(first, "shell", claimed.lease.epoch, 1), "complete")
    assert out.then is not None and out.then[0] is nxt and isinstance(out.then[1], Refused)
    assert isinstance(out.verdict, Refused)


def test_a_slot_whose_run_fails_after_its_finish_took_a_successor_reports_both(store: FileStore) -> None:
    reports: list[Any] = []
    slots = bare_slots(store, reports)
    first, following = (submit(store, ["true"]) for _ in range(2))
    slots.add_ahead(store.load(following))

    def step() -> None:
        assert slots._successor() is not None
        raise RuntimeError("a bug after the finish")

    slots._guarded([store.load(first)], step)
    assert sorted(r.job_id for r in reports) == sorted([first, following])  # neither left waiting for ever
    slots.reported(following)
    assert taken(slots) == set()


def test_a_successor_being_taken_counts_against_its_kinds_limit(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot's finish took a render picked ahead; until the loop has its report, the render still counts.

    The gap between the two is real: a slot's ``finish_and_claim`` is a store write, and another slot's
    report can wake the loop meanwhile. Counted only while picked ahead, the taken render left the tally,
    and with ``--limit render=1`` the loop handed a second render to a free slot: two ran at once.
    """
    from jobctl import Record
    from jobctl.board import Board

    first, second = (store.submit(Record(kind="render", spec={})) for _ in range(2))
    w = worker(store, concurrency=2, handlers={"render": "true"}, limits={"render": 1})
    handed: list[list[str]] = []
    monkeypatch.setattr(w._slots, "hand", lambda recs: handed.append([r.id for r in recs]))
    w._slots.add_ahead(store.load(first))
    assert w._slots._successor() is not None  # a finish under way claims it
    board = Board(store, w.kinds)
    try:
        w._hand_out(board, None, 0.0)
    finally:
        board.close()
    assert second not in [job for batch in handed for job in batch]
    assert second not in {r.id for r in w._slots.picked()}
