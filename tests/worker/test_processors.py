"""Python processors (jobctl.Worker, Job, Result, NewJob, NotRetryable) run by the worker loop, in this process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from workertools import wait_until

import jobctl
from jobctl import FileStore, Record, lifecycle, results, runner, schedule
from jobctl.errors import Invalid, StaleEpoch
from jobctl.keeper import Keeper
from jobctl.processor import FunctionWork, NewJob, next_id, submit_next

pytestmark = pytest.mark.timeout(60)


def app(store: Any, **options: Any) -> jobctl.Worker:
    options.setdefault("poll_interval", 0.05)
    options.setdefault("ttl", 5.0)
    options.setdefault("grace", 0.5)
    return jobctl.Worker(store, on_event=lambda event: None, **options)


def job(store: Any, kind: str, spec: Any = None, **plan: Any) -> str:
    rec = Record(kind=kind, spec={} if spec is None else spec)
    if plan:
        schedule.plan(rec, **plan)
    return store.submit(rec)


def in_thread(target: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


# -- results and next jobs --------------------------------------------------------------


def test_a_processors_result_is_stored_with_the_completion(store: Any) -> None:
    worker = app(store)

    @worker.processor("count")
    def count(j: jobctl.Job) -> jobctl.Result:
        assert (j.kind, j.attempt, j.spec, j.checkpoint_data) == ("count", 1, {"text": "abc"}, None)
        return jobctl.Result(data={"chars": len(j.spec["text"])})

    one = job(store, "count", {"text": "abc"})
    summary = worker.drain()
    assert summary.ran == {one: "complete"}
    assert results.result_of(store.load(one)) == {"chars": 3}
    assert b"processor " in (runner.log_read(store, one, 1) or b"")  # its attempt has a log, as a command's


def test_returning_a_json_value_is_its_result_and_none_is_no_result(store: FileStore) -> None:
    worker = app(store)
    worker.add_processor("value", lambda j: [1, "two"])
    worker.add_processor("nothing", lambda j: None)
    a, b = job(store, "value"), job(store, "nothing")
    worker.drain()
    assert results.result_of(store.load(a)) == [1, "two"]
    assert store.load(b).state == "complete" and not results.has_result(store.load(b))


def test_a_result_that_is_not_json_fails_the_attempt(store: FileStore) -> None:
    worker = app(store)
    worker.add_processor("odd", lambda j: jobctl.Result(data={"when": object()}))
    one = job(store, "odd")
    worker.drain()
    rec = store.load(one)
    assert rec.state == "failed" and f"job {one}: the processor's result is not JSON" in rec.error
    assert not results.has_result(rec)


def test_next_jobs_get_derived_ids_wait_for_the_parent_and_each_other_and_join_its_pipeline(store: Any) -> None:
    worker = app(store, concurrency=3)
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def stage(j: jobctl.Job) -> Any:
        with lock:
            seen.append((j.kind, j.id))
        return {"stage": j.kind}

    @worker.processor("script")
    def script(j: jobctl.Job) -> jobctl.Result:
        voice = NewJob("voice", {"text": "hi"})
        image = NewJob("image", {"text": "hi"})
        video = NewJob("video", after=[voice, image])
        # Listed before what it waits for: submitted after them all the same.
        return jobctl.Result(data={"chars": 2}, next_jobs=[video, voice, image])

    for kind in ("voice", "image", "video"):
        worker.add_processor(kind, stage)
    parent = job(store, "script", pipeline="gv", retries=2)
    worker.drain()
    rec = store.load(parent)
    ids = {kind: next_id(rec, n, kind) for n, kind in enumerate(["video", "voice", "image"])}
    assert sorted(store.ids()) == sorted([parent, *ids.values()])
    for kind, child in ids.items():
        c = store.load(child)
        assert c.state == "complete" and results.result_of(c) == {"stage": kind}
        assert schedule.pipeline_of(c) == ("gv", kind)
        retry = schedule.retry_of(c)
        assert retry is not None and retry.intervals == schedule.retry_of(rec).intervals and retry.failures == 0  # type: ignore[union-attr]
    assert schedule.after_of(store.load(ids["voice"])) == [parent]
    assert schedule.after_of(store.load(ids["video"])) == [parent, ids["voice"], ids["image"]]
    order = [kind for kind, _ in seen]
    assert order[-1] == "video" and sorted(order) == ["image", "video", "voice"]


def test_a_processor_makes_a_gate_that_waits_for_its_approval_and_stays_one_on_retry(store: Any) -> None:
    worker = app(store)
    ran: list[str] = []

    @worker.processor("render")
    def render(j: jobctl.Job) -> jobctl.Result:
        return jobctl.Result(next_jobs=[NewJob("publish", {"to": "site"}, hold=True, total=5, requires=["cdn"])])

    @worker.processor("publish")
    def publish(j: jobctl.Job) -> None:
        ran.append(j.id)
        raise jobctl.NotRetryable("the site is down")

    parent = job(store, "render", pipeline="p")
    worker.drain()
    gate = store.load(next_id(store.load(parent), 0, "publish"))
    assert (gate.state, gate.want, gate.progress.total, gate.requires) == ("pending", "pause", 5, ["cdn"])
    assert gate.intent is not None and gate.intent.by == f"job {parent}"
    assert gate.extensions[schedule.APPROVAL] == {"required": True} and ran == []
    store.set_intent(gate.id, "run", "alice")  # the approval
    worker.drain()
    assert ran == [gate.id] and store.load(gate.id).state == "failed"
    again = lifecycle.retry(store, gate.id, by="bob")[0].new
    assert store.load(again).want == "pause"  # failed after its approval: a new approval is needed
    worker.drain()
    assert ran == [gate.id]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"hold": "yes"}, "hold must be True or False"),
        ({"total": -1}, "total must be"),
        ({"requires": [""]}, "requires"),
    ],
)
def test_a_next_jobs_gate_total_and_requires_are_checked(options: dict[str, Any], says: str) -> None:
    with pytest.raises(Invalid, match=says):
        NewJob("publish", **options)


def test_submitting_the_next_jobs_again_finds_the_same_ids_and_changes_nothing(store: Any) -> None:
    """What an adopter does when the holder died between submitting and completing: nothing is duplicated."""
    parent = store.load(job(store, "script", pipeline="p"))
    voice = NewJob("voice", {"n": 1})
    video = NewJob("video", after=[voice])
    first = submit_next(store, parent, [voice, video])
    before = {i: store.load_bytes(i) for i in first}
    # The re-run may even compute other specs: the first submission stands.
    again = submit_next(store, parent, [NewJob("voice", {"n": 2}), NewJob("video", after=[first[0]])])
    assert again == first
    assert len(store.ids()) == 3
    assert {i: store.load_bytes(i) for i in first} == before


def test_next_jobs_that_wait_in_a_cycle_or_for_a_stranger_are_refused_before_any_is_submitted(store: FileStore) -> None:
    parent = store.load(job(store, "script"))
    a = NewJob("a")
    b = NewJob("b", after=[a])
    a.after.append(b)
    with pytest.raises(Invalid, match="cycle"):
        submit_next(store, parent, [a, b])
    with pytest.raises(Invalid, match="not among next_jobs"):
        submit_next(store, parent, [NewJob("c", after=[NewJob("d")])])
    assert store.ids() == [parent.id]


def test_a_next_job_whose_spec_is_not_an_object_submits_none_of_them(store: FileStore) -> None:
    parent = store.load(job(store, "script"))
    with pytest.raises(Invalid, match="next job 'b': its spec is not a JSON object"):
        submit_next(store, parent, [NewJob("a"), NewJob("b", [1, 2])])
    with pytest.raises(Invalid, match="next job 'c': its spec is not JSON"):
        submit_next(store, parent, [NewJob("a"), NewJob("c", {"when": object()})])
    assert store.ids() == [parent.id]


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"kind": "two\nlines"}, "not printable"),
        ({"kind": "Shell"}, "is not shell"),
        ({"kind": "shell", "spec": {"argv": []}}, "argv"),
        ({"retries": -1}, "retries must be"),
        ({"id": "../elsewhere"}, "starts with a dot"),
        ({"id": 5}, "must be a string"),
        ({"requires": ["two\nlines"]}, "not printable"),
        ({"stage": "s"}, "its stage 's' needs a pipeline, and job "),  # once dropped unsaid
        ({"spec": {"deep": _nested(70)}}, "nesting deeper than 64"),
        ({"spec": {"deep": _nested(100_000)}}, "nests too deep"),
    ],
)
def test_a_next_job_a_submission_would_refuse_fails_the_attempt_and_submits_none(
    store: FileStore, options: dict[str, Any], says: str
) -> None:
    """Once checked only by each store.submit in turn: the siblings before it stayed, waiting for a failed parent."""
    worker = app(store)
    options = {"kind": "later", **options}
    worker.add_processor("fan", lambda j: jobctl.Result(next_jobs=[NewJob("first"), NewJob(**options)]))
    one = job(store, "fan")
    assert worker.drain().ran == {one: "failed"}
    rec = store.load(one)
    assert says in rec.error and f"job {one}: next job " in rec.error
    assert store.ids() == [one]


@pytest.mark.parametrize("value", [_nested(62), _nested(100_000), {"text": "\ud800"}])
def test_a_result_the_record_cannot_carry_fails_the_attempt_and_leaves_nothing_running(store: Any, value: Any) -> None:
    """Once refused by the completing write itself (or a RecursionError before it): the job stayed running, its
    holder gone, and every adopter ran it again, never counting an attempt."""
    worker = app(store)
    worker.add_processor("odd", lambda j: value)
    one = job(store, "odd")
    assert worker.drain().ran == {one: "failed"}
    rec = store.load(one)
    assert rec.state == "failed" and "the processor's result is not JSON" in rec.error and not results.has_result(rec)
    worker.add_processor("fine", lambda j: _nested(61))  # the deepest a record takes
    two = job(store, "fine")
    assert worker.drain().ran == {two: "complete"}


def test_a_completing_write_refused_for_what_it_carries_fails_the_attempt(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever makes the write that completes a job refuse its result (here a check the scratch record passes
    and the real one does not), the attempt fails under the retry policy: nothing is left running for an
    adopter to run again."""
    real = results.set_result
    calls = {"n": 0}

    def second_refuses(rec: Record, value: Any) -> None:
        calls["n"] += 1
        if calls["n"] > 1:  # the first call is the processor's check on a scratch record
            raise Invalid("the record cannot carry this result", rec.id)
        real(rec, value)

    monkeypatch.setattr(results, "set_result", second_refuses)
    worker = app(store)
    worker.add_processor("odd", lambda j: {"fine": True})
    one = job(store, "odd", retries=1, intervals=[0.01])
    ran = worker.drain().ran
    rec = store.load(one)
    assert ran == {one: "failed"} and rec.state == "failed"
    assert "the record cannot carry this result" in rec.error and not results.has_result(rec)
    assert schedule.retry_of(rec) is not None and schedule.retry_of(rec).failures == 2  # both attempts counted


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(3)])
def test_an_async_processor_raising_keyboard_interrupt_or_system_exit_fails_its_attempt_and_the_loop_runs_on(
    store: FileStore, raised: BaseException
) -> None:
    """asyncio lets these out through the loop: its thread ended, and this job and every async one after it
    stayed running for ever, their leases renewed."""
    worker = app(store)

    async def bail(j: jobctl.Job) -> Any:
        await asyncio.sleep(0)
        raise raised

    async def fine(j: jobctl.Job) -> Any:
        await asyncio.sleep(0)
        return "ok"

    worker.add_processor("bail", bail)
    worker.add_processor("fine", fine)
    one = job(store, "bail")
    done: list[Any] = []
    thread = in_thread(lambda: done.append(worker.drain()))
    thread.join(20)
    assert done and done[0].ran == {one: "failed"}
    assert store.load(one).error == f"attempt 1: {raised!r}".replace("()", "").replace("(3)", ": 3")
    two = job(store, "fine")
    assert worker.drain().ran == {two: "complete"}


