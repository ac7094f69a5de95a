"""``unhandled`` in the HTTP API's job object and on the page: what running workers said they handle.

Over a real ``jobctl serve`` and a real ``jobctl worker`` on each store; the
page in the real browser, where the note comes and goes with the worker
while no job is written (the change stream reads the words again). An
answer about many jobs reads the words once, not once a job.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
import uvicorn
from devtools import Browser
from webtools import Server

from jobctl import FileStore, Record
from jobctl.schedule import plan
from jobctl.store.base import Announcements
from jobctl.web import create_app
from jobctl.web.server import bind

pytestmark = pytest.mark.timeout(180)


def submit(store: Any, kind: str, pipeline: str = "", hold: bool = False) -> str:
    rec = Record(kind=kind, spec={})
    plan(rec, pipeline=pipeline or None, hold=hold, by="ops")
    return str(store.submit(rec))


@contextmanager
def worker(server: Server, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``jobctl worker`` on the server's store, stopped with SIGTERM (its clean stop) on the way out."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "worker", "--poll-interval", "0.1", "--ttl", "3", *flags],
        env=server.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def unhandled(server: Server, job_id: str) -> Any:
    reply = server.get(f"/api/jobs/{job_id}")
    assert reply.status == 200, reply.body
    return reply.body["unhandled"]


def test_the_job_object_says_when_no_running_worker_handles_a_pending_job(served: Callable[..., Server]) -> None:
    server = served()
    store = server.store
    render = submit(store, "render", "nightly")
    held = submit(store, "fetch", hold=True)
    assert (unhandled(server, render), unhandled(server, held)) == (None, None)  # no word yet: nothing said

    with worker(server, "--handler", "fetch=true") as proc:
        deadline_reads = 0
        while unhandled(server, render) is None:  # the worker's first word comes with its first loop
            deadline_reads += 1
            assert deadline_reads < 300 and proc.poll() is None
            threading.Event().wait(0.05)
        assert (unhandled(server, render), unhandled(server, held)) == (True, False)
        listed = {job["id"]: job["unhandled"] for job in server.get("/api/jobs").body["jobs"]}
        assert listed == {render: True, held: False}
        stage = server.get("/api/pipelines/nightly").body["stages"][0]
        assert (stage["job"]["id"], stage["job"]["unhandled"]) == (render, True)
        made = server.post("/api/jobs", {"kind": "encode"})
        assert made.status == 201 and made.body["unhandled"] is True  # said as the job is submitted
        approved = server.post(f"/api/jobs/{held}/approve")
        assert approved.status == 200 and approved.body["unhandled"] is False
    assert unhandled(server, render) is None  # the worker stopped: it took its word back


class Counting(FileStore):
    """A directory store that counts the reads of the workers' words."""

    reads = 0

    def announcements(self) -> Announcements:
        Counting.reads += 1
        return super().announcements()


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[tuple[Counting, str]]:
    store = Counting(tmp_path / "store")
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(create_app(store, None), lifespan="off", log_level="warning", timeout_graceful_shutdown=1)
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not served.started:
        threading.Event().wait(0.01)
    yield store, f"http://127.0.0.1:{sock.getsockname()[1]}"
    served.should_exit = True
    thread.join(10)
    sock.close()


def test_an_answer_about_many_jobs_reads_the_words_once(in_process: tuple[Counting, str]) -> None:
    store, url = in_process
    for n in range(120):
        submit(store, "render" if n % 2 else "fetch", f"p{n % 3}")
    store.announce("w@h:1", ["fetch"], 60)

    def get(path: str) -> Any:
        with urlopen(url + path, timeout=30) as response:
            return json.loads(response.read())

    Counting.reads = 0
    jobs = get("/api/jobs?limit=200")["jobs"]
    assert Counting.reads == 1
    assert sorted({(job["kind"], job["unhandled"]) for job in jobs}) == [("fetch", False), ("render", True)]
    Counting.reads = 0
    pipelines = get("/api/pipelines")["pipelines"]
    assert Counting.reads == 1 and len(pipelines) == 3
    Counting.reads = 0
    get(f"/api/pipelines/{pipelines[0]['name']}")
    assert Counting.reads == 1


def test_the_page_notes_a_pending_job_no_running_worker_handles(
    start: Callable[..., Server], chromium: Browser
) -> None:
    server = start()
    store = server.store
    render = submit(store, "render", "nightly")
    held = submit(store, "fetch", "nightly", hold=True)

    chromium.open(server.url + "/")
    card = "document.querySelector('.step[data-job=\"%s\"]')"
    row = "document.querySelector('#jobs tr[data-job=\"%s\"]')"
    chromium.wait_for(f"{card % render} && {row % render} && 1", "the cards")
    assert chromium.evaluate("document.querySelectorAll('[data-unhandled]').length") == 0  # no word: no note

    with worker(server, "--handler", "fetch=true"):
        # No job is written: the note comes from the stream reading the words again.
        chromium.wait_for(f"{card % render}.querySelector('[data-unhandled]') && 1", "the note on the card")
        note = chromium.evaluate(f"{card % render}.querySelector('[data-unhandled]').textContent")
        assert note == "no running worker handles kind render"
        assert chromium.evaluate(f"{row % render}.querySelector('[data-unhandled]').textContent") == note
        assert chromium.evaluate(f"{card % held}.querySelector('[data-unhandled]')") is None  # fetch is handled
        assert chromium.evaluate(f"{row % held}.querySelector('[data-unhandled]')") is None
    chromium.wait_for("document.querySelectorAll('[data-unhandled]').length === 0", "the note to go with the worker")
