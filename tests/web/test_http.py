"""The HTTP API against a real ``jobctl serve`` process on a loopback port (docs/reference/http.md)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from webtools import Server, next_event, serve_env

from jobctl.results import set_result

pytestmark = pytest.mark.timeout(120)


def poll(server: Server, job_id: str, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """GET the job until ``until`` holds for it, as a page that polls would (the test's own bound: 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        reply = server.get(f"/api/jobs/{job_id}")
        assert reply.status == 200, reply.body
        if until(reply.body):
            return reply.body
        assert time.monotonic() < deadline, reply.body
        time.sleep(0.05)


def test_submit_returns_the_id_at_once_and_a_run_completes_it(server: Server) -> None:
    reply = server.post("/api/jobs", {"kind": "render", "spec": {"frame": 7}, "total": 3})
    assert reply.status == 201, reply.body
    job = reply.body
    assert job["state"] == "pending" and job["step"] == "pending" and job["spec"] == {"frame": 7}
    assert job["total"] == 3 and job["attempt"] == 1 and job["has_result"] is False
    assert reply.headers["location"] == f"/api/jobs/{job['id']}"
    assert server.store.load(job["id"]).kind == "render"  # it is in the store, as submit writes it
    runner = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "run", job["id"], "--", "sh", "-c", "jobctl progress --done 2"],
        env=server.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    done = poll(server, job["id"], lambda j: j["state"] in ("complete", "failed", "cancelled"))
    assert runner.wait(60) == 0, runner.stderr.read() if runner.stderr else ""
    if runner.stderr:
        runner.stderr.close()
    assert done["state"] == "complete" and done["step"] == "done" and done["done"] == 2, done
    assert done["created_at"] and done["updated_at"] >= done["created_at"]


def test_a_result_written_with_the_completion_is_shown(server: Server) -> None:
    job_id = server.post("/api/jobs", {"kind": "script_generation"}).body["id"]
    store = server.store
    epoch = store.claim(job_id, "processor", 30).lease.epoch
    store.update(job_id, epoch, lambda rec: set_result(rec, {"chars": 1234}))
    store.finish(job_id, epoch, "complete")
    job = server.get(f"/api/jobs/{job_id}").body
    assert job["has_result"] is True and job["result"] == {"chars": 1234}


def test_an_idempotency_key_names_one_job(server: Server) -> None:
    body = {"kind": "report", "spec": {"day": "2030-01-02"}}
    first = server.post("/api/jobs", body, headers={"Idempotency-Key": "report-2030-01-02"})
    again = server.post("/api/jobs", body, headers={"Idempotency-Key": "report-2030-01-02"})
    other = server.post("/api/jobs", body, headers={"Idempotency-Key": "report-2030-01-03"})
    assert (first.status, again.status, other.status) == (201, 200, 201)
    assert first.body["id"] == again.body["id"] != other.body["id"]
    assert len(server.store.ids()) == 2
    both = server.post("/api/jobs", {**body, "id": "mine"}, headers={"Idempotency-Key": "x"})
    assert both.status == 422 and both.body["error"] == "invalid"


def test_list_filters_by_state_kind_and_pipeline(server: Server) -> None:
    a = server.post("/api/jobs", {"kind": "fetch", "pipeline": "nightly"}).body["id"]
    b = server.post("/api/jobs", {"kind": "report", "pipeline": "nightly", "stage": "sum", "after": [a]}).body["id"]
    c = server.post("/api/jobs", {"kind": "fetch", "id": "0-named-by-its-submitter"}).body["id"]
    server.post(f"/api/jobs/{c}/cancel")
    ids = lambda query: [j["id"] for j in server.get(f"/api/jobs{query}").body["jobs"]]  # noqa: E731
    assert ids("") == [c, b, a]  # newest first, whatever the ids
    assert ids("?kind=fetch") == [c, a]
    assert ids("?pipeline=nightly") == [b, a]
    assert ids("?state=cancelled") == [c]
    assert ids("?state=pending,cancelled&limit=2") == [c, b]
    assert server.get("/api/jobs?state=done").status == 422
    assert server.get("/api/jobs?limit=0").status == 422
    assert server.get("/api/jobs?colour=red").status == 422
    pipeline = server.get("/api/pipelines/nightly").body
    assert [(s["stage"], s["job"]["id"], s["after"]) for s in pipeline["stages"]] == [("fetch", a, []), ("sum", b, [a])]
    assert [p["name"] for p in server.get("/api/pipelines").body["pipelines"]] == ["nightly"]
    missing = server.get("/api/pipelines/weekly")
    assert missing.status == 404 and missing.body["error"] == "not_found"


