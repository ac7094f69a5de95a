"""``Store.claim_next``: how the next runnable job is found, on every backend.

The rule is :func:`jobctl.schedule.runnable`'s; the directory finds it with a
listing, PostgreSQL with one indexed ``FOR UPDATE SKIP LOCKED`` pick.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobctl import Record, Store, schedule
from jobctl.errors import Invalid, LeaseHeld, UnknownSchema
from jobctl.store import picking


def submit(store: Store, kind: str = "k", **plan: Any) -> str:
    rec = Record(kind=kind, spec={"n": 1})
    if plan:
        schedule.plan(rec, **plan)
    return store.submit(rec)


def test_oldest_first_and_each_job_once(any_store: Store, clock: Any) -> None:
    ids = []
    for _ in range(3):
        ids.append(submit(any_store))
        clock.advance(1)
    got = [any_store.claim_next("w", 60) for _ in range(4)]
    assert [r.id if r else None for r in got] == [*ids, None]
    assert all(r.lease.owner == "w" and r.lease.epoch == 1 and r.state == "running" for r in got if r)


def claimed_id(store: Store, kinds: list[str] | None = None) -> str | None:
    """Claim the next job and finish it complete at once; its id, or None when nothing may start."""
    rec = store.claim_next("w", 10, kinds)
    if rec is None:
        return None
    store.finish(rec.id, rec.lease.epoch, "complete")
    return rec.id


def test_what_may_not_start_is_passed_over(any_store: Store, clock: Any) -> None:
    s = any_store
    first = submit(s, kind="first")
    clock.advance(1)
    waits = submit(s, after=[first])
    clock.advance(1)
    failing = submit(s, kind="failing")
    clock.advance(1)
    held = submit(s, hold=True)
    clock.advance(1)
    later = submit(s, start_after=clock.now + timedelta(seconds=100))
    clock.advance(1)
    other_kind = submit(s, kind="other")
    clock.advance(1)
    doomed = submit(s, after=[failing])

    mine = s.claim_next("w", 10, ["failing"])
    assert mine is not None and mine.id == failing
    s.finish(failing, mine.lease.epoch, "failed")
    # only kind k: the dependent waits, the held and the not-yet are not offered
    assert s.claim_next("w", 10, ["k"]) is None
    mine = s.claim_next("w", 10)
    assert mine is not None and mine.id == first
    assert s.claim_next("w", 10, ["k"]) is None  # first is running, not complete
    s.finish(first, mine.lease.epoch, "complete")
    assert claimed_id(s, ["k"]) == waits
    assert claimed_id(s) == other_kind
    assert claimed_id(s) is None
    clock.advance(100)
    assert claimed_id(s) == later
    assert claimed_id(s) is None  # held waits for approval; doomed never starts
    s.set_intent(held, "run", "ops")
    assert claimed_id(s) == held
    assert s.load(doomed).state == "pending"


def test_a_lapsed_lease_is_adopted_and_a_live_one_is_not(any_store: Store, clock: Any) -> None:
    job = submit(any_store)
    first = any_store.claim_next("a", 30)
    assert first is not None and first.id == job
    assert any_store.claim_next("b", 30) is None
    clock.advance(30)  # at the instant of expiry the lease is over [JOB-L5]
    second = any_store.claim_next("b", 30)
    assert second is not None and (second.id, second.lease.owner, second.lease.epoch) == (job, "b", 2)


def test_the_unreadable_and_the_malformed_are_named_and_passed_over(any_store: Store, clock: Any) -> None:
    s = any_store
    newer = submit(s)
    data = (
        s.load_bytes(newer)
        .decode()
        .replace('  "critical": [\n', '  "critical": [\n    "abstraction.test/hovercraft@7",\n')
    )
    data = data.replace('  "content": [\n', '  "content": [\n    "abstraction.test/hovercraft@7",\n')
    _overwrite(s, newer, data.encode())
    clock.advance(1)
    bad = s.submit(Record(kind="k", spec={}, extensions={schedule.RETRY: {"failures": "many"}}))
    clock.advance(1)
    good = submit(s)
    skipped: list[Any] = []
    unreadable: list[Any] = []
    got = s.claim_next("w", 10, skipped=skipped, unreadable=unreadable)
    assert got is not None and got.id == good
    assert [(i, type(e)) for i, e in unreadable] == [(newer, UnknownSchema)]
    assert [(i, type(e)) for i, e in skipped] == [(bad, Invalid)]


def test_a_blank_owner_is_refused(any_store: Store) -> None:
    from jobctl.errors import Refused

    submit(any_store)
    with pytest.raises(Refused):
        any_store.claim_next("  ", 10)


def _overwrite(store: Store, job_id: str, data: bytes) -> None:
    if hasattr(store, "replace_bytes"):
        store.replace_bytes(job_id, data)
    else:
        with open(store.path(job_id), "wb") as fh:  # type: ignore[attr-defined]
            fh.write(data)


# -- PostgreSQL: pickers never wait on each other ---------------------------------------------------


@pytest.mark.timeout(30)
def test_a_row_another_picker_holds_is_skipped_not_waited_for(pg_store: Any) -> None:
    """The race SKIP LOCKED exists for: another transaction holds the oldest job's row lock."""
    import psycopg

    first = submit(pg_store)
    second = submit(pg_store)
    with psycopg.connect(pg_store.url) as other:  # a transaction, open until the block ends
        locked = other.execute("SELECT id FROM jobctl_jobs WHERE id = %s FOR UPDATE", (first,)).fetchone()
        assert locked == (first,)  # the race is on: the oldest row is held elsewhere
        got = pg_store.claim_next("w", 30)  # a waiting pick would block here until the timeout fails the test
        assert got is not None and got.id == second
    # the other transaction is over: the first job is there for the next pick
    again = pg_store.claim_next("w", 30)
    assert again is not None and again.id == first