def test_a_processor_whose_next_jobs_are_wrong_fails_its_attempt(store: FileStore) -> None:
    worker = app(store)
    worker.add_processor("bad", lambda j: jobctl.Result(next_jobs=[NewJob("x", after=[NewJob("y")])]))
    one = job(store, "bad")
    worker.drain()
    rec = store.load(one)
    assert rec.state == "failed" and "not among next_jobs" in rec.error and store.ids() == [one]


# -- failures ---------------------------------------------------------------------------


def test_an_exception_is_a_failed_attempt_retried_under_the_policy(store: Any) -> None:
    worker = app(store)
    attempts: list[int] = []

    @worker.processor("flaky")
    def flaky(j: jobctl.Job) -> Any:
        attempts.append(j.attempt)
        if j.attempt < 3:
            raise ConnectionError(f"try {j.attempt}")
        return "ok"

    one = job(store, "flaky", intervals=[0, 0, 0])
    assert worker.drain().ran == {one: "complete"}
    assert attempts == [1, 2, 3]
    rec = store.load(one)
    assert results.result_of(rec) == "ok" and schedule.retry_of(rec).failures == 2  # type: ignore[union-attr]
    log = runner.log_read(store, one, 1) or b""
    assert b"ConnectionError: try 1" in log and b"Traceback" in log