def test_approve_lets_a_held_stage_run(server: Server) -> None:
    fetch = server.post("/api/jobs", {"kind": "fetch", "pipeline": "video"}).body["id"]
    publish = server.post("/api/jobs", {"kind": "publish", "pipeline": "video", "after": [fetch], "hold": True}).body[
        "id"
    ]
    server.jobctl("run", fetch, "--", "true")
    steps = {s["stage"]: s["step"] for s in server.get("/api/pipelines/video").body["stages"]}
    assert steps == {"fetch": "done", "publish": "held"}
    held = server.jobctl("run", "--next", "--", "true", check=False)
    assert held.returncode == 3, held.stderr  # nothing runnable: the held stage waits for its approval
    approved = server.post(f"/api/jobs/{publish}/approve", {"by": "alice"})
    assert approved.status == 200 and approved.body["intent"] == "run" and approved.body["step"] == "pending"
    assert server.store.load(publish).intent.by == "alice"  # type: ignore[union-attr]
    server.jobctl("run", "--next", "--", "true")
    assert poll(server, publish, lambda j: j["state"] == "complete")["step"] == "done"


def test_reject_cancels_a_held_stage(server: Server) -> None:
    job_id = server.post("/api/jobs", {"kind": "publish", "hold": True}).body["id"]
    reply = server.post(f"/api/jobs/{job_id}/cancel")
    assert reply.status == 200 and reply.body["state"] == "cancelled"
    assert server.post(f"/api/jobs/{job_id}/approve").body["error"] == "terminal"


def test_reject_records_who_and_why_and_refuses_a_reason_that_is_not_one_line(server: Server) -> None:
    job_id = server.post("/api/jobs", {"kind": "publish", "hold": True}).body["id"]
    before = server.store.load_bytes(job_id)
    for body, says in (
        ({"reason": "two\nlines"}, "not printable"),
        ({"reason": 7}, "reason must be a string"),
        ({"why": "x"}, "unknown field 'why'"),
    ):
        reply = server.post(f"/api/jobs/{job_id}/cancel", body)
        assert reply.status == 422 and says in reply.body["message"], reply.body
    assert server.store.load_bytes(job_id) == before  # nothing written
    reply = server.post(f"/api/jobs/{job_id}/cancel", {"by": "alice", "reason": "the voice is wrong"})
    assert reply.status == 200 and reply.body["state"] == "cancelled"
    assert reply.body["error"] == "cancelled at the request of alice: the voice is wrong"
    assert server.post(f"/api/jobs/{job_id}/approve", {"reason": "x"}).body["message"].startswith("unknown field")


