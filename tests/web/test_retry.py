"""Retry and approval over HTTP, against a real ``jobctl serve`` on both stores (docs/reference/http.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from webtools import Reply, Server

from jobctl import Store
from jobctl.schedule import not_before, retry_of_link

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["file", "postgres"])
def served(request: pytest.FixtureRequest, start: Callable[..., Server]) -> Iterator[tuple[Server, Store]]:
    """A ``jobctl serve`` on a directory store, then on a PostgreSQL one; and the store, to look at."""
    if request.param == "file":
        server = start()
        yield server, server.store
        return
    from jobctl.store import postgres

    url = request.getfixturevalue("pg_url")
    postgres.init(url)
    store = postgres.PostgresStore(url)
    yield start(JOB_STORE=url), store
    store.close()


def _failed_pipeline(server: Server) -> tuple[str, str, str]:
    """fetch fails; report (after fetch) and publish (after report, a gate) are cancelled for it."""
    fetch = server.post("/api/jobs", {"kind": "fetch", "pipeline": "p"}).body["id"]
    report = server.post("/api/jobs", {"kind": "report", "pipeline": "p", "after": [fetch]}).body["id"]
    body = {"kind": "publish", "pipeline": "p", "after": [report], "hold": True}
    publish = server.post("/api/jobs", body).body["id"]
    assert server.jobctl("run", fetch, "--", "false", check=False).returncode == 1
    drained = server.jobctl("worker", "--drain", "--handler", "report=true", "--handler", "publish=true", check=False)
    assert drained.returncode == 0, drained.stderr  # it ran nothing: it cancelled what waits for a failed job
    return fetch, report, publish


def _runs_of(store: Store, job: str) -> list[str]:
    return [rec.id for rec in store.list() if retry_of_link(rec) == job]


def test_racing_retry_requests_make_one_replacement_of_each_job(served: tuple[Server, Store]) -> None:
    server, store = served
    fetch, report, publish = _failed_pipeline(server)
    before = server.get(f"/api/jobs/{fetch}").body
    assert (before["retryable"], before["replaced_by"]) == (True, None)
    start = threading.Barrier(8)
    replies: list[Reply] = []

    def click() -> None:
        start.wait()
        replies.append(server.post(f"/api/jobs/{fetch}/retry", {"by": "alice"}))

    clients = [threading.Thread(target=click) for _ in range(8)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(60)
    assert sorted(reply.status for reply in replies) == [200] * 7 + [201], [r.body for r in replies]
    assert len({reply.body["jobs"][0]["id"] for reply in replies}) == 1  # every answer names the one replacement
    made = next(reply for reply in replies if reply.status == 201)
    assert [job["retry_of"] for job in made.body["jobs"]] == [fetch, report, publish]
    for job in (fetch, report, publish):
        assert len(_runs_of(store, job)) == 1, job
    new_fetch, new_report, new_publish = (job["id"] for job in made.body["jobs"])
    assert made.body["jobs"][2]["step"] == "held"  # the gate came back a gate
    old = server.get(f"/api/jobs/{fetch}").body
    assert (old["replaced_by"], old["retryable"]) == (new_fetch, False)
    doomed = server.get(f"/api/jobs/{report}").body
    assert (doomed["replaced_by"], doomed["cancelled_for"], doomed["retryable"]) == (new_report, fetch, False)
    listed = {job["id"]: job for job in server.get("/api/jobs").body["jobs"]}
    assert listed[publish]["replaced_by"] == new_publish and listed[new_publish]["replaced_by"] is None


def test_a_rejected_gate_retried_over_http_waits_for_a_new_approval(served: tuple[Server, Store]) -> None:
    server, store = served
    gate = server.post("/api/jobs", {"kind": "publish", "hold": True}).body["id"]
    assert server.post(f"/api/jobs/{gate}/cancel", {"by": "alice"}).body["state"] == "cancelled"
    reply = server.post(f"/api/jobs/{gate}/retry", {"by": "bob"})
    assert reply.status == 201, reply.body
    new = reply.body["jobs"][0]
    assert (new["step"], new["intent"]) == ("held", "pause")
    assert store.load(new["id"]).intent.by == "bob"  # type: ignore[union-attr]
    nothing = server.jobctl("run", "--next", "--", "true", check=False)
    assert nothing.returncode == 3, nothing.stderr  # nothing runnable: it waits for its approval
    assert server.post(f"/api/jobs/{new['id']}/approve").body["step"] == "pending"
    server.jobctl("run", "--next", "--", "true")
    assert store.load(new["id"]).state == "complete"


def test_a_stage_cancelled_for_its_dependency_is_refused_naming_the_root(served: tuple[Server, Store]) -> None:
    server, store = served
    fetch, report, publish = _failed_pipeline(server)
    count = len(store.list())
    for job in (report, publish):
        reply = server.post(f"/api/jobs/{job}/retry")
        assert reply.status == 409 and reply.body["error"] == "cancelled_by_dependency", reply.body
        assert reply.body["retry"] == fetch and job in reply.body["message"]
    assert len(store.list()) == count
    view = server.get(f"/api/jobs/{publish}").body
    assert (view["cancelled_for"], view["retryable"]) == (report, False)


def _stages(server: Server) -> tuple[str, list[dict[str, Any]]]:
    body = server.get("/api/pipelines/p").body
    listed = [p for p in server.get("/api/pipelines").body["pipelines"] if p["name"] == "p"]
    assert listed == [body]
    return body["state"], body["stages"]


def test_a_pipeline_shows_each_stage_once_and_its_state(served: tuple[Server, Store]) -> None:
    server, _store = served
    fetch, report, publish = _failed_pipeline(server)
    state, stages = _stages(server)
    assert state == "failed"
    assert [(s["stage"], s["step"], s["history"]) for s in stages] == [
        ("fetch", "failed", []),
        ("report", "cancelled", []),
        ("publish", "cancelled", []),
    ]
    new_fetch, new_report, new_publish = (j["id"] for j in server.post(f"/api/jobs/{fetch}/retry").body["jobs"])
    state, stages = _stages(server)
    assert state == "waiting"
    assert [(s["stage"], s["job"]["id"], [h["id"] for h in s["history"]]) for s in stages] == [
        ("fetch", new_fetch, [fetch]),
        ("report", new_report, [report]),
        ("publish", new_publish, [publish]),
    ]
    assert stages[0]["history"][0]["state"] == "failed"
    server.jobctl("run", new_fetch, "--", "true")
    server.jobctl("run", new_report, "--", "true")
    assert _stages(server)[0] == "waiting_for_approval"
    server.post(f"/api/jobs/{new_publish}/approve")
    server.jobctl("run", new_publish, "--", "false", check=False)
    again = server.post(f"/api/jobs/{new_publish}/retry").body["jobs"][0]["id"]
    state, stages = _stages(server)
    assert state == "waiting_for_approval"  # failed after its approval: held again
    assert [h["id"] for h in stages[2]["history"]] == [new_publish, publish]
    assert stages[2]["job"]["id"] == again
    server.post(f"/api/jobs/{again}/approve")
    server.jobctl("run", again, "--", "true")
    assert _stages(server)[0] == "complete"


def test_a_retry_wait_says_when_and_the_failed_attempt_is_the_previous_one(served: tuple[Server, Store]) -> None:
    server, store = served
    body = {"kind": "fetch", "pipeline": "w", "retry_intervals": [3600], "total": 10}
    job = server.post("/api/jobs", body).body["id"]
    assert server.jobctl("run", job, "--", "sh", "-c", 'jobctl progress "$JOB_ID" --done 4; exit 3', check=False)
    waiting = server.get(f"/api/jobs/{job}").body
    assert waiting["state"] == "pending" and waiting["next_attempt_at"] is not None
    assert waiting["next_attempt_at"] == waiting["not_before"]
    assert waiting["previous_attempt"] == {"attempt": 1, "error": "attempt 1: exit status 3", "done": 4, "total": 10}
    assert server.get("/api/pipelines/w").body["state"] == "retry_scheduled"
    server.jobctl("run", job, "--", "sh", "-c", "exit 4", check=False)  # by hand, before its time: the last attempt
    ended = server.get(f"/api/jobs/{job}").body
    assert ended["state"] == "failed" and not_before(store.load(job)) is not None  # the record still holds it
    assert (ended["not_before"], ended["next_attempt_at"], ended["previous_attempt"]) == (None, None, None)
    assert ended["error"] == "attempt 2: exit status 4"
    assert server.get("/api/pipelines/w").body["state"] == "failed"