def test_not_retryable_fails_at_once_with_retries_left(store: Any) -> None:
    worker = app(store)
    attempts: list[int] = []

    @worker.processor("doomed")
    def doomed(j: jobctl.Job) -> Any:
        attempts.append(j.attempt)
        raise jobctl.NotRetryable("bad input")

    one = job(store, "doomed", intervals=[0, 0, 0])
    assert worker.drain().ran == {one: "failed"}
    assert attempts == [1]
    assert store.load(one).error == "attempt 1: NotRetryable: bad input"


def test_a_subclass_of_not_retryable_is_not_retried_either(store: FileStore) -> None:
    class BadInput(jobctl.NotRetryable):
        pass

    worker = app(store)
    worker.add_processor("doomed", lambda j: (_ for _ in ()).throw(BadInput("no")))
    one = job(store, "doomed", intervals=[0])
    worker.drain()
    assert store.load(one).state == "failed" and schedule.retry_of(store.load(one)).failures == 1  # type: ignore[union-attr]


# -- fenced writes, checkpoints, progress ---------------------------------------------------


def test_checkpoint_and_progress_are_fenced_writes_a_successor_reads(store: Any) -> None:
    worker = app(store)

    @worker.processor("pages")
    def pages(j: jobctl.Job) -> Any:
        start = (j.checkpoint_data or {}).get("page", 0)
        for page in range(start, 4):
            j.progress(page, 4)
            j.checkpoint({"page": page + 1})
            if page == 1 and j.attempt == 1:
                raise OSError("disk hiccup")
        return {"from": start}

    one = job(store, "pages", intervals=[0])
    worker.drain()
    rec = store.load(one)
    assert rec.state == "complete" and results.result_of(rec) == {"from": 2}
    assert (rec.progress.done, rec.progress.total) == (3, 4)


