"""Recurring schedules on both stores: kept, listed, removed; slots fired once each, a missed run once; refusals.

The store calls run unchanged against a directory and PostgreSQL (``any_store``,
on a clock the test moves). The real-process fight between workers is
tests/worker/test_schedules.py.
"""

from __future__ import annotations

import json
import os
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import jobctl
from jobctl import ids, recurring, timetable
from jobctl.errors import Exists, Invalid, NotFound, Refused
from jobctl.record import format_time
from jobctl.recurring import SCHEDULE_OF, slot_id
from jobctl.submitter import submitter_of
from jobctl.wire import compact

SPEC = '{"argv": ["echo", "hi"], "note": 1.50}'


def fire(store: Any) -> list[str]:
    """One worker's look at the schedules; the ids of the jobs it created."""
    said: list[str] = []
    timetable.Firing(store, lambda what, job_id, detail: said.append(job_id)).tick()
    return said


def slots_of(store: Any) -> list[str]:
    return sorted(r.extensions[SCHEDULE_OF]["slot"] for r in store.list() if SCHEDULE_OF in r.extensions)


def test_kept_listed_and_removed(any_store: Any, clock: Any) -> None:
    added = timetable.add(any_store, "nightly", kind="shell", spec=SPEC, cron="30 2 * * *", by="ops")
    timetable.add(any_store, "beat", kind="ping", every="90s")
    got = timetable.listing(any_store)
    assert [s.name for s in got] == ["beat", "nightly"]
    assert got[1] == added and got[1].created_at == clock.now and got[1].spec == SPEC
    assert got[0].every == 90 and got[0].cron is None and got[0].fired is None
    assert any_store.schedule("nightly") == added
    with pytest.raises(Exists):
        timetable.add(any_store, "nightly", kind="other", every=60)
    assert any_store.schedule("nightly").kind == "shell"  # the add refused changed nothing
    assert timetable.remove(any_store, "nightly") is True
    assert timetable.remove(any_store, "nightly") is False
    with pytest.raises(NotFound):
        any_store.schedule("nightly")
    assert [s.name for s in timetable.listing(any_store)] == ["beat"]


def test_each_slot_fires_once_and_a_missed_run_fires_the_latest_slot_only(any_store: Any, clock: Any) -> None:
    sched = timetable.add(any_store, "tick", kind="shell", spec=SPEC, every=60, by="ops")
    assert fire(any_store) == []  # created between slots: its first slot is the next minute
    first = sched.next(clock.now)
    assert first is not None
    clock.now = first + timedelta(seconds=1)
    made = fire(any_store)
    assert made == [slot_id("tick", first)]
    assert fire(any_store) == [] and fire(any_store) == []  # every later look of any worker: nothing more
    job = any_store.load(made[0])
    assert job.kind == "shell" and job.opaque_text("spec") == compact(SPEC) and job.state == "pending"
    assert job.extensions[SCHEDULE_OF] == {"name": "tick", "slot": format_time(first)}
    assert submitter_of(job) == "ops"
    assert any_store.schedule("tick").fired == first
    # no worker for ten slots: one job, for the latest of them
    clock.now = first + timedelta(minutes=10, seconds=30)
    assert fire(any_store) == [slot_id("tick", first + timedelta(minutes=10))]
    assert len(slots_of(any_store)) == 2


def test_a_slot_whose_job_was_collected_is_not_fired_again(any_store: Any, clock: Any) -> None:
    sched = timetable.add(any_store, "tick", kind="k", every=60)
    slot = sched.next(clock.now)
    assert slot is not None
    clock.now = slot
    (made,) = fire(any_store)
    held = any_store.claim(made, "w", 30)
    any_store.finish(made, held.lease.epoch, "complete")
    assert any_store.remove(made)  # jobctl gc
    assert fire(any_store) == []  # the store remembers the slot fired: the gc'd job is not made again
    assert made not in any_store.ids()


def test_fired_moves_forward_only_and_never_brings_back_a_removed_schedule(any_store: Any, clock: Any) -> None:
    sched = timetable.add(any_store, "tick", kind="k", every=60)
    later, earlier = clock.now + timedelta(minutes=5), clock.now + timedelta(minutes=2)
    assert any_store.mark_fired("tick", sched.created_at, later)
    assert any_store.mark_fired("tick", sched.created_at, earlier)
    assert any_store.schedule("tick").fired == later
    assert not any_store.mark_fired("tick", sched.created_at + timedelta(seconds=1), clock.now + timedelta(hours=1))
    assert any_store.schedule("tick").fired == later  # another created_at: another schedule's mark
    assert timetable.remove(any_store, "tick")
    assert not any_store.mark_fired("tick", sched.created_at, clock.now + timedelta(hours=2))
    assert timetable.listing(any_store) == []


