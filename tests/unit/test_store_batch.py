"""A worker's slots claim several jobs at once, and a slot finishes one job and claims the next together.

``claim_each`` and ``finish_and_claim`` are one statement, one round trip,
on PostgreSQL and one step after another on a directory; on both each job
gets the verdict its own ``claim`` (or ``finish``) would give it, in order.
"""

from __future__ import annotations

from typing import Any

from jobctl import Record
from jobctl.errors import Invalid, LeaseHeld, NotFound, Refused, StaleEpoch, Terminal
from jobctl.record import encode


def submit(store: Any) -> str:
    return str(store.submit(Record(kind="k", spec={})))


def test_claim_each_names_each_job_s_verdict_in_order(any_store: Any) -> None:
    s = any_store
    free, held, done, later = (submit(s) for _ in range(4))
    s.claim(held, "other", 60)
    ended = s.claim(done, "other", 60)
    s.finish(done, ended.lease.epoch, "complete")
    missing = "1700000000000-00000000000000000000"
    got = s.claim_each([free, held, done, missing, later], "w", 30)
    assert [type(g).__name__ for g in got] == ["Record", "LeaseHeld", "Terminal", "NotFound", "Record"]
    assert isinstance(got[1], LeaseHeld) and got[1].job_id == held
    assert isinstance(got[2], Terminal) and got[2].job_id == done
    assert isinstance(got[3], NotFound) and got[3].job_id == missing
    for rec in (got[0], got[4]):
        assert isinstance(rec, Record)
        assert rec.state == "running" and rec.lease.owner == "w" and rec.lease.epoch == 1
        assert s.load_bytes(rec.id) == encode(rec) and s.load(rec.id).lease == rec.lease
    assert s.load(held).lease.owner == "other"


def test_claim_each_of_one_job_twice_is_a_claim_and_a_re_claim(any_store: Any) -> None:
    s = any_store
    job = submit(s)
    first, again = s.claim_each([job, job], "w", 30)
    assert isinstance(first, Record) and isinstance(again, Record)
    assert (first.lease.epoch, again.lease.epoch) == (1, 2)


def test_claim_each_refuses_a_bad_request_for_each_job(any_store: Any) -> None:
    s = any_store
    job = submit(s)
    other = submit(s)
    got = s.claim_each([job, other], "", 30)
    assert [g.message for g in got if isinstance(g, Refused)] == ["claim needs an owner"] * 2
    assert [g.job_id for g in got if isinstance(g, Refused)] == [job, other]
    assert s.load(job).state == "pending" and s.load(other).state == "pending"


def test_finish_and_claim_give_each_step_its_verdict(any_store: Any) -> None:
    s = any_store
    a, b, c = (submit(s) for _ in range(3))
    mine = s.claim(a, "w", 30)
    s.claim(c, "other", 30)
    done, taken = s.finish_and_claim(a, mine.lease.epoch + 1, "complete", next_id=b, owner="w", ttl_seconds=30)
    assert isinstance(done, StaleEpoch) and done.job_id == a
    assert isinstance(taken, Record) and taken.lease.owner == "w"
    done, refused = s.finish_and_claim(a, mine.lease.epoch, "complete", error="", next_id=c, owner="w", ttl_seconds=30)
    assert isinstance(done, Record) and done.state == "complete" and done.error == ""
    assert isinstance(refused, LeaseHeld) and refused.job_id == c
    assert s.load(a).state == "complete" and s.load(c).lease.owner == "other"
    done, again = s.finish_and_claim(b, taken.lease.epoch, "bogus", next_id=a, owner="w", ttl_seconds=30)
    assert isinstance(done, Invalid) and isinstance(again, Terminal)
    assert s.load(b).state == "running"