def test_a_write_after_the_lease_is_lost_is_refused(store: FileStore) -> None:
    one = job(store, "slow")
    claimed = store.claim(one, "me", 5.0)
    keeper = Keeper(store, claimed, ttl=5.0, grace=0.2)
    refused: list[BaseException] = []
    started = threading.Event()

    def slow(j: jobctl.Job) -> Any:
        started.set()
        j.wait_stop(10)  # the keeper asks it to stop once it sees the claim below
        try:
            j.checkpoint({"late": True})
        except StaleEpoch as exc:
            refused.append(exc)

    def steal() -> None:
        started.wait(10)
        # The same owner may re-claim a live lease [JOB-O2]: the epoch rises under the keeper.
        store.claim(one, "me", 5.0)

    in_thread(steal)
    out = keeper.execute(FunctionWork(slow))
    assert out.fenced and out.reason == "fenced"
    wait_until(lambda: refused, what="the processor's late write")
    rec = store.load(one)
    assert rec.lease.epoch == claimed.lease.epoch + 1 and rec.checkpoint is None and rec.state == "running"


# -- stopping ----------------------------------------------------------------------------------


def test_a_cancelled_jobs_processor_sees_the_stop_request_and_ends_within_the_grace(store: Any) -> None:
    worker = app(store, grace=10.0)
    saw: list[bool] = []
    running = threading.Event()

    @worker.processor("long")
    def long(j: jobctl.Job) -> Any:
        running.set()
        while not j.stop_requested:
            time.sleep(0.01)
        saw.append(True)
        return None

    one = job(store, "long")
    in_thread(lambda: (running.wait(10), store.set_intent(one, "cancel", "tester")))
    summary = worker.drain()
    assert saw == [True]
    rec = store.load(one)
    assert rec.state == "cancelled" and rec.error == "cancelled at the request of tester"
    assert summary.ran == {one: "cancelled"}


