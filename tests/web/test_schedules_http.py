"""``/api/schedules`` against a real ``jobctl serve`` on both stores: list, add, remove, and the refusals."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from webtools import Server

from jobctl import timetable

pytestmark = pytest.mark.timeout(120)


def test_add_list_and_remove(served: Callable[..., Server]) -> None:
    server = served()
    assert server.get("/api/schedules").body == {"schedules": []}
    reply = server.post("/api/schedules", {"name": "beat", "every": "15m", "kind": "ping", "spec": {"n": 1}})
    assert reply.status == 201, reply.body
    assert reply.body["name"] == "beat" and reply.body["every"] == 900 and reply.body["spec"] == {"n": 1}
    assert reply.body["by"].startswith("http@") and reply.body["next"].endswith("Z")
    reply = server.post("/api/schedules", {"name": "night ly", "cron": "30 2 * * *", "kind": "report", "by": "ops"})
    assert reply.status == 201, reply.body
    listed = server.get("/api/schedules").body["schedules"]
    assert [s["name"] for s in listed] == ["beat", "night ly"]
    assert listed[1]["next"].endswith("T02:30:00.000000Z") and listed[1]["by"] == "ops"
    assert [s.name for s in timetable.listing(server.store)] == ["beat", "night ly"]  # kept in the store
    assert server.call("DELETE", "/api/schedules/night%20ly").body == {"name": "night ly", "removed": True}
    gone = server.call("DELETE", "/api/schedules/night%20ly")
    assert gone.status == 404 and gone.body["error"] == "not_found"
    assert [s["name"] for s in server.get("/api/schedules").body["schedules"]] == ["beat"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"name": "x", "cron": "61 * * * *", "kind": "k"}, 422, "field 1 (minute)"),
        ({"name": "x", "every": 0, "kind": "k"}, 422, "out of range"),
        ({"name": "x", "kind": "k"}, 422, "not both or neither"),
        ({"name": "a/b", "every": 60, "kind": "k"}, 422, "schedule name"),
        ({"name": "x", "every": 60, "kind": "shell", "spec": {"argv": ["true"]}}, 422, "--allow-shell"),
        ({"name": "x", "every": 60, "kind": "k", "extra": 1}, 422, "unknown field 'extra'"),
        ({"name": "x", "every": 60}, 422, "kind must be a string"),
        ([1], 422, "JSON object"),
    ],
)
def test_refusals(refusing_server: Server, body: object, status: int, words: str) -> None:
    reply = refusing_server.post("/api/schedules", body)
    assert reply.status == status, reply.body
    assert words in reply.body["message"]
    assert refusing_server.get("/api/schedules").body == {"schedules": []}


def test_an_existing_name_is_a_conflict(server: Server) -> None:
    assert server.post("/api/schedules", {"name": "one", "every": 60, "kind": "k"}).status == 201
    reply = server.post("/api/schedules", {"name": "one", "every": 120, "kind": "k"})
    assert reply.status == 409 and reply.body["error"] == "exists"
    assert server.get("/api/schedules").body["schedules"][0]["every"] == 60
