"""Exclusive keys on every backend: one live holder a key, freed by an end, a release or a lapse.

The races between processes are in tests/worker/test_exclusive.py; these
pin the rules of one claim at a time, on a clock the test moves.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobctl import Record, Store
from jobctl.errors import Invalid, KeyHeld, LeaseHeld
from jobctl.exclusive import EXCLUSIVE, check_key, exclusive_of, set_exclusive


def submit(store: Store, key: str | None, kind: str = "k") -> str:
    rec = Record(kind=kind, spec={})
    if key is not None:
        set_exclusive(rec, key)
    return store.submit(rec)


def test_a_claim_of_a_job_whose_key_is_held_is_refused_naming_the_key_and_holder(any_store: Store, clock: Any) -> None:
    first = submit(any_store, "db")
    clock.advance(1)
    second = submit(any_store, "db")
    held = any_store.claim(first, "w1", 60)
    with pytest.raises(KeyHeld) as caught:
        any_store.claim(second, "w2", 60)
    err = caught.value
    assert isinstance(err, LeaseHeld) and err.exit_code == 21 and err.verdict == "key_held"
    assert (err.key, err.holder, err.job_id) == ("db", first, second)
    assert "'db'" in err.message and first in err.message
    assert any_store.load(second).state == "pending" and any_store.load(second).lease.epoch == 0
    # Another key, and no key, are not held back.
    other = submit(any_store, "cache")
    plain = submit(any_store, None)
    assert any_store.claim(other, "w2", 60).state == "running"
    assert any_store.claim(plain, "w2", 60).state == "running"
    # Its end frees the key.
    any_store.finish(first, held.lease.epoch, "complete")
    assert any_store.claim(second, "w2", 60).state == "running"


def test_a_release_frees_the_key(any_store: Store, clock: Any) -> None:
    first, second = submit(any_store, "db"), submit(any_store, "db")
    held = any_store.claim(first, "w1", 60)
    with pytest.raises(KeyHeld):
        any_store.claim(second, "w2", 60)
    any_store.release(first, held.lease.epoch)
    assert any_store.claim(second, "w2", 60).lease.owner == "w2"
    # Now the first waits for the second.
    with pytest.raises(KeyHeld):
        any_store.claim(first, "w1", 60)


def test_a_lapsed_holder_frees_the_key(any_store: Store, clock: Any) -> None:
    first, second = submit(any_store, "db"), submit(any_store, "db")
    any_store.claim(first, "w1", 10)
    clock.advance(9)
    with pytest.raises(KeyHeld):
        any_store.claim(second, "w2", 60)
    clock.advance(2)  # the holder's lease lapsed: its worker died
    assert any_store.claim(second, "w2", 60).state == "running"


def test_the_holder_may_claim_its_own_job_again(any_store: Store, clock: Any) -> None:
    first = submit(any_store, "db")
    any_store.claim(first, "w1", 10)
    clock.advance(11)
    again = any_store.claim(first, "w2", 10)  # adopted after the lapse: it holds the key still
    assert again.lease.epoch == 2


def test_claim_next_passes_over_a_held_key_and_keeps_the_order(any_store: Store, clock: Any) -> None:
    ids = []
    for key in ("db", "db", None, "db"):
        ids.append(submit(any_store, key))
        clock.advance(1)
    first = any_store.claim_next("w", 60)
    second = any_store.claim_next("w", 60)
    assert first is not None and second is not None
    # The second and third "db" jobs wait; the plain one runs. (PostgreSQL's pick takes the jobs without a
    # key in its one statement and those with one for the slots it leaves: the order between them differs.)
    assert {first.id, second.id} == {ids[0], ids[2]}
    assert any_store.claim_next("w", 60) is None
    a = first if first.id == ids[0] else second
    any_store.finish(a.id, a.lease.epoch, "complete")
    c = any_store.claim_next("w", 60)
    assert c is not None and c.id == ids[1]  # oldest first among the waiting ones


def test_claim_some_takes_one_job_a_key(any_store: Store, clock: Any) -> None:
    ids = []
    for key in ("db", "db", "cache", None):
        ids.append(submit(any_store, key))
        clock.advance(1)
    got = any_store.claim_some("w", 60, 4)
    assert sorted(r.id for r in got) == sorted([ids[0], ids[2], ids[3]])


def test_claim_each_and_finish_and_claim_take_the_key(any_store: Store, clock: Any) -> None:
    a, b, c = submit(any_store, "db"), submit(any_store, "db"), submit(any_store, None)
    got = any_store.claim_each([a, b, c], "w", 60)
    assert isinstance(got[0], Record) and isinstance(got[1], KeyHeld) and isinstance(got[2], Record)
    done, nxt = any_store.finish_and_claim(a, got[0].lease.epoch, "complete", next_id=b, owner="w", ttl_seconds=60)
    assert isinstance(done, Record) and isinstance(nxt, Record) and nxt.state == "running"


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "blank"),
        ("   ", "blank"),
        ("a\nb", "not printable"),
        ("a\tb", "not printable"),
        ("x" * 201, "201 bytes"),
        ("é" * 101, "202 bytes"),
    ],
)
def test_bad_keys_are_refused(key: str, why: str) -> None:
    with pytest.raises(Invalid, match=why):
        check_key(key)


def test_keys_are_kept_as_given() -> None:
    rec = set_exclusive(Record(kind="k", spec={}), "x" * 200)
    assert exclusive_of(rec) == "x" * 200 and rec.extensions[EXCLUSIVE] == "x" * 200
    assert check_key("résumé/x y") == "résumé/x y"
    assert exclusive_of(Record(kind="k", spec={}, extensions={EXCLUSIVE: 5})) is None


def test_a_processors_next_job_carries_its_key(any_store: Store) -> None:
    from jobctl.processor import NewJob, submit_next

    parent = any_store.load(submit(any_store, None))
    (made,) = submit_next(any_store, parent, [NewJob("deploy", {}, exclusive="site-www")])
    assert exclusive_of(any_store.load(made)) == "site-www"
    with pytest.raises(Invalid, match="a next job's exclusive key is blank"):
        NewJob("deploy", {}, exclusive=" ")


def test_a_python_worker_judges_its_limits(any_store: Store) -> None:
    import jobctl

    assert jobctl.Worker(any_store, limits={"render": 2}).limits == {"render": 2}
    with pytest.raises(Invalid, match="limits: the limit of kind 'render' must be"):
        jobctl.Worker(any_store, limits={"render": 0})