def test_an_async_processor_that_ignores_the_stop_is_cancelled_at_the_grace(store: FileStore) -> None:
    worker = app(store, grace=0.3)
    cancelled = threading.Event()
    running = threading.Event()

    @worker.processor("stubborn")
    async def stubborn(j: jobctl.Job) -> Any:
        running.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    one = job(store, "stubborn")
    in_thread(lambda: (running.wait(10), store.set_intent(one, "cancel", "tester")))
    worker.drain()
    assert cancelled.is_set()
    assert store.load(one).state == "cancelled"


def test_a_plain_processor_that_ignores_the_stop_is_left_behind_and_the_job_released(store: FileStore) -> None:
    worker = app(store, grace=0.2)
    running = threading.Event()
    release = threading.Event()

    @worker.processor("stubborn")
    def stubborn(j: jobctl.Job) -> Any:
        running.set()
        release.wait(30)
        return "too late"

    one = job(store, "stubborn")
    in_thread(lambda: (running.wait(10), store.set_intent(one, "pause", "tester")))
    summary = worker.drain()
    release.set()
    rec = store.load(one)
    assert rec.state == "pending" and rec.paused and not results.has_result(rec)
    assert summary.ran == {one: "pending"}


def test_a_job_whose_left_behind_processor_still_runs_is_not_started_again_here(store: FileStore) -> None:
    """Given up at the grace, a plain processor runs on: this worker waits for it before the job's next attempt."""
    events: list[Any] = []
    worker = jobctl.Worker(store, poll_interval=0.05, ttl=5.0, grace=0.2, on_event=events.append)
    lock = threading.Lock()
    active, most, calls = [0], [0], [0]
    first_in = threading.Event()
    release = threading.Event()

    @worker.processor("stubborn")
    def stubborn(j: jobctl.Job) -> Any:
        with lock:
            active[0] += 1
            calls[0] += 1
            most[0] = max(most[0], active[0])
        try:
            if calls[0] == 1:
                first_in.set()
                release.wait(30)  # ignores the stop request
            return {"call": calls[0]}
        finally:
            with lock:
                active[0] -= 1

    one = job(store, "stubborn")
    loop = in_thread(worker.run)
    first_in.wait(10)
    store.set_intent(one, "pause", "tester")
    wait_until(lambda: store.load(one).state == "pending", what="the job released without its processor")
    store.set_intent(one, "run", "tester")  # runnable again while the first call still runs
    said = wait_until(lambda: [e for e in events if e.what == "waiting" and e.job_id == one], what="the wait")
    assert "still running" in said[0].detail and calls[0] == 1
    release.set()
    wait_until(lambda: store.load(one).state == "complete", what="the second attempt")
    worker.stop()
    loop.join(30)
    assert most[0] == 1 and calls[0] == 2
    assert results.result_of(store.load(one)) == {"call": 2}


def test_stopping_the_worker_stops_the_processors(store: FileStore) -> None:
    worker = app(store, shutdown_grace=0.0, grace=5.0)
    running = threading.Event()

    saw: list[bool] = []

    @worker.processor("long")
    def long(j: jobctl.Job) -> Any:
        running.set()
        saw.append(j.wait_stop(30))
        return "finished anyway"

    one = job(store, "long")
    in_thread(lambda: (running.wait(10), worker.stop()))
    summary = worker.run()
    assert saw == [True] and summary.ran == {one: "pending"}
    rec = store.load(one)
    assert rec.state == "pending" and rec.lease.owner == "" and not results.has_result(rec)  # released


# -- sync and async together, and commands beside them ------------------------------------------