def _reads(url: str, name: str, args: dict[str, str], generic: bool) -> int:
    """Buffers the named query reads, as the store's sessions run it prepared, generic plan or custom (rolled back).

    Its plan neither sorts (the sessions' ``enable_sort = off`` would price a
    sort it cannot avoid past the JIT threshold) nor compiles with JIT.
    """
    import re

    import psycopg

    from jobctl.store.postgres import Q

    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, Q[name])
    with psycopg.connect(url) as conn:  # one transaction, rolled back: the statement is only measured
        conn.execute(Q["session"], {"ms": 2000})  # as every session of the store
        conn.execute(f"SET plan_cache_mode = {'force_generic_plan' if generic else 'force_custom_plan'}")
        conn.execute(f"PREPARE q AS {text.rstrip(';')}")  # our own query text, numbered
        call = f"EXECUTE q({', '.join(args[n] for n in names)})" if names else "EXECUTE q"
        for _ in range(6):  # past the plan cache's first five custom plans
            conn.execute(call)
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {call}"))
        conn.rollback()
    assert re.search(r"\bSort\b", plan) is None and "JIT" not in plan, (name, plan)
    found = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert found is not None, plan
    return int(found.group(1)) + int(found.group(2) or 0)


#: Arguments of each statement whose plan is read: a few rows each, whatever the size of the store.
_ARGS = {
    "claim_next": {"kinds": "NULL", "limit": "1", "owner": "'w'"},
    "keyed_open": {"kinds": "NULL"},  # the open jobs that carry a key, when a pick leaves slots free
    "orphan_candidates": {},
    "unpickable": {},
    "list_open": {},
    "load": {"id": "'pending-7'"},
    "claim": {"ids": "'{pending-7,pending-9,pending-11}'", "owner": "'w'"},  # claim ID, and a batch
    "finish": {"id": "'pending-7'", "epoch": "0", "state": "'complete'", "error": "NULL", "done": "NULL"},
    "scan_after": {"after": "'pending-'", "limit": "20"},
}
_COMMON = {
    "now": "NULL",
    "understood": "'{abstraction.job/base@1}'",
    "ttl": "'30 s'",
    "set_checkpoint": "false",
    "checkpoint": "NULL",
    "carry": "NULL",
}