def test_retry_resubmits_a_failed_stage_and_the_stages_it_cancelled(server: Server, tmp_path: Path) -> None:
    fetch = server.post("/api/jobs", {"kind": "fetch", "pipeline": "p"}).body["id"]
    report = server.post("/api/jobs", {"kind": "report", "pipeline": "p", "after": [fetch]}).body["id"]
    assert server.jobctl("run", fetch, "--", "false", check=False).returncode == 1
    server.jobctl("worker", "--drain", "--handler", "report=true")  # cancels what waits for a failed job
    assert server.get(f"/api/jobs/{report}").body["state"] == "cancelled"
    assert [s["step"] for s in server.get("/api/pipelines/p").body["stages"]] == ["failed", "cancelled"]
    reply = server.post(f"/api/jobs/{fetch}/retry")
    assert reply.status == 201, reply.body
    new_fetch, new_report = reply.body["jobs"]
    assert (new_fetch["retry_of"], new_report["retry_of"]) == (fetch, report)
    assert new_report["after"] == [new_fetch["id"]] and new_fetch["state"] == "pending"
    server.jobctl("run", new_fetch["id"], "--", "true")
    server.jobctl("run", new_report["id"], "--", "true")
    assert poll(server, new_report["id"], lambda j: j["state"] == "complete")["pipeline"] == {
        "name": "p",
        "stage": "report",
    }
    again = server.post(f"/api/jobs/{new_fetch['id']}/retry")
    assert again.status == 409 and again.body["error"] == "refused"  # a complete job is not retried


def read_event(stream: Any, wanted: str = "jobs") -> dict[str, Any]:
    """The next ``wanted`` event of a Server-Sent Events stream (comments, ``retry:`` and other events skipped)."""
    while True:
        name, event = next_event(stream)
        assert name in ("jobs", "status"), name
        if name == wanted:
            return event


def test_the_event_stream_delivers_a_change(server: Server) -> None:
    job_id = server.post("/api/jobs", {"kind": "render", "total": 10}).body["id"]
    with urllib.request.urlopen(server.url + "/api/events", timeout=30) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        first = read_event(stream)  # the present, first, whole
        assert [j["id"] for j in first["jobs"]] == [job_id] and first["full"] is True
        assert read_event(stream, "status") == {"state": "live", "since": None, "every": 15.0}
        epoch = server.store.claim(job_id, "w", 30).lease.epoch
        server.store.progress(job_id, epoch, 4)
        seen = read_event(stream)
        while seen["jobs"][0]["done"] != 4:  # the claim and the progress may come as one event or two
            seen = read_event(stream)
        assert [(j["id"], j["state"], j["owner"]) for j in seen["jobs"]] == [(job_id, "running", "w")]
        server.store.finish(job_id, epoch, "complete")
        assert read_event(stream)["jobs"][0]["step"] == "done"


