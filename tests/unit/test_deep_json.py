"""JSON nested deeper than the interpreter recurses: refused like any other bad JSON, never a RecursionError.

Every file of the shared store jobctl reads beside the records (a schedule,
a worker's announcement, an exclusive key's holder), a job's result, the
config file, and a schedule's spec: anybody who can write there can plant
``[[[[...]]]]``. The standard library's decoder raises ``RecursionError`` for
it, which no caller caught: a traceback, and a worker killed on every pass.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

import jobctl
from jobctl import discovery, recurring
from jobctl.errors import Invalid
from jobctl.exclusive import set_exclusive
from jobctl.results import parse_result
from jobctl.store.keys import KEYS, key_file
from jobctl.store.schedules import SCHEDULES
from jobctl.store.workers import WORKERS, file_name

#: Far deeper than the interpreter's recursion limit, and under every size limit of those files (4096 bytes).
DEEP = "[" * 2000 + "]" * 2000


def test_a_deep_schedule_file_is_named_unreadable_and_the_others_listed(store: jobctl.FileStore) -> None:
    from jobctl import timetable

    timetable.add(store, "good", kind="k", every=60)
    where = Path(store.root).joinpath(*SCHEDULES)
    (where / "sdeep.json").write_text(DEEP)
    unreadable: list[tuple[str, Exception]] = []
    assert [s.name for s in store.schedules(unreadable)] == ["good"]
    [(path, exc)] = unreadable
    # Python 3.13's decoder takes 2,000 levels (then it is no object); older ones stop with RecursionError.
    assert path.endswith("sdeep.json") and isinstance(exc, Invalid)
    assert "is not JSON" in str(exc) or "is a JSON object" in str(exc)


def test_a_deep_announcement_is_no_announcement(store: jobctl.FileStore) -> None:
    where = Path(store.root).joinpath(*WORKERS)
    where.mkdir(parents=True)
    (where / file_name("planted@h:1")).write_text(DEEP)
    store.announce("w@h:2", ["k"], 60)  # prunes: reads every announcement there
    assert [a.owner for a in store.announcements()] == ["w@h:2"]


def test_a_deep_key_holder_file_holds_no_key(store: jobctl.FileStore) -> None:
    rec = jobctl.Record(kind="k", spec={})
    set_exclusive(rec, "db")
    job = store.submit(rec)
    where = Path(store.root).joinpath(*KEYS)
    where.mkdir(parents=True)
    (where / key_file("db")).write_text(DEEP)
    assert store.claim(job, "w", 60).state == "running"


def test_a_deep_result_is_invalid() -> None:
    with pytest.raises(Invalid, match="result is not JSON"):
        parse_result(DEEP.encode(), "j1")


def test_a_deep_config_file_is_reported_and_skipped(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(DEEP)
    store, problem = discovery.read_config(str(config))
    assert store == "" and (problem.startswith("is not JSON") or problem == "is not a JSON object")  # as above


def test_a_deep_schedule_spec_is_invalid_naming_the_schedule() -> None:
    with pytest.raises(Invalid, match=r"^schedule deep: spec is not JSON: nesting deeper than"):
        recurring.new("deep", kind="k", spec='{"a": ' + DEEP + "}", every=60, now=datetime.now(timezone.utc))
