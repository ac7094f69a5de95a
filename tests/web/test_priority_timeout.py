"""Priorities and timeouts over HTTP and on the page.

``POST /api/jobs`` takes ``priority`` (a whole number, -1000 to 1000) and
``timeout`` (seconds, or a duration such as ``"15m"``) as ``jobctl submit``
takes ``--priority`` and ``--timeout``, and refuses anything else 422 with
nothing written; a job's view carries both, and the page shows them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from devtools import Browser
from webtools import Server

from jobctl.priority import PRIORITY
from jobctl.timeout import TIMEOUT

pytestmark = pytest.mark.timeout(180)


def test_a_submission_carries_its_priority_and_timeout(server: Server) -> None:
    reply = server.post("/api/jobs", {"kind": "render", "priority": -7, "timeout": "1h"})
    assert reply.status == 201, reply.body
    job = reply.body
    assert (job["priority"], job["timeout"], job["timeout_text"]) == (-7, 3600, "1h")
    rec = server.store.load(job["id"])
    assert (rec.extensions[PRIORITY], rec.extensions[TIMEOUT]) == (-7, 3600)
    seconds = server.post("/api/jobs", {"kind": "render", "timeout": 90}).body
    assert (seconds["priority"], seconds["timeout"], seconds["timeout_text"]) == (0, 90, "1m30s")
    assert PRIORITY not in server.store.load(seconds["id"]).extensions  # 0 is never written
    plain = server.get(f"/api/jobs/{server.post('/api/jobs', {'kind': 'render'}).body['id']}").body
    assert (plain["priority"], plain["timeout"], plain["timeout_text"]) == (0, None, None)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"kind": "k", "priority": 1001}', "priority must be a whole number (-1000 <= priority <= 1000), not 1001"),
        (b'{"kind": "k", "priority": -1001}', "priority must be a whole number"),
        (b'{"kind": "k", "priority": 2.5}', "priority must be a whole number"),
        (b'{"kind": "k", "priority": "9"}', "priority must be a whole number"),
        (b'{"kind": "k", "priority": true}', "priority must be a whole number"),
        (b'{"kind": "k", "timeout": 0}', "timeout must be a number of seconds (0 < timeout <= 31536000), not 0"),
        (b'{"kind": "k", "timeout": -5}', "timeout must be a number of seconds"),
        (b'{"kind": "k", "timeout": "0s"}', "timeout: '0s' is out of range"),
        (b'{"kind": "k", "timeout": "soon"}', "timeout: 'soon' is not a duration (90s, 15m, 2h, 7d)"),
        (b'{"kind": "k", "timeout": "-5s"}', "timeout: '-5s' is not a duration"),
        (b'{"kind": "k", "timeout": 1e12}', "timeout must be a number of seconds"),
        (b'{"kind": "k", "timeout": [90]}', "timeout must be a number of seconds"),
    ],
)
def test_a_bad_priority_or_timeout_is_refused_422_and_nothing_is_written(
    refusing_server: Server, data: bytes, message: str
) -> None:
    reply = refusing_server.call("POST", "/api/jobs", data=data)
    assert reply.status == 422, reply.body
    assert reply.body["error"] == "invalid" and message in reply.body["message"], reply.body
    assert refusing_server.store.ids() == []


def test_the_page_shows_a_jobs_priority_and_timeout(start: Callable[..., Server], chromium: Browser) -> None:
    server = start()
    ranked = server.post("/api/jobs", {"kind": "render", "priority": 5, "timeout": "15m"}).body["id"]
    plain = server.post("/api/jobs", {"kind": "render"}).body["id"]
    staged = server.post("/api/jobs", {"kind": "fetch", "pipeline": "nightly", "priority": -2}).body["id"]
    chromium.open(server.url + "/")
    chromium.wait_for("document.body.dataset.loaded", "its first load")
    row = f"document.querySelector('#jobs tr[data-job=\"{ranked}\"] .limits')"
    chromium.wait_for(f"{row} !== null", "the ranked job's row")
    assert chromium.evaluate(f"{row}.textContent") == "priority 5, timeout 15m"
    assert chromium.evaluate(f"{row}.dataset.priority") == "5"
    assert chromium.evaluate(f"document.querySelector('#jobs tr[data-job=\"{plain}\"] .limits')") is None
    step = f"document.querySelector('.step[data-job=\"{staged}\"] .limits')"
    chromium.wait_for(f"{step} !== null", "the pipeline stage")
    assert chromium.evaluate(f"{step}.textContent") == "priority -2"