def test_a_token_is_required_of_every_request_when_given(start: Callable[..., Server]) -> None:
    server = start(JOBCTL_TOKEN="s3cret-token")
    for path in ("/", "/api/jobs", "/api/events", "/page.js"):
        refused = server.get(path)
        assert refused.status == 401 and refused.body["error"] == "unauthorized", path
        assert refused.headers["www-authenticate"].startswith("Bearer")
    assert server.get("/api/jobs", token="wrong").status == 401
    assert server.post("/api/jobs", {"kind": "k"}).status == 401
    assert server.get("/api/jobs", token="s3cret-token").status == 200
    server.token = "s3cret-token"
    assert server.post("/api/jobs", {"kind": "k"}).status == 201
    # A browser opens /?token=... once: the token goes into a cookie and out of the address.
    request = urllib.request.Request(server.url + "/?token=s3cret-token")
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open(request, timeout=30)
    with caught.value as redirect:
        assert redirect.code == 303 and redirect.headers["location"] == "/"
        cookie = redirect.headers["set-cookie"]
    assert cookie.startswith("jobctl_token=s3cret-token;") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    page = server.get("/", token="", headers={"Cookie": "jobctl_token=s3cret-token"})
    assert page.status == 200 and b"page.js" in page.body
    assert server.get("/api/jobs?token=s3cret-token", token="").status == 401  # only the page takes it so


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_another_address_needs_a_token(tmp_path: Path) -> None:
    env = serve_env(tmp_path / "store")
    ran = subprocess.run(
        [sys.executable, "-m", "jobctl", "serve", "--listen", "0.0.0.0:0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2 and ran.stdout == ""
    assert "--listen 0.0.0.0:0 is not a loopback address: give --token or set JOBCTL_TOKEN" in ran.stderr


def test_without_a_token_only_loopback_host_names_are_answered(server: Server) -> None:
    port = server.url.rsplit(":", 1)[1]
    assert server.get("/api/jobs", headers={"Host": f"localhost:{port}"}).status == 200
    rebound = server.get("/api/jobs", headers={"Host": f"attacker.example:{port}"})
    assert rebound.status == 403 and rebound.body["error"] == "forbidden"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "the body is not JSON"),
        (b"[1, 2]", "the body must be a JSON object"),
        (b"", "the body must be a JSON object"),
        (b'{"spec": {}}', "kind is required"),
        (b'{"kind": "k", "colour": "red"}', "unknown field 'colour'"),
        (b'{"kind": "k", "total": -1}', "total must be a whole number"),
        (b'{"kind": "k", "retries": "3"}', "retries must be a whole number"),
        (b'{"kind": "k", "retry_intervals": [10, "x"]}', "retry_intervals must be a list of seconds"),
        (b'{"kind": "k", "not_before": "tomorrow"}', "not an RFC 3339 timestamp"),
        (b'{"kind": "k", "stage": "s"}', "stage needs pipeline"),
        (b'{"kind": "k", "id": "a/../../escape"}', "separator"),
        (b'{"kind": "k", "hold": "yes"}', "hold must be true or false"),
        (b'{"kind": "shell", "spec": {"argv": ["rm", "-rf", "/"]}}', "not taken over HTTP here"),
        (b'{"kind": "k", "spec": NaN}', "the body is not JSON"),
    ],
)
def test_a_bad_body_is_refused_422_and_nothing_is_written(refusing_server: Server, data: bytes, message: str) -> None:
    reply = refusing_server.call("POST", "/api/jobs", data=data)
    assert reply.status == 422, reply.body
    assert reply.body["error"] == "invalid" and message in reply.body["message"], reply.body
    assert refusing_server.store.ids() == []


def test_refusals_carry_their_verdict_and_status(server: Server) -> None:
    missing = server.get("/api/jobs/no-such-job")
    assert (missing.status, missing.body["error"]) == (404, "not_found")
    assert "no-such-job" in missing.body["message"]
    for action in ("approve", "cancel", "retry"):
        assert server.post(f"/api/jobs/no-such-job/{action}").status == 404
    job_id = server.post("/api/jobs", {"kind": "k"}).body["id"]
    pending = server.post(f"/api/jobs/{job_id}/retry")
    assert (pending.status, pending.body["error"]) == (409, "refused")
    wrong_type = server.call("POST", "/api/jobs", data=b'{"kind": "k"}', headers={"Content-Type": "text/plain"})
    assert (wrong_type.status, wrong_type.body["error"]) == (415, "invalid")
    nowhere = server.get("/api/nothing-here")
    assert (nowhere.status, nowhere.body["error"]) == (404, "not_found")
    assert server.call("DELETE", f"/api/jobs/{job_id}").status == 405


