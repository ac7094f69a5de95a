"""jobctl's scheduling keys: what submit writes, how failures count, what may start."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import jobctl
from jobctl import schedule
from jobctl.errors import Invalid
from jobctl.record import AFTER, PIPELINE, RETRY, decode, encode
from jobctl.store import picking

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)


def job(**kw: object) -> jobctl.Record:
    rec = jobctl.Record(id=str(kw.pop("id", "1-a")), kind="shell", spec={"argv": ["true"]})
    for key, value in kw.items():
        setattr(rec, key, value)
    return rec


def test_retries_take_the_default_schedule_repeating_its_last_interval() -> None:
    rec = schedule.plan(job(), retries=12, env={})
    assert rec.extensions[RETRY]["intervals"] == [10, 30, 60, 120, 240, 240, 240, 240, 240, 240, 240, 240]
    rec = schedule.plan(job(), retries=2, env={"JOB_RETRY_INTERVALS": "1, 2.5 ,9"})
    assert rec.extensions[RETRY]["intervals"] == [1, 2.5]


def test_intervals_alone_give_one_retry_each_and_bad_ones_are_refused() -> None:
    rec = schedule.plan(job(), intervals=[5, 7], no_retry_on=[2, 64])
    assert rec.extensions[RETRY] == {"intervals": [5, 7], "no_retry_on": [2, 64], "failures": 0}
    with pytest.raises(Invalid):
        schedule.parse_intervals("10,soon")
    with pytest.raises(Invalid):
        schedule.plan(job(), no_retry_on=[256])
    with pytest.raises(Invalid):
        schedule.plan(job(), retries=-1)
    for text in ("\u0663", "1_0", "10,\u0661"):  # Arabic-Indic digits, an underscore: float() takes them
        with pytest.raises(Invalid, match="is not a number of seconds"):
            schedule.parse_intervals(text)


@pytest.mark.parametrize("bad", [-5, 1e300, 10**30, "10", True, float("nan")])
def test_a_library_callers_intervals_are_judged_as_the_flags_are(bad: object) -> None:
    """Once refused at the write that counts a failure, leaving the job running to be adopted for ever."""
    with pytest.raises(Invalid, match=r"retry interval .* is out of range"):
        schedule.plan(job(), intervals=[5, bad])  # type: ignore[list-item]
    with pytest.raises(Invalid, match="more than 1000"):
        schedule.plan(job(), intervals=[1] * 1001)


def test_a_planted_interval_past_what_a_record_holds_fails_the_job_instead_of_refusing_the_write() -> None:
    rec = job()
    rec.extensions[RETRY] = {"intervals": [1e300], "failures": 0}
    assert schedule.record_failure(rec, 1, NOW) is False
    assert schedule.retry_of(rec).failures == 1 and schedule.not_before(rec) is None  # type: ignore[union-attr]


def test_no_scheduling_asked_writes_no_key() -> None:
    assert schedule.plan(job()).extensions == {}


def test_dependencies_are_declared_critical_and_survive_a_write() -> None:
    rec = schedule.plan(job(), after=["1-x", "1-y", "1-x"], pipeline="nightly", hold=True, by="ops")
    assert rec.extensions[AFTER] == {"jobs": ["1-x", "1-y"]}
    assert rec.extensions[PIPELINE] == {"name": "nightly", "stage": "shell"}
    assert rec.want == "pause"
    back = decode(encode(rec))
    assert AFTER in back.critical and PIPELINE not in back.critical and RETRY not in back.content
    assert schedule.after_of(back) == ["1-x", "1-y"]


def test_a_failure_is_retried_until_the_schedule_runs_out() -> None:
    rec = schedule.plan(job(), intervals=[5, 7])
    assert schedule.attempt(rec) == 1
    assert schedule.record_failure(rec, 1, NOW) is True
    assert schedule.not_before(rec) == NOW + timedelta(seconds=5)
    assert schedule.attempt(rec) == 2
    assert schedule.record_failure(rec, 1, NOW) is True
    assert schedule.not_before(rec) == NOW + timedelta(seconds=7)
    assert schedule.record_failure(rec, 1, NOW) is False  # the third failure is the last
    assert schedule.retry_of(rec).failures == 3  # type: ignore[union-attr]


def test_a_non_retryable_exit_code_fails_at_once() -> None:
    rec = schedule.plan(job(), intervals=[5, 7], no_retry_on=[64])
    assert schedule.record_failure(rec, 64, NOW) is False
    assert schedule.record_failure(job(), 1, NOW) is False  # no policy: nothing to retry


def test_blocked_by_names_the_reason() -> None:
    rec = schedule.plan(job(), after=["1-dep"], start_after=NOW + timedelta(minutes=1))
    assert schedule.blocked_by(rec, {"1-dep": "running"}, NOW) == ("waiting", "waiting for 1-dep (running)")
    assert schedule.blocked_by(rec, {"1-dep": "failed"}, NOW)[0] == "doomed"
    assert schedule.blocked_by(rec, {"1-dep": "cancelled"}, NOW)[0] == "doomed"
    assert schedule.blocked_by(rec, {}, NOW)[0] == "doomed"
    assert schedule.blocked_by(rec, {"1-dep": "complete"}, NOW)[0] == "waiting"  # not before yet
    assert schedule.blocked_by(rec, {"1-dep": "complete"}, NOW + timedelta(minutes=2)) == ("", "")
    held = schedule.plan(job(), hold=True)
    assert schedule.blocked_by(held, {}, NOW)[0] == "held"


def test_runnable_skips_a_malformed_record_and_names_it() -> None:
    good = job(id="1-good")
    bad = job(id="1-bad")
    bad.extensions[AFTER] = {"jobs": "not a list"}
    waiting = schedule.plan(job(id="1-waits"), after=["1-good"])
    skipped: list[tuple[str, jobctl.JobError]] = []
    got = schedule.runnable([bad, good, waiting], NOW, skipped=skipped)
    assert [r.id for r in got] == ["1-good"]
    assert [job_id for job_id, _ in skipped] == ["1-bad"]
    assert isinstance(skipped[0][1], Invalid)


def test_claim_next_passes_over_a_job_held_elsewhere_and_answers_none_when_nothing_is_left(tmp_path: object) -> None:
    store = jobctl.FileStore(str(tmp_path))
    first = store.submit(job(id=""))
    second = store.submit(job(id=""))
    store.claim(first, "somebody", 60)  # taken between the listing and our claim
    listing = store.list()
    listing[0].lease = jobctl.Lease()  # the stale view: first looked free when it was read
    got = picking.claim_next(store, "me", 60, records=listing)
    assert got is not None and got.id == second and got.lease.owner == "me"
    assert picking.claim_next(store, "me", 60) is None
    assert picking.claim_next(store, "me", 60, kinds=["other"]) is None


def _waiting(pairs: dict[str, list[str]]) -> dict[str, jobctl.Record]:
    out = {}
    for job_id, deps in pairs.items():
        rec = job(id=job_id)
        rec.extensions[AFTER] = {"jobs": deps}
        out[job_id] = rec
    return out


def test_cycles_finds_each_member_and_the_shortest_way_back() -> None:
    # a <-> b, and c -> a: c waits on a member of a cycle without being on it; d waits for itself.
    records = _waiting({"a": ["b", "zz-done"], "b": ["a"], "c": ["a"], "d": ["d"], "e": ["f"], "f": []})
    cycles = schedule.Cycles(records, lambda rec: True)
    assert cycles.through("c") is None
    assert cycles.through("a") == ["a", "b", "a"]
    assert cycles.through("b") == ["b", "a", "b"]
    assert cycles.through("d") == ["d", "d"]
    assert cycles.through("e") is None and cycles.through("f") is None
    assert cycles.through("not-open") is None
    # A member that does not wait (held under a live lease, say) may end all the same: no cycle.
    assert schedule.Cycles(records, lambda rec: rec.id != "b").through("a") is None


def test_a_long_cycle_is_walked_without_recursion_and_named_short() -> None:
    n = 5000  # deeper than Python's recursion limit
    records = _waiting({f"j{i}": [f"j{(i + 1) % n}"] for i in range(n)})
    path = schedule.Cycles(records, lambda rec: True).through("j0")
    assert path is not None and len(path) == n + 1 and path[0] == path[-1] == "j0"
    assert schedule.cycle_words(path) == f"j0 -> j1 -> j2 -> j3 -> ... -> j4997 -> j4998 -> j4999 -> j0 ({n} jobs)"


def test_closes_cycle_follows_open_jobs_only() -> None:
    stored = _waiting({"b": ["c"], "c": ["new"], "done": ["new"]})
    stored["done"].state = "complete"  # finished: it waits for nothing any more

    def load(job_id: str) -> jobctl.Record:
        if job_id not in stored:
            raise jobctl.NotFound(f"job {job_id} not found", job_id)
        return stored[job_id]

    new = schedule.plan(job(id="new"), after=["missing", "b"])
    assert schedule.closes_cycle(new, load) == ["new", "b", "c", "new"]
    assert schedule.closes_cycle(schedule.plan(job(id="new"), after=["done"]), load) is None
    assert schedule.closes_cycle(schedule.plan(job(id="other"), after=["b"]), load) is None


def test_a_stage_without_a_pipeline_is_refused_not_dropped() -> None:
    """Every way in (submit --stage, POST /api/jobs, NewJob(stage=)) meets this one rule; the library's call did not."""
    with pytest.raises(Invalid, match="stage needs pipeline"):
        schedule.plan(jobctl.Record(kind="k", spec={}), stage="s")
    rec = schedule.plan(jobctl.Record(kind="k", spec={}), pipeline="p", stage="s")
    assert schedule.pipeline_of(rec) == ("p", "s")
