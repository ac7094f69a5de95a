"""Schedules declared by an application (``jobctl.Worker.every`` / ``cron``), kept through ``Store.put_schedule``.

On both stores (``any_store``, on a clock the test moves): a declaration is
added once, the same one again writes nothing, a changed one replaces the
plan and keeps the slot fired; refusals write nothing. A worker's firing
passes over a schedule it cannot fire and fires the others.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import jobctl
from jobctl import recurring, timetable
from jobctl.errors import Invalid, Refused
from jobctl.recurring import SCHEDULE_OF, slot_id


def declared(store: Any, **kinds: Any) -> jobctl.Worker:
    worker = jobctl.Worker(store, poll_interval=0.05)
    worker.processor("report")(lambda job: {"to": job.spec["to"]})
    for name, (how, when, spec) in kinds.items():
        getattr(worker, how)(name, when, kind="report", spec=spec)
    return worker


def test_put_adds_then_writes_nothing_then_replaces_the_plan_keeping_what_was_fired(any_store: Any, clock: Any) -> None:
    first = recurring.new("nightly", kind="report", spec='{"to": "ops"}', cron="0 3 * * *", by="a", now=clock.now)
    assert any_store.put_schedule(first) == "added"
    kept = any_store.schedule("nightly")
    assert kept == first
    slot = datetime(2030, 1, 2, 3, 0, tzinfo=timezone.utc)
    assert any_store.mark_fired("nightly", kept.created_at, slot)
    clock.advance(3600)
    again = recurring.new("nightly", kind="report", spec='{"to": "ops"}', cron="0 3 * * *", by="b", now=clock.now)
    assert any_store.put_schedule(again) == "unchanged"
    assert any_store.schedule("nightly") == kept.__class__(**{**kept.__dict__, "fired": slot})  # not even `by`
    changed = recurring.new("nightly", kind="report", spec='{"to": "all"}', every="1h", by="c", now=clock.now)
    assert any_store.put_schedule(changed) == "updated"
    now = any_store.schedule("nightly")
    assert (now.every, now.cron, now.spec, now.by) == (3600, None, '{"to": "all"}', "c")
    assert now.created_at == first.created_at and now.fired == slot  # the slot fired before is not fired again
    assert timetable.listing(any_store) == [now]


def test_an_unchanged_declaration_does_not_touch_the_file(tmp_path: Path, clock: Any) -> None:
    from jobctl.store.schedules import SCHEDULES, file_name

    store = jobctl.FileStore(tmp_path / "root", clock=clock)
    assert timetable.declare(store, "beat", kind="ping", every="5m") == "added"
    path = Path(store.root, *SCHEDULES, file_name("beat"))
    before = os.stat(path)
    clock.advance(60)
    assert timetable.declare(store, "beat", kind="ping", every=300, by="someone else") == "unchanged"
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert oct(after.st_mode & 0o777) == "0o600"


def test_a_worker_keeps_its_declared_schedules_at_start_and_runs_their_jobs(any_store: Any, clock: Any) -> None:
    clock.now = datetime(2030, 1, 2, 3, 5, 0, tzinfo=timezone.utc)  # on a slot of every 1m and of the line
    spec = {"to": "ops"}
    worker = declared(any_store, minutely=("every", "1m", spec), daily=("cron", "0 4 * * *", spec))
    assert [s.name for s in timetable.listing(any_store)] == []  # declared, not yet kept
    summary = worker.drain()
    kept = {s.name: s for s in timetable.listing(any_store)}
    assert sorted(kept) == ["daily", "minutely"]
    assert kept["minutely"].every == 60 and kept["daily"].cron == "0 4 * * *"
    job_id = slot_id("minutely", clock.now)
    assert summary.ran == {job_id: "complete"}  # the slot due at start is fired, and its processor ran it
    rec = any_store.load(job_id)
    assert rec.extensions[SCHEDULE_OF] == {"name": "minutely", "slot": "2030-01-02T03:05:00.000000Z"}
    assert kept["minutely"].fired == clock.now
    # A restart with the same declarations changes nothing; one with a changed plan updates it.
    clock.advance(30)
    assert declared(any_store, minutely=("every", "1m", spec), daily=("cron", "0 4 * * *", spec)).declare() == {
        "minutely": "unchanged",
        "daily": "unchanged",
    }
    assert timetable.listing(any_store) == list(kept.values())
    changed = declared(any_store, minutely=("every", "2m", spec), daily=("cron", "0 4 * * *", {"to": "all"}))
    assert changed.declare() == {"minutely": "updated", "daily": "updated"}
    after = {s.name: s for s in timetable.listing(any_store)}
    assert after["minutely"].every == 120 and after["minutely"].fired == clock.now - timedelta(seconds=30)
    assert after["daily"].spec == '{"to": "all"}' and after["daily"].created_at == kept["daily"].created_at


@pytest.mark.parametrize(
    ("how", "name", "when", "spec", "words"),
    [
        ("every", "zero", 0, None, "schedule zero: every: 0 is out of range"),
        ("every", "huge", "400d", None, "schedule huge: every: 34560000 is out of range"),
        ("every", "frac", "1.5m", None, "schedule frac: every: '1.5m' is not a duration"),
        ("cron", "bad", "61 * * * *", None, "field 1 (minute) '61': 61 is out of range 0-59"),
        ("cron", "short", "* * *", None, "has 3 field(s)"),
        ("every", "a\nb", "1m", None, "schedule name 'a\\nb' holds a separator"),
        ("every", "x" * 101, "1m", None, "is longer than 100 characters"),
        ("every", "list", "1m", [1], "schedule list: spec must be a JSON object"),
        ("every", "nan", "1m", {"x": float("nan")}, "schedule nan: spec is not JSON"),
        ("every", "odd", "1m", {"x": object()}, "schedule odd: spec is not JSON"),
    ],
)
def test_a_bad_declaration_is_refused_where_it_is_written(
    tmp_path: Path, how: str, name: str, when: Any, spec: Any, words: str
) -> None:
    worker = jobctl.Worker(jobctl.FileStore(tmp_path / "root"))
    with pytest.raises(Invalid) as got:
        getattr(worker, how)(name, when, kind="report", spec=spec)
    assert words in str(got.value) and "\n" not in str(got.value)
    assert worker.schedules == {} and worker.declare() == {}
    assert timetable.listing(worker.store) == []


def test_a_name_declared_twice_on_one_worker_is_refused(tmp_path: Path) -> None:
    worker = jobctl.Worker(jobctl.FileStore(tmp_path / "root"))
    worker.every("beat", "1m", kind="report")
    with pytest.raises(Invalid, match="schedule beat is declared already on this worker"):
        worker.cron("beat", "* * * * *", kind="report")
    assert worker.schedules["beat"].every == 60


class _Refusing:
    """A store whose submit refuses the jobs of one kind: a schedule that cannot fire."""

    def __init__(self, store: Any, kind: str) -> None:
        self.store, self.kind = store, kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def submit(self, rec: jobctl.Record, *, wait: bool = True) -> str:
        if rec.kind == self.kind:
            raise Refused(f"no room for job {rec.id}", rec.id)
        return str(self.store.submit(rec, wait=wait))


def test_a_schedule_that_cannot_fire_is_said_once_and_the_others_fire(any_store: Any, clock: Any) -> None:
    clock.now = datetime(2030, 1, 2, 3, 5, 0, tzinfo=timezone.utc)
    timetable.add(any_store, "a-broken", kind="full", every=60)
    timetable.add(any_store, "b-fine", kind="report", every=60)
    said: list[tuple[str, str, str]] = []
    firing = timetable.Firing(_Refusing(any_store, "full"), lambda *line: said.append(line), reread=0)
    assert firing.tick(0.0) == 1
    clock.advance(60)
    assert firing.tick(1.0) == 1
    assert [what for what, _, _ in said].count("scheduled") == 2
    failed = [detail for what, _, detail in said if what == "schedule-failed"]
    first = slot_id("a-broken", clock.now - timedelta(minutes=1))
    assert failed == [f"cannot fire schedule a-broken: no room for job {first}"]  # once, though it failed twice
    assert any_store.schedule("b-fine").fired == clock.now and any_store.schedule("a-broken").fired is None


def test_the_python_api_pages_schedule_example_runs(tmp_path: Path) -> None:
    """The example in docs/reference/python-api.md, as written (its store moved under the test's directory)."""
    import re
    import subprocess
    import sys

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "python-api.md").read_text(encoding="utf-8")
    section = page[page.index("### Recurring schedules") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    script = code.group(1).replace("/srv/jobs", str(tmp_path / "jobs"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    kept = {s.name: s.when for s in timetable.listing(jobctl.FileStore(tmp_path / "jobs"))}
    assert kept == {"feeds": "every 15m", "nightly": "cron 30 3 * * *"}


def test_a_link_at_the_schedules_directory_is_refused_and_never_followed(tmp_path: Path, clock: Any) -> None:
    from jobctl.store.schedules import SCHEDULES

    store = jobctl.FileStore(tmp_path / "root", clock=clock)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    Path(store.root, *SCHEDULES[:-1]).mkdir(parents=True)
    os.symlink(elsewhere, Path(store.root, *SCHEDULES))
    for write in (timetable.add, timetable.declare):
        with pytest.raises(Invalid, match="is a symbolic link, not a directory"):
            write(store, "beat", kind="ping", every=60)
    with pytest.raises(Invalid, match="is a symbolic link"):
        timetable.listing(store)
    said: list[tuple[str, str, str]] = []
    firing = timetable.Firing(store, lambda *line: said.append(line), reread=0)
    assert firing.tick(0.0) == 0 and firing.tick(1.0) == 0
    assert [what for what, _, _ in said] == ["schedule-failed"]  # once, however often it looks
    assert list(elsewhere.iterdir()) == []
