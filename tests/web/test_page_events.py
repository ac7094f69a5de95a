"""The page's own handling of the stream's events, run in the real browser: by key, whatever comes twice or late.

The page's stream is closed first, and the events are handed to its
``applyEvent`` and ``draw`` as the stream would hand them, repeated and
interleaved with full events, so each case is exact. The same page with a
real stream is in test_page.py and test_stream_outage.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from devtools import Browser
from webtools import Server

from jobctl import Record
from jobctl.schedule import plan

pytestmark = pytest.mark.timeout(120)

TABLE_JS = "[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.job + '=' + r.dataset.step)"
CARDS_JS = (
    "[...document.querySelectorAll('#pipelines .pipeline')].map(p => p.dataset.pipeline + ':'"
    " + [...p.querySelectorAll('.step')].map(s => s.dataset.job + '=' + s.dataset.step))"
)


def submit(server: Server, kind: str, pipeline: str | None = None, after: tuple[str, ...] = ()) -> str:
    rec = Record(id="", kind=kind, spec={})
    if pipeline is not None:
        plan(rec, pipeline=pipeline, after=after)
    return server.store.submit(rec)


def test_events_apply_by_key_whatever_their_repetition_or_order(
    start: Callable[..., Server], chromium: Browser
) -> None:
    server = start()
    fetch = submit(server, "fetch", "nightly")
    report = submit(server, "report", "nightly", (fetch,))
    alone = submit(server, "cleanup")
    chromium.open(server.url + "/")
    chromium.wait_for("document.getElementById('live').dataset.state === 'live'", "the stream live")
    chromium.wait_for("document.querySelectorAll('#jobs tbody tr').length === 3", "three jobs")
    chromium.evaluate("stream.close(), stream = null")  # from here on, only the events below

    jobs = {j["id"]: j for j in server.get("/api/jobs").body["jobs"]}
    [nightly] = server.get("/api/pipelines").body["pipelines"]

    def done(job_id: str) -> dict[str, Any]:
        return {**jobs[job_id], "state": "complete", "step": "done"}

    moved = copy.deepcopy(nightly)
    moved["stages"][0]["step"] = "done"
    moved["stages"][0]["job"] = done(fetch)

    def give(*events: dict[str, Any]) -> tuple[list[str], list[str]]:
        for event in events:
            chromium.evaluate(f"applyEvent({json.dumps(event)})")
        chromium.evaluate("draw()")
        return chromium.evaluate(TABLE_JS), chromium.evaluate(CARDS_JS)

    newest_first = [alone, report, fetch]
    delta = {"jobs": [done(fetch)], "removed": [], "pipelines": [moved], "removed_pipelines": []}
    table, cards = give(delta, delta, delta)  # the same change three times
    assert table == [f"{alone}=pending", f"{report}=pending", f"{fetch}=done"]
    assert cards == [f"nightly:{fetch}=done,{report}=pending"]

    gone = {"jobs": [], "removed": [alone], "pipelines": [], "removed_pipelines": []}
    table, cards = give(gone, gone, {"jobs": [], "removed": [alone, "0-nothing"]})  # a removal again, and of nothing
    assert table == [f"{report}=pending", f"{fetch}=done"] and len(cards) == 1

    # A full event replaces: what it does not hold is gone, whatever came before it.
    ghost = {**jobs[alone], "id": "9999999999999-" + "0" * 20, "pipeline": {"name": "ghostly", "stage": "x"}}
    ghostly = {**copy.deepcopy(nightly), "name": "ghostly"}
    table, cards = give({"jobs": [ghost], "removed": [], "pipelines": [ghostly], "removed_pipelines": []})
    assert table[0] == f"{ghost['id']}=pending" and sorted(c.split(":")[0] for c in cards) == ["ghostly", "nightly"]
    full = {"full": True, "jobs": [jobs[j] for j in newest_first], "pipelines": [nightly]}
    table, cards = give(delta, full)
    assert table == [f"{j}=pending" for j in newest_first]
    assert cards == [f"nightly:{fetch}=pending,{report}=pending"]
    table, cards = give(full, full, delta)  # twice, then a change after it
    assert table == [f"{alone}=pending", f"{report}=pending", f"{fetch}=done"]
    assert cards == [f"nightly:{fetch}=done,{report}=pending"]

    # A pipeline removed goes, and the "No pipelines yet." line shows only when none is left.
    table, cards = give({"jobs": [], "removed": [fetch, report], "pipelines": [], "removed_pipelines": ["nightly"]})
    assert table == [f"{alone}=pending"] and cards == []
    assert "No pipelines yet." in chromium.evaluate("document.getElementById('pipelines').textContent")
    table, cards = give(full)
    assert len(table) == len(set(table)) == 3 and len(cards) == 1
    assert "No pipelines yet." not in chromium.evaluate("document.getElementById('pipelines').textContent")
