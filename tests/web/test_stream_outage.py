"""A database away for longer than anybody's patience: the stream and the page say they are stale, then catch up.

A real ``jobctl serve`` on a PostgreSQL store, the session's throwaway
server stopped (``pg_ctl stop -m fast``) for longer than a store waits for
its server (``JOBCTL_PG_RECONNECT_WAIT``, here 8 s for the server and the
test's own store; 30 s by default), then started again. While it is
away no job can change; once it is back the jobs are finished, by the test's
store and by ``jobctl run`` processes, and the stream and the page must show
the true states, each job once. A server named by ``JOBCTL_TEST_PG_URL`` is
somebody else's: these tests skip on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devtools import Browser
from webtools import Server, next_event, serve_env, start_server, stop

from jobctl import Record
from jobctl.schedule import plan

pytestmark = pytest.mark.timeout(240)

#: The patience of every store here (JOBCTL_PG_RECONNECT_WAIT, the server's and the test's): 30 s by default.
PATIENCE = "8"
#: Longer than the stores' patience, so that the server's reads give up and the stream says so.
AWAY_SECONDS = 12.0


class Served(Server):
    """A ``jobctl serve`` on a PostgreSQL store; :meth:`end` stops it and gives its stderr."""

    def end(self) -> str:
        if self.proc.returncode is None:
            self.err = stop(self.proc)
        return self.err

    err = ""


@pytest.fixture
def served(pg_server: Any, pg_url: str, tmp_path: Path) -> Iterator[Served]:
    if not pg_server.restartable:
        pytest.skip("JOBCTL_TEST_PG_URL names a server these tests did not start; they do not restart it")
    from jobctl.store import postgres

    assert float(PATIENCE) < AWAY_SECONDS
    postgres.init(pg_url)
    store = postgres.PostgresStore(pg_url, reconnect_wait=float(PATIENCE))
    root = tmp_path / "no-directory-store"
    patience = {postgres.RECONNECT_WAIT_ENV: PATIENCE}
    proc, url = start_server(root, JOB_STORE=pg_url, **patience)
    server = Served(proc, url, store, serve_env(root, JOB_STORE=pg_url, **patience))  # type: ignore[arg-type]
    try:
        yield server
    finally:
        err = server.end()
        store.close()
        assert "Traceback" not in err, err


def submit(server: Server, kind: str, pipeline: str | None = None, after: tuple[str, ...] = ()) -> str:
    rec = Record(id="", kind=kind, spec={})
    if pipeline is not None:
        plan(rec, pipeline=pipeline, after=after)
    return server.store.submit(rec)


def outage_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "change stream" in line]


def assert_one_outage_said(err: str) -> None:
    lines = outage_lines(err)
    assert len(lines) == 2, err
    assert lines[0].startswith("jobctl serve: the change stream cannot read the store: "), lines
    assert f"no connection for {PATIENCE} s" in lines[0] and "trying again" in lines[0], lines
    assert lines[1].startswith("jobctl serve: the change stream reads the store again (it could not for "), lines


class Events:
    """A reader of ``GET /api/events``: ``(name, data)`` one at a time."""

    def __init__(self, url: str) -> None:
        self.stream = urllib.request.urlopen(url + "/api/events", timeout=60)  # status events come every 15 s

    def next(self) -> tuple[str, dict[str, Any]]:
        return next_event(self.stream)

    def until(self, name: str, check: Any = lambda data: True) -> dict[str, Any]:
        while True:
            got, data = self.next()
            if got == name and check(data):
                return data


def test_the_stream_says_stale_while_the_database_is_away_then_sends_the_truth(served: Served, pg_server: Any) -> None:
    job = submit(served, "fetch", "nightly")
    epoch = served.store.claim(job, "worker-1", 300).lease.epoch
    events = Events(served.url)
    with events.stream:
        present = events.until("jobs")
        assert present["full"] and [(j["id"], j["step"]) for j in present["jobs"]] == [(job, "running")]
        events.until("status", lambda s: s["state"] == "live")
        stale: list[dict[str, Any]] = []

        def while_down() -> None:
            went = time.monotonic()
            stale.append(events.until("status", lambda s: s["state"] == "stale"))
            stale.append({"after": time.monotonic() - went})
            time.sleep(max(0.0, AWAY_SECONDS - (time.monotonic() - went)))

        pg_server.restart(while_down)
        # Said within seconds, before any read gave up.
        assert stale[0]["since"] is not None and stale[1]["after"] < float(PATIENCE)
        again = events.until("jobs")
        assert again["full"], again  # after an outage, the whole present again
        events.until("status", lambda s: s["state"] == "live")
        served.store.finish(job, epoch, "complete")
        done = events.until("jobs")
        assert [(j["id"], j["step"]) for j in done["jobs"]] == [(job, "done")]
        assert [[s["step"] for s in p["stages"]] for p in done["pipelines"]] == [["done"]]
    assert_one_outage_said(served.end())


LIVE_JS = "document.getElementById('live').dataset.state"
#: The page's table as ``id=step`` words, in its order, and how many cards each job has in the pipelines.
TABLE_JS = "[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.job + '=' + r.dataset.step).join(' ')"
CARDS_JS = "[...document.querySelectorAll('#pipelines .step')].map(s => s.dataset.job + '=' + s.dataset.step).join(' ')"


def expected_table(server: Server) -> str:
    jobs = server.get("/api/jobs").body["jobs"]
    return " ".join(f"{j['id']}={j['step']}" for j in jobs)


def expected_cards(server: Server) -> str:
    pipelines = server.get("/api/pipelines").body["pipelines"]
    return " ".join(f"{s['job']['id']}={s['step']}" for p in pipelines for s in p["stages"])


def test_the_page_says_stale_while_the_database_is_away_then_shows_the_truth(
    served: Served, pg_server: Any, chromium: Browser
) -> None:
    fetch = submit(served, "fetch", "nightly")
    report = submit(served, "report", "nightly", (fetch,))
    alone = submit(served, "cleanup")
    epoch = served.store.claim(fetch, "worker-1", 300).lease.epoch
    chromium.open(served.url + "/")
    chromium.wait_for(f"{LIVE_JS} === 'live'", "the stream live")
    chromium.wait_for(f"({CARDS_JS}) === {json.dumps(expected_cards(served))}", "the pipeline as the API has it")
    assert chromium.evaluate(f"document.querySelector('.step[data-job=\"{fetch}\"]').dataset.step") == "running"
    said: list[str] = []

    def while_down() -> None:
        went = time.monotonic()
        said.append(chromium.wait_for(f"{LIVE_JS} === 'stale' && document.getElementById('live').textContent", "stale"))
        said.append(f"{time.monotonic() - went:.1f}")
        time.sleep(max(0.0, AWAY_SECONDS - (time.monotonic() - went)))
        # Past every patience, it still says so (it never went back to "live" on its own).
        said.append(chromium.evaluate("document.getElementById('live').textContent"))
        assert chromium.evaluate("document.body.dataset.stale")  # the jobs are dimmed: what they say may be behind

    pg_server.restart(while_down)
    assert said[0].startswith("reconnecting… not up to date since "), said
    assert float(said[1]) < float(PATIENCE), said
    assert said[2] == said[0], said
    # Back: the jobs change, and the page shows what the API says, each job once.
    served.store.finish(fetch, epoch, "complete")
    for _ in range(2):
        served.jobctl("run", "--next", "--", "true")
    assert {served.store.load(j).state for j in (fetch, report, alone)} == {"complete"}
    chromium.wait_for(f"{LIVE_JS} === 'live'", "the stream live again")
    table, cards = expected_table(served), expected_cards(served)
    chromium.wait_for(f"({TABLE_JS}) === {json.dumps(table)}", f"the jobs as the API has them: {table}")
    chromium.wait_for(f"({CARDS_JS}) === {json.dumps(cards)}", f"the pipeline as the API has it: {cards}")
    assert table.count("=done") == 3 and cards == f"{fetch}=done {report}=done"
    assert "No pipelines yet." not in chromium.evaluate("document.getElementById('pipelines').textContent")
    assert chromium.evaluate("document.getElementById('live').textContent") == "live"
    assert_one_outage_said(served.end())


def wait_ended(server: Server, ids: list[str], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while any(server.store.load(j).state not in ("complete", "failed", "cancelled") for j in ids):
        assert time.monotonic() < deadline, "the jobs never ended"
        time.sleep(0.1)


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_an_approve_cancel_race_shows_each_job_once_and_every_pipeline(
    backend: str, request: pytest.FixtureRequest, chromium: Browser
) -> None:
    server = request.getfixturevalue("start")() if backend == "file" else request.getfixturevalue("served")
    # Eight pipelines, each a first stage and a held second one.
    stages = []
    for n in range(8):
        first = submit(server, "fetch", f"p{n}")
        rec = Record(id="", kind="publish", spec={})
        plan(rec, pipeline=f"p{n}", after=(first,), hold=True)
        stages.append((first, server.store.submit(rec)))
    chromium.open(server.url + "/")
    chromium.wait_for(f"{LIVE_JS} === 'live'", "the stream live")
    chromium.wait_for("document.querySelectorAll('.step button[data-action=approve]').length === 8", "eight gates")
    # At once: the page approves every gate, the API cancels every other one, and workers run what may run.
    workers = [
        subprocess.Popen(
            ["sh", "-c", 'for i in $(seq 12); do "$0" -m jobctl run --next -- true; done', sys.executable],
            env=server.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    chromium.evaluate("document.querySelectorAll('.step button[data-action=approve]').forEach(b => b.click())")
    for _first, held in stages[::2]:
        server.post(f"/api/jobs/{held}/cancel")
    for worker in workers:
        worker.wait(120)
    for first, held in stages:  # whatever is left runnable, run
        if server.store.load(held).state == "pending" and server.store.load(held).want != "pause":
            server.jobctl("run", held, "--", "true")
        if server.store.load(first).state == "pending":
            server.jobctl("run", first, "--", "true")
    left = [j for pair in stages for j in pair if server.store.load(j).state == "pending"]
    for job_id in left:  # a gate the cancel reached first stays held: reject it
        server.post(f"/api/jobs/{job_id}/cancel")
    wait_ended(server, [j for pair in stages for j in pair])
    table, cards = expected_table(server), expected_cards(server)
    chromium.wait_for(f"({TABLE_JS}) === {json.dumps(table)}", f"the jobs as the API has them: {table}")
    chromium.wait_for(f"({CARDS_JS}) === {json.dumps(cards)}", f"the pipelines as the API has them: {cards}")
    shown = chromium.evaluate("[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.job)")
    assert len(shown) == len(set(shown)) == 16
    assert chromium.evaluate("document.querySelectorAll('#pipelines .pipeline').length") == 8
    assert chromium.evaluate(f"{LIVE_JS}") == "live"
    if backend == "postgres":
        assert outage_lines(server.end()) == []
