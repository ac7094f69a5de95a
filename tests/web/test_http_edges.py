"""Odd but well-formed requests, on a real ``jobctl serve`` (docs/reference/http.md): none is a 500 or acts silently."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

import pytest
from webtools import Server

pytestmark = pytest.mark.timeout(120)


def test_an_id_that_is_not_latin_1_or_url_safe_gets_a_location_that_names_it(server: Server) -> None:
    # A header is Latin-1: the Location of `€uro` was a 500 after the job was written, and `%`, `?`, `#`
    # made a Location that names another path.
    for job_id in ("€uro", "100% done?#now"):
        reply = server.post("/api/jobs", {"kind": "k", "id": job_id})
        assert reply.status == 201, reply.body
        location = reply.headers["location"]
        assert location == "/api/jobs/" + urllib.parse.quote(job_id, safe=""), location
        assert server.get(location).body["id"] == job_id


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/jobs?limit=%C2%B2", "limit '²' is not a whole number"),  # str.isdigit, but not int(): was a 500
        ("/api/jobs?limit=%EF%BC%91", "limit '\uff11' is not a whole number"),  # a full-width digit
        ("/api/jobs?state=pending&state=failed", "parameter 'state' is given twice"),
        ("/api/jobs?limit=1&limit=2", "parameter 'limit' is given twice"),
        ("/api/jobs/some-job/logs?bytes=10&bytes=20", "parameter 'bytes' is given twice"),
    ],
)
def test_a_malformed_query_is_refused_422(refusing_server: Server, path: str, message: str) -> None:
    reply = refusing_server.get(path)
    assert reply.status == 422, reply.body
    assert reply.body["error"] == "invalid" and message in reply.body["message"], reply.body


@pytest.mark.parametrize(
    ("by", "message"), [("mallory\nerror: disk full", "not printable"), ("x" * 201, "longer than 200")]
)
def test_an_actions_by_that_is_no_name_is_refused_and_nothing_changes(server: Server, by: str, message: str) -> None:
    held = server.post("/api/jobs", {"kind": "k", "hold": True}).body["id"]
    failed = server.post("/api/jobs", {"kind": "k"}).body["id"]
    server.jobctl("run", failed, "--", "false", check=False)
    for job_id, action in ((held, "approve"), (held, "cancel"), (failed, "retry")):
        reply = server.post(f"/api/jobs/{job_id}/{action}", {"by": by})
        assert reply.status == 422 and message in reply.body["message"], (action, reply.body)
    job = server.get(f"/api/jobs/{held}").body
    assert (job["state"], job["intent"], job["error"]) == ("pending", "pause", "")
    assert len(server.get("/api/jobs").body["jobs"]) == 2  # no retry made


def test_a_wrong_page_token_beside_a_right_cookie_is_refused_and_keeps_the_cookie(
    start: Callable[..., Server],
) -> None:
    server = start(JOBCTL_TOKEN="s3cret-token")
    cookie = {"Cookie": "jobctl_token=s3cret-token"}
    for query in ("?token=wrong", "?token="):
        reply = server.get("/" + query, token="", headers=cookie)
        assert reply.status == 401, (query, reply.status)
        assert "set-cookie" not in reply.headers, reply.headers  # was a 303 that set the cookie to "wrong"
    assert server.get("/", token="", headers=cookie).status == 200


def test_a_pipeline_whose_name_holds_a_slash_is_served(server: Server) -> None:
    server.post("/api/jobs", {"kind": "fetch", "pipeline": "team/nightly"})
    for path in ("/api/pipelines/team%2Fnightly", "/api/pipelines/team/nightly"):
        reply = server.get(path)
        assert reply.status == 200 and reply.body["name"] == "team/nightly", (path, reply.body)
    empty = server.get("/api/pipelines/")
    assert (empty.status, empty.body["error"]) == (404, "not_found")


@pytest.mark.parametrize(
    ("field", "value"),
    [("pipeline", "a\u0000"), ("pipeline", "p\nq"), ("stage", "s\n"), ("requires", ["gpu", "a\u0000"])],
)
def test_a_name_that_would_break_a_line_is_refused_422(server: Server, field: str, value: object) -> None:
    body: dict[str, object] = {"kind": "k", field: value}
    if field == "stage":
        body["pipeline"] = "p"
    reply = server.post("/api/jobs", body)
    assert reply.status == 422 and reply.body["error"] == "invalid", reply.body
    assert f"{field} " in reply.body["message"] and "not printable" in reply.body["message"], reply.body
    assert server.get("/api/jobs").body["jobs"] == []


def test_a_not_before_with_an_offset_out_of_range_is_refused_422(server: Server) -> None:
    reply = server.post("/api/jobs", {"kind": "k", "not_before": "2024-01-01T00:00:00+23:60"})
    assert reply.status == 422 and "not a valid instant" in reply.body["message"], reply.body


def test_a_job_that_would_wait_for_itself_is_refused_422_and_not_written(server: Server) -> None:
    """As `jobctl submit --id X --after Y` refuses it; before, the HTTP API wrote it, and the worker cancelled both."""
    assert server.post("/api/jobs", {"kind": "k", "id": "cyc-b", "after": ["cyc-a"]}).status == 201
    reply = server.post("/api/jobs", {"kind": "k", "id": "cyc-a", "after": ["cyc-b"]})
    assert reply.status == 422, reply.body
    assert reply.body["message"] == "job cyc-a would wait for itself: cyc-a -> cyc-b -> cyc-a", reply.body
    assert [job["id"] for job in server.get("/api/jobs").body["jobs"]] == ["cyc-b"]
    again = server.post("/api/jobs", {"kind": "k", "id": "cyc-b", "after": ["cyc-a"]})
    assert again.status == 409, again.body  # an id taken is the submit's own refusal, as before
