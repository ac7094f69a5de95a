"""The HTTP API's refusals and details, on a real ``jobctl serve`` over each store (docs/reference/http.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from webtools import Server

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"kind": "k", "spec": ' + b"[" * 1000 + b"]" * 1000 + b"}", "nesting deeper than 64"),
        (b'{"kind": "k", "spec": ' + b"{" * 200_000, "nesting deeper than 64"),  # never closed, never recursed into
        (b'{"kind": "k", "spec": {"text": "\\ud800"}}', "escaped lone surrogate"),
        (b'{"kind": "k", "kind": "k"}', "duplicate member name 'kind'"),
        (b'{"kind": "k", "id": "' + b"x" * 300 + b'"}', "longer than 200 bytes"),
        (b'{"kind": "Shell"}', "kind 'Shell' is not shell"),
        (b'{"kind": " shell "}', "kind ' shell ' is not shell"),
        (b'{"kind": "SH ELL"}', "kind 'SH ELL' is not shell"),
        (b'{"kind": "a\\nb"}', "not printable"),
        (b'{"kind": "  "}', "kind is blank"),
        (b'{"kind": 7}', "kind must be a string"),
    ],
)
def test_a_hostile_body_is_refused_422_before_anything_is_written(
    served: Callable[..., Server], data: bytes, message: str
) -> None:
    server = served("--allow-shell")  # even so: a shell look-alike is no shell job
    reply = server.call("POST", "/api/jobs", data=data)
    assert reply.status == 422, reply.body
    assert reply.body["error"] == "invalid" and message in reply.body["message"], reply.body
    assert server.store.ids() == []


def test_the_cli_applies_the_same_rules(served: Callable[..., Server]) -> None:
    server = served()
    for args, message in [
        (["--kind", "Shell"], "--kind 'Shell' is not shell"),
        (["--kind", "shell "], "--kind 'shell ' is not shell"),
        (["--kind", "k", "--id", "x" * 300], "longer than 200 bytes"),
        (["--kind", "k", "--spec", '{"text": "\\ud800"}'], "escaped lone surrogate"),
    ]:
        ran = server.jobctl("submit", *args, check=False)
        assert ran.returncode == 9, ran.stderr  # invalid
        assert ran.stderr.count("\n") == 1 and message in ran.stderr, ran.stderr
    assert server.store.ids() == []


def test_no_answer_names_a_server_path(start: Callable[..., Server], tmp_path: Path) -> None:
    server = start()
    jobs = Path(server.store.root) / "jobs"
    os.symlink("/etc/passwd", jobs / "planted.json")  # a second user's link in the shared directory
    (jobs / "hollow.json").mkdir()
    root = str(Path(server.store.root).resolve())
    answers = [
        server.get("/api/jobs/planted"),
        server.get("/api/jobs/hollow"),
        server.get("/api/jobs"),
        server.post("/api/jobs/planted/cancel"),
        server.post("/api/jobs", {"kind": "k", "id": "y" * 300}),
    ]
    for reply in answers:
        text = json.dumps(reply.body)
        assert str(tmp_path) not in text and root not in text and "/etc" not in text, text
    assert answers[0].status == 422 and "planted.json is a symbolic link" in answers[0].body["message"]
    assert answers[2].status == 200 and {u["id"] for u in answers[2].body["unreadable"]} == {"planted", "hollow"}


def test_the_401_says_how_to_send_the_token(start: Callable[..., Server]) -> None:
    server = start(JOBCTL_TOKEN="s3cret")
    reply = server.get("/api/jobs")
    assert reply.status == 401
    assert "Authorization: Bearer TOKEN" in reply.body["message"] and "/?token=TOKEN" in reply.body["message"]
    assert "s3cret" not in json.dumps(reply.body)


def test_who_submitted_is_kept_shown_and_chosen_by(served: Callable[..., Server]) -> None:
    server = served()
    alice = server.post("/api/jobs", {"kind": "k", "by": "alice"})
    held = server.post("/api/jobs", {"kind": "k", "by": "carol", "hold": True})
    anonymous = server.post("/api/jobs", {"kind": "k"})
    assert (alice.status, alice.body["submitted_by"]) == (201, "alice")
    assert anonymous.body["submitted_by"] == "http@127.0.0.1"
    rec = server.store.load(held.body["id"])
    assert rec.extensions["jobctl.run/submitted-by@1"] == {"by": "carol"} and rec.intent.by == "carol"
    assert server.get(f"/api/jobs/{held.body['id']}").body["submitted_by"] == "carol"
    chosen = server.get("/api/jobs?by=alice&state=pending")
    assert [job["id"] for job in chosen.body["jobs"]] == [alice.body["id"]]
    assert server.get("/api/jobs?by=nobody").body["jobs"] == []
    cli = json.loads(server.jobctl("list", "--json", "--by", "carol").stdout)  # the CLI reads what HTTP wrote
    assert cli["id"] == held.body["id"] and cli["submitted_by"] == "carol"


@pytest.mark.parametrize(
    ("by", "message"), [("a\nb", "holds a character that is not printable"), ("x" * 201, "longer than 200")]
)
def test_a_submitter_that_is_no_name_is_refused(refusing_server: Server, by: str, message: str) -> None:
    reply = refusing_server.post("/api/jobs", {"kind": "k", "by": by})
    assert reply.status == 422 and message in reply.body["message"], reply.body
    assert refusing_server.store.ids() == []


SCRIPT = (
    'i=0; while [ $i -lt 3000 ]; do echo "line $i of the output"; i=$((i+1)); done; echo "boom: disk full" >&2; exit 3'
)


def failed_job(server: Server, job_id: str) -> None:
    """``job_id`` submitted and run once by ``jobctl run``, failing after 3,000 lines (about 70 KB) of output."""
    server.jobctl("submit", "--kind", "k", "--id", job_id)
    ran = server.jobctl("run", job_id, "--", "sh", "-c", SCRIPT, check=False)
    assert ran.returncode != 0, ran.stderr
    assert server.get(f"/api/jobs/{job_id}").body["state"] == "failed"


def test_the_end_of_a_failed_attempts_log_is_served_bounded(served: Callable[..., Server], tmp_path: Path) -> None:
    server = served(HOME=str(tmp_path / "home"))  # a database store's logs are under ~/.abstraction/work
    failed_job(server, "render-1")
    reply = server.get("/api/jobs/render-1/logs")
    assert reply.status == 200, reply.body
    body = reply.body
    assert (body["id"], body["attempt"], body["attempts"], body["truncated"]) == ("render-1", 1, [1], True)
    assert body["size"] > 60_000 and len(body["text"].encode()) <= 16 * 1024
    assert body["text"].startswith("line ") and "boom: disk full" in body["text"]  # whole lines, the last ones
    assert "line 2999 of the output\n" in body["text"] and "line 100 of the output" not in body["text"]
    small = server.get("/api/jobs/render-1/logs?attempt=1&bytes=200").body
    assert len(small["text"].encode()) <= 200 and small["truncated"]
    whole = server.get("/api/jobs/render-1/logs?bytes=262144").body
    assert not whole["truncated"] and whole["text"].startswith("---") and len(whole["text"]) == whole["size"]
    for query, status, message in [
        ("?attempt=2", 404, "no log of attempt 2"),
        ("?attempt=0", 422, "attempt '0' is not a whole number"),
        ("?attempt=x", 422, "attempt 'x'"),
        ("?bytes=262145", 422, "bytes '262145' is not a whole number 1..262144"),
        ("?bytes=0", 422, "bytes '0'"),
        ("?lines=5", 422, "unknown parameter 'lines'"),
    ]:
        refused = server.get(f"/api/jobs/render-1/logs{query}")
        assert (refused.status, refused.body["error"]) == (status, "not_found" if status == 404 else "invalid")
        assert message in refused.body["message"], refused.body
    assert server.get("/api/jobs/no-such-job/logs").status == 404
    fresh = server.post("/api/jobs", {"kind": "k"}).body["id"]
    none = server.get(f"/api/jobs/{fresh}/logs")
    assert none.status == 404 and "no log of any attempt" in none.body["message"]


@pytest.mark.parametrize("where", ["log", "older-layout-dir"])
def test_a_link_planted_at_the_log_is_not_followed(start: Callable[..., Server], tmp_path: Path, where: str) -> None:
    server = start()
    failed_job(server, "render-2")
    logs = Path(server.store.root) / "work" / ".jobctl" / "logs"
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "attempt-1.log").write_text("a secret outside the store\n")
    os.rename(logs / "render-2.attempt-1.log", tmp_path / "moved")
    if where == "log":
        os.symlink(secret / "attempt-1.log", logs / "render-2.attempt-1.log")
        planted = "render-2.attempt-1.log"
    else:  # no log in logs/: the older layout's directory is where the reader looks, and it is a link
        os.symlink(secret, logs / "render-2")
        planted = "render-2"
    reply = server.get("/api/jobs/render-2/logs")
    assert (reply.status, reply.body["error"]) == (422, "invalid"), reply.body
    assert f"{planted} is a symbolic link" in reply.body["message"]
    text = json.dumps(reply.body)
    assert "secret outside" not in text and str(tmp_path) not in text, text