@pytest.mark.parametrize("generic", [True, False], ids=["generic-plan", "custom-plan"])
def test_no_statement_walks_what_it_does_not_need(pg_store: Any, generic: bool) -> None:
    """The pick walks jobctl_jobs_startable in order; the rest read the rows they name, never the whole table.

    The store's sessions never sort: a fresh table has no statistics and a
    prepared statement's generic plan knows no parameters, and the planner's
    defaults then say almost nothing matches the pick's conditions, so that a
    sort of every startable row looks cheap (session.py says more). Here, on a
    fresh table of 50 pending jobs and 100,000 finished ones, then the same
    analysed, each statement reads a handful of buffers; a walk or a sort of
    the finished rows would read thousands.
    """
    import pgserver
    import psycopg

    pgserver.add_rows(pg_store.url, 50, "pending")
    pgserver.add_rows(pg_store.url, 100_000, "complete")
    for analysed in (False, True):
        if analysed:
            with psycopg.connect(pg_store.url, autocommit=True) as conn:
                conn.execute("ANALYZE jobctl_jobs")
        for name, args in _ARGS.items():
            reads = _reads(pg_store.url, name, {**_COMMON, **args}, generic)
            assert reads < 200, (name, "analysed" if analysed else "fresh", reads)
    got = pg_store.claim_next("w", 30)
    assert got is not None and got.id == "pending-50"


@pytest.mark.parametrize("generic", [True, False], ids=["generic-plan", "custom-plan"])
def test_the_pick_reads_no_open_job_for_the_keys_it_does_not_meet(pg_store: Any, generic: bool) -> None:
    """The look at the open jobs with an exclusive key reads jobctl_jobs_keyed, not every open job.

    With 5,000 open jobs and none with a key, a pick and that look read a
    handful of buffers; a walk of jobctl_jobs_open for the keyed ones would
    read the row of every open job.
    """
    import pgserver

    pgserver.add_rows(pg_store.url, 5000, "pending")
    for name in ("claim_next", "keyed_open"):
        reads = _reads(pg_store.url, name, {**_COMMON, **_ARGS[name]}, generic)
        assert reads < 200, (name, reads)


# -- judged again under the lock ------------------------------------------------------


def test_a_job_paused_since_the_listing_is_passed_over_and_left_as_it_was(any_store: Store, clock: Any) -> None:
    """The listing is only where to look: the claim judges the record as found under its lock."""
    s = any_store
    first = submit(s)
    clock.advance(1)
    second = submit(s)
    listing = s.list_open()
    s.set_intent(first, "pause", "ops")
    before = s.load_bytes(first)
    got = picking.claim_next(s, "w", 60, records=listing)
    assert got is not None and got.id == second
    assert s.load_bytes(first) == before


def test_a_retry_scheduled_since_the_listing_is_not_claimed_early(any_store: Store, clock: Any) -> None:
    """Claimed, failed with a retry an hour ahead and released between the listing and the claim."""
    s = any_store
    first = submit(s, retries=1, intervals=[3600])
    clock.advance(1)
    second = submit(s)
    listing = s.list_open()
    rec = s.claim(first, "other", 60)
    s.update(first, rec.lease.epoch, lambda r: schedule.record_failure(r, 1, clock.now))
    s.release(first, rec.lease.epoch)
    before = s.load_bytes(first)
    got = picking.claim_next(s, "w", 60, records=listing)
    assert got is not None and got.id == second
    assert s.load_bytes(first) == before
    clock.advance(3601)
    again = s.claim_next("w", 60)
    assert again is not None and again.id == first and again.lease.epoch == 2


def test_a_vet_refusal_writes_nothing(any_store: Store) -> None:
    s = any_store
    job = submit(s)
    before = s.load_bytes(job)

    def refuse(rec: Record, now: Any) -> None:
        raise LeaseHeld(f"not {rec.id}", rec.id)

    with pytest.raises(LeaseHeld, match=f"not {job}"):
        s.claim(job, "w", 60, vet=refuse)
    assert s.load_bytes(job) == before