def test_a_removed_schedule_stops_firing(any_store: Any, clock: Any) -> None:
    sched = timetable.add(any_store, "tick", kind="k", every=60)
    clock.now = sched.next(clock.now) or clock.now
    assert len(fire(any_store)) == 1
    timetable.remove(any_store, "tick")
    clock.advance(600)
    assert fire(any_store) == []
    assert len(slots_of(any_store)) == 1


def test_a_cron_schedule_fires_its_minutes(any_store: Any, clock: Any) -> None:
    sched = timetable.add(any_store, "quarter", kind="k", cron="*/15 * * * *")
    slot = sched.next(clock.now)
    assert slot is not None and slot.minute % 15 == 0 and slot.second == 0
    clock.now = slot + timedelta(seconds=59)
    assert fire(any_store) == [slot_id("quarter", slot)]
    clock.now = slot + timedelta(minutes=14)
    assert fire(any_store) == []


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"every": 0}, "every: 0 is out of range"),
        ({"every": -5}, "every: -5 is out of range"),
        ({"every": "400d"}, "out of range"),
        ({"every": 10**30}, "out of range"),
        ({"every": 1.5}, "out of range"),
        ({"every": "soon"}, "is not a duration"),
        ({"every": 60, "cron": "* * * * *"}, "not both or neither"),
        ({}, "not both or neither"),
        ({"cron": "* * * 13 *"}, "field 4 (month)"),
        ({"every": 60, "kind": "Shell"}, "is not shell"),
        ({"every": 60, "spec": "[1]"}, "spec must be a JSON object"),
        ({"every": 60, "spec": "{"}, "spec is not JSON"),
        ({"every": 60, "kind": "shell", "spec": '{"argv": "echo hi"}'}, "argv"),
        ({"every": "\u0665m"}, "is not a duration"),  # a digit (Arabic-Indic 5), but not an ASCII one
        ({"every": "9" * 5000}, "is out of range"),  # past the digits int() converts: no ValueError
        ({"every": 60, "by": 5}, "by must be text, not int"),
        ({"every": 60, "by": "al\x1bice"}, "by 'al\\x1bice' holds a character that is not printable"),
        ({"every": 60, "spec": '{"a": "' + "x" * (1 << 20) + '"}'}, "over the 1048576-byte limit"),
        ({"every": 60, "spec": '{"a": "' + "\U0001f600" * ((1 << 20) // 12) + '"}'}, "over the"),
        ({"every": 60, "spec": '{"a": "\ud800"}'}, "spec is not UTF-8 text"),
    ],
)
def test_refusals_write_nothing(any_store: Any, options: dict[str, Any], words: str) -> None:
    options.setdefault("kind", "k")
    with pytest.raises(Invalid) as got:
        timetable.add(any_store, "bad", **options)
    assert words in str(got.value)
    assert timetable.listing(any_store) == []


@pytest.mark.parametrize("name", ["", "  ", "a/b", "a\\b", ".hidden", "line\nbreak", "tab\there", "x" * 101, 7])
def test_names_are_refused_as_job_ids_are(name: Any) -> None:
    with pytest.raises(Invalid):
        recurring.check_name(name)


def test_a_slots_id_is_a_valid_bounded_id_sorted_by_slot(clock: Any) -> None:
    longest = "ß" * recurring.NAME_MAX
    a, b = clock.now.replace(microsecond=0), clock.now.replace(microsecond=0) + timedelta(seconds=1)
    for name in ("tick", longest, "with space", "ünï"):
        got = slot_id(name, a)
        assert ids.check(got) == got and len(got) == 34
        assert got == slot_id(name, a) != slot_id(name, b)
        assert slot_id(name, a) < slot_id(name, b)
    assert slot_id("a", a) != slot_id("b", a)


def test_directory_files_are_private_and_no_link_is_followed(tmp_path: Path, clock: Any) -> None:
    from jobctl.store.schedules import SCHEDULES, file_name

    store = jobctl.FileStore(tmp_path / "root", clock=clock)
    timetable.add(store, "mine", kind="k", every=60)
    where = Path(store.root, *SCHEDULES)
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    assert stat.S_IMODE((where / file_name("mine")).stat().st_mode) == 0o600
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    os.symlink(target, where / file_name("linked"))
    with pytest.raises(Invalid):
        timetable.add(store, "linked", kind="k", every=60)
    assert target.read_text() == "{}"
    (where / file_name("broken")).write_text("not json")
    odd = dict(json.loads((where / file_name("mine")).read_text()), name="other")
    (where / file_name("moved")).write_text(json.dumps(odd))  # a schedule under another's name
    unreadable: list[Any] = []
    assert [s.name for s in timetable.listing(store, unreadable)] == ["mine"]
    assert len(unreadable) == 3  # the link, the garbage, the misplaced one: named, never followed
    assert store.remove_schedule("absent") is False
    assert not (where / (file_name("absent") + ".lock")).exists()
    (where / file_name("huge")).write_bytes(b" " * (2 << 20))  # past what a reader takes: unreadable, removable
    assert store.remove_schedule("huge") is True and not (where / file_name("huge")).exists()


def test_postgres_store_without_the_table_reads_none_and_refuses_with_the_way_out(pg_url: str, clock: Any) -> None:
    import psycopg

    from jobctl.store import postgres

    postgres.init(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE jobctl_schedules")
    store = postgres.PostgresStore(pg_url, clock=clock)
    try:
        assert timetable.listing(store) == [] and store.remove_schedule("x") is False
        assert fire(store) == []
        with pytest.raises(Refused) as got:
            timetable.add(store, "x", kind="k", every=60)
        assert "jobctl db migrate" in got.value.hint
        assert postgres.migrate(pg_url) == (postgres.SCHEMA_VERSION, postgres.SCHEMA_VERSION)
        timetable.add(store, "x", kind="k", every=60)
        assert [s.name for s in timetable.listing(store)] == ["x"]
    finally:
        store.close()


def test_a_schedule_as_large_as_its_readers_take_is_kept_and_read_once_fired(clocked_store: Any, clock: Any) -> None:
    """The size is judged as stored with a slot fired: the largest one taken is read back; a byte more is refused."""
    store = clocked_store
    stored = len(json.dumps(recurring.new("big", kind="k", spec='{"a": ""}', every=60, now=clock.now,
                                          fired=clock.now).to_json())) + 1  # fmt: skip
    spec = '{"a": "' + "x" * (recurring.STORED_MAX - stored) + '"}'
    sched = timetable.add(store, "big", kind="k", spec=spec, every=60)
    with pytest.raises(Invalid, match="over the"):
        timetable.add(store, "bigger", kind="k", spec=spec[:-2] + 'x"}', every=60)
    clock.advance(61)
    assert store.mark_fired("big", sched.created_at, clock.now.replace(microsecond=0))
    assert [s.name for s in timetable.listing(store)] == ["big"]


def test_a_declared_schedules_spec_nested_past_the_interpreters_limit_is_invalid(tmp_path: Path) -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    worker = jobctl.Worker(jobctl.FileStore(str(tmp_path / "s")))
    with pytest.raises(Invalid, match="schedule deep: spec is not JSON: it nests too deep"):
        worker.every("deep", "5m", kind="k", spec={"a": deep})


def test_a_clock_set_back_fires_no_slot_twice_and_lists_the_next_slot_that_fires(any_store: Any, clock: Any) -> None:
    sched = timetable.add(any_store, "tick", kind="k", every=60)
    first = sched.next(clock.now)
    assert first is not None
    clock.now = first
    assert fire(any_store) == [slot_id("tick", first)]
    clock.advance(86400)  # the store's clock runs a day ahead: one job, the latest slot (a missed run)
    ahead = first + timedelta(days=1)
    assert fire(any_store) == [slot_id("tick", ahead)]
    clock.now = first + timedelta(minutes=5, seconds=30)  # and is set right again
    assert fire(any_store) == []  # slots up to the latest fired do not fire: none twice
    kept = any_store.schedule("tick")
    assert kept.fired == ahead
    assert kept.next(clock.now) == ahead + timedelta(minutes=1)  # what `schedule list` says: the next that fires
    clock.now = ahead + timedelta(minutes=1)
    assert fire(any_store) == [slot_id("tick", ahead + timedelta(minutes=1))]