def test_an_oversized_body_is_refused_413_unread(server: Server) -> None:
    big = json.dumps({"kind": "k", "spec": {"blob": "x" * 300_000}}).encode()
    reply = server.call("POST", "/api/jobs", data=big)
    assert (reply.status, reply.body["error"]) == (413, "too_large")
    # Without a Content-Length (chunked), the body is cut off at the limit as it is read.
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = (
            "POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(head.encode())
        chunk = b"x" * 65536
        for piece in (chunk, chunk, chunk, chunk, b"one too many"):  # 10 bytes past the limit, then no end
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        answer = b""
        while b"\r\n\r\n" not in answer:  # the answer comes before the body ends
            got = sock.recv(65536)
            assert got, answer
            answer += got
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert server.store.ids() == []


def test_shell_jobs_only_with_allow_shell(start: Callable[..., Server], tmp_path: Path) -> None:
    server = start("--allow-shell")
    reply = server.post("/api/jobs", {"kind": "shell", "spec": {"argv": ["true"], "cwd": str(tmp_path)}})
    assert reply.status == 201, reply.body
    bad = server.post("/api/jobs", {"kind": "shell", "spec": {"argv": []}})
    assert bad.status == 422 and "argv" in bad.body["message"]


def test_serve_without_the_web_extra_says_what_to_install(tmp_path: Path) -> None:
    hide = "import sys; sys.modules['starlette'] = None; sys.argv = ['jobctl', 'serve']\n"
    hide += "from jobctl.cli import main; main()"
    ran = subprocess.run(
        [sys.executable, "-c", hide], env=serve_env(tmp_path / "s"), capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 10, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        "jobctl: refused: jobctl serve needs Starlette and uvicorn (starlette is not installed); "
        "install the web extra: pip install 'jobctl[web]'"
    ]


def test_a_taken_port_is_one_line(server: Server) -> None:
    taken = server.url.removeprefix("http://")
    ran = subprocess.run(
        [sys.executable, "-m", "jobctl", "serve", "--listen", taken],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert ran.stderr.splitlines() == [f"jobctl: cannot listen on {taken}: Address already in use"], ran.stderr


def test_the_command_line_does_not_import_the_web_stack(tmp_path: Path) -> None:
    dump = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        "sys.argv = ['jobctl', '--help']\n"
        "from jobctl.cli import main\n"
        "main()\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", dump], env=serve_env(tmp_path / "s"), capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0 and "serve" in ran.stdout  # --help lists every command, serve among them
    modules = json.loads(ran.stderr.strip().splitlines()[-1])
    assert "jobctl.cli.serve" in modules
    heavy = [m for m in modules if m.split(".")[0] in ("starlette", "uvicorn", "anyio") or m.startswith("jobctl.web")]
    assert heavy == []


def inotify_fds(pid: int) -> int:
    """How many inotify descriptors process ``pid`` holds (one a change stream's watch, on Linux)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd) == "anon_inode:inotify"
        except FileNotFoundError:  # closed between the listing and the look: not a watch any more
            continue
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="no /proc to count descriptors in")
def test_a_stream_reader_that_leaves_frees_its_watch(server: Server) -> None:
    server.post("/api/jobs", {"kind": "k"})
    before = inotify_fds(server.proc.pid)
    with urllib.request.urlopen(server.url + "/api/events", timeout=30) as stream:
        read_event(stream)
        assert inotify_fds(server.proc.pid) == before + 1  # the stream's own watch
    deadline = time.monotonic() + 30
    while inotify_fds(server.proc.pid) != before:  # the reader left: its watch thread ends and lets go
        assert time.monotonic() < deadline, "the watch of a closed stream was never released"
        time.sleep(0.05)
    assert server.get("/api/jobs").status == 200


def test_a_server_stopped_with_a_stream_open_ends_it_at_once_and_quietly(tmp_path: Path) -> None:
    """A page left open does not hold a stopping server for its graceful timeout, nor make it print a traceback."""
    import http.client

    from webtools import start_server, stop

    from jobctl import FileStore, Record

    FileStore(tmp_path / "store").submit(Record(kind="k", spec={}))
    proc, url = start_server(tmp_path / "store")
    try:
        with urllib.request.urlopen(url + "/api/events", timeout=30) as stream:
            assert read_event(stream)["full"] is True
            began = time.monotonic()
            err = stop(proc)  # as a service manager stops it, with a page still open
            took = time.monotonic() - began
            try:
                stream.read()
                whole = True  # the server ended the stream: the chunked body is complete
            except http.client.IncompleteRead:
                whole = False  # cut off when the server gave up waiting for it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -15, err
    assert "Traceback" not in err and "ERROR" not in err, err
    assert whole and took < 1.5, f"the stop waited {took:.1f} s for the stream, which was cut off: {err}"