def test_the_request_is_refused_before_any_record_is_passed_over(any_store: Store) -> None:
    """A blank owner is the caller's error: refused, not every record passed over as unclaimable."""
    from jobctl.errors import Refused

    submit(any_store)
    with pytest.raises(Refused, match="owner"):
        picking.claim_next(any_store, " ", 60)


def test_a_record_refused_at_its_lock_is_named_and_the_next_one_claimed(store_root: Any, clock: Any) -> None:
    """A link at the oldest job's lock: that job is named in skipped, the next is claimed (format.md)."""
    import os

    from jobctl import FileStore

    s = FileStore(store_root, clock=clock)
    first = submit(s)
    clock.advance(1)
    second = submit(s)
    lock = os.path.join(s.jobs_dir, f"{first}.json.lock")
    os.unlink(lock)
    os.symlink(os.path.join(str(store_root), "elsewhere"), lock)
    skipped: list[Any] = []
    got = s.claim_next("w", 60, skipped=skipped)
    assert got is not None and got.id == second
    assert [job_id for job_id, _ in skipped] == [first]
    assert not os.path.lexists(os.path.join(str(store_root), "elsewhere"))


def test_a_record_file_naming_another_id_is_unreadable_and_never_claims_that_job(store_root: Any, clock: Any) -> None:
    """A copy of a record without its hold, under another name, cannot get the held job claimed."""
    import os
    from pathlib import Path

    from jobctl import FileStore

    s = FileStore(store_root, clock=clock)
    held = submit(s, hold=True)
    plain = submit(s)
    Path(s.jobs_dir, "zzz.json").write_bytes(s.load_bytes(plain).replace(plain.encode(), held.encode()))
    os.chmod(Path(s.jobs_dir, "zzz.json"), 0o600)
    listing = s.list_open()
    assert [job_id for job_id, _ in listing.unreadable] == ["zzz"]
    assert "names another id" in listing.unreadable[0][1].message
    got = s.claim_next("w", 60)
    assert got is not None and got.id == plain
    assert s.claim_next("w", 60) is None
    assert s.load(held).lease.epoch == 0


def test_a_claim_that_will_not_wait_meets_a_locked_row_as_lock_busy(pg_store: Store, pg_url: str) -> None:
    """PostgreSQL: another transaction holding the row (a writer stopped mid-write) -> LockBusy, nothing written."""
    import psycopg

    from jobctl import LockBusy

    job = submit(pg_store)
    other = submit(pg_store)
    before = pg_store.load_bytes(job)
    with psycopg.connect(pg_url) as conn:
        conn.execute("SELECT 1 FROM jobctl_jobs WHERE id = %s FOR UPDATE", (job,))
        with pytest.raises(LockBusy) as caught:
            pg_store.claim(job, "w", 60, wait=False)
        assert caught.value.job_id == job and caught.value.exit_code == 4
        got = pg_store.claim_next("w", 60)
        assert got is not None and got.id == other
        conn.rollback()
    assert pg_store.load_bytes(job) == before
    assert pg_store.claim(job, "w", 60, wait=False).lease.epoch == 1


def test_a_dependency_this_reader_cannot_read_holds_its_dependent_back(any_store: Store, clock: Any) -> None:
    """Complete, but its record now names a critical model this reader does not know: not known complete."""
    from jobctl import replay

    s = any_store
    first = submit(s, kind="first")
    clock.advance(1)
    waits = submit(s, after=[first])
    mine = s.claim_next("w", 10, ["first"])
    assert mine is not None and mine.id == first
    s.finish(first, mine.lease.epoch, "complete")
    replay.plant(s, first, "critical", "abstraction.test/hovercraft@7")  # as a newer writer would leave it
    assert s.claim_next("w", 10, ["k"]) is None
    assert s.load(waits).state == "pending" and s.load(waits).lease.epoch == 0