def test_async_processors_share_one_loop_and_run_at_once_beside_sync_ones_and_commands(
    store: Any, tmp_path: Path
) -> None:
    worker = app(store, concurrency=4)
    loops: set[int] = set()
    both = asyncio.Event  # made on the shared loop by the first to arrive
    state: dict[str, Any] = {}
    threads: set[str] = set()

    async def meet(j: jobctl.Job) -> Any:
        loops.add(id(asyncio.get_running_loop()))
        if "event" not in state:
            state["event"] = both()
            await asyncio.wait_for(state["event"].wait(), 20)  # only the other one can set it: they overlap
        else:
            state["event"].set()
        return {"met": j.spec["n"]}

    def plain(j: jobctl.Job) -> Any:
        threads.add(threading.current_thread().name)
        return {"thread": True}

    worker.add_processor("meet", meet)
    worker.add_processor("plain", plain)
    marker = tmp_path / "shell-ran"
    ids = [job(store, "meet", {"n": 1}), job(store, "meet", {"n": 2}), job(store, "plain")]
    ids.append(job(store, "shell", {"argv": ["touch", str(marker)]}))
    summary = worker.drain()
    assert summary.ran == {i: "complete" for i in ids}
    assert len(loops) == 1 and marker.exists()
    assert all(name.startswith("jobctl processor") for name in threads)


def test_a_python_processor_replaces_a_handler_of_the_same_kind(store: FileStore, tmp_path: Path) -> None:
    marker = tmp_path / "handler-ran"
    worker = app(store, handlers={"resize": f"touch {marker}", "fetch": f"touch {marker}.fetch"})
    worker.add_processor("resize", lambda j: "python")
    a, b = job(store, "resize"), job(store, "fetch")
    worker.drain()
    assert results.result_of(store.load(a)) == "python" and not marker.exists()
    assert store.load(b).state == "complete" and Path(f"{marker}.fetch").exists()


def test_one_processor_per_kind(store: FileStore) -> None:
    worker = app(store)
    worker.add_processor("k", lambda j: None)
    with pytest.raises(Invalid, match="has a processor already"):
        worker.add_processor("k", lambda j: None)


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("concurrency", 0, "concurrency: 0 is not valid"),
        ("concurrency", 2.5, "concurrency: 2.5 is not valid"),
        ("concurrency", True, "concurrency: True is not valid"),
        ("ttl", -5, "ttl: -5 is not valid (lease length in seconds"),
        ("ttl", float("inf"), "ttl: inf is not valid"),
        ("grace", "soon", "grace: 'soon' is not valid"),
        ("poll_interval", 0, "poll_interval: 0 is not valid"),
        ("shutdown_grace", -1.0, "shutdown_grace: -1.0 is not valid"),
        ("name", 7, "name: 7 is not valid"),
    ],
)
def test_a_workers_options_are_judged_as_its_flags_are(store: FileStore, option: str, value: object, says: str) -> None:
    with pytest.raises(Invalid) as caught:
        jobctl.Worker(store, **{option: value})  # type: ignore[arg-type]
    assert says in str(caught.value)


def test_a_workers_good_options_are_kept_as_given(store: FileStore) -> None:
    worker = jobctl.Worker(store, concurrency=3, ttl=5, grace="2.5", poll_interval=0.05, name="w1")
    assert worker.options == {"concurrency": 3, "ttl": 5.0, "grace": 2.5, "poll_interval": 0.05, "name": "w1"}


def test_the_processor_api_is_not_imported_by_import_jobctl() -> None:
    heavy = "('asyncio', 'jobctl.processor', 'jobctl.app', 'jobctl.worker')"
    code = f"import sys, jobctl; print(sorted(m for m in sys.modules if m in {heavy}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_python_api_pages_processor_example_runs(tmp_path: Path) -> None:
    """The example in docs/reference/python-api.md, as written (its store moved under the test's directory)."""
    import re

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "python-api.md").read_text(encoding="utf-8")
    section = page[page.index("## Python processors") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    script = code.group(1).replace("/srv/jobs", str(tmp_path / "jobs"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    store = FileStore(tmp_path / "jobs")
    kinds = sorted(store.load(i).kind for i in store.ids())
    assert kinds == ["image_generation", "script_generation", "video_generation", "voice_synthesis"]
    assert all(store.load(i).state == "complete" for i in store.ids())
