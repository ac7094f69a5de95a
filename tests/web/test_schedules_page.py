"""The page shows the store's schedules live, in a real headless chromium; the change stream that carries them.

Adding, firing or removing a schedule writes no job, so nothing but the
change stream's own read of the schedules can bring it to an open page:
the tests see each change arrive without a new full event.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from devtools import Browser
from webtools import Server, next_event

from jobctl import timetable
from jobctl.record import format_time

pytestmark = pytest.mark.timeout(120)

ROW_JS = "[...document.querySelectorAll('#schedules tbody tr')].map(r => r.innerText.split('\\t').join('|')).join('/')"


def test_the_page_shows_schedules_live_with_their_next_slot(start: Callable[..., Server], chromium: Browser) -> None:
    server = start()
    browser = chromium
    browser.open(server.url + "/")
    browser.wait_for("document.body.dataset.schedules === '0'", "the page says there are no schedules")
    assert "No schedules." in str(browser.evaluate(ROW_JS))
    sched = timetable.add(server.store, "nightly <b>", kind="report", cron="30 2 * * *")
    browser.wait_for("document.body.dataset.schedules === '1'", "the added schedule, with no job written")
    text = str(browser.evaluate(ROW_JS))
    after = sched.next(server.store.now())
    assert after is not None
    assert "nightly <b>" in text and "cron 30 2 * * *" in text and "report" in text  # text, never HTML
    assert after.strftime("%Y-%m-%dT%H:%M:%S") in text
    slot = sched.latest(after)
    assert slot is not None and server.store.mark_fired(sched.name, sched.created_at, slot)
    fired = format_time(slot)[:19]
    browser.wait_for(f"document.body.innerText.includes({fired!r})", "the slot fired, in its row")
    assert timetable.remove(server.store, sched.name)
    browser.wait_for("document.body.dataset.schedules === '0'", "the removed schedule gone")
    assert browser.evaluate("document.body.dataset.loaded") == "1"  # each change came as a change, not a reload


def read_jobs_event(stream: Any) -> dict[str, Any]:
    while True:
        name, event = next_event(stream)
        if name == "jobs":
            return event


def test_the_stream_sends_every_schedule_in_the_full_event_and_again_when_one_changes(server: Server) -> None:
    timetable.add(server.store, "beat", kind="ping", every="5m")
    with urllib.request.urlopen(server.url + "/api/events", timeout=30) as stream:
        full = read_jobs_event(stream)
        assert full["full"] is True
        assert [(s["name"], s["when"], s["fired"]) for s in full["schedules"]] == [("beat", "every 5m", None)]
        assert full["schedules"][0]["next"] is not None
        timetable.add(server.store, "nightly", kind="report", cron="0 3 * * *")
        changed = read_jobs_event(stream)
        assert "full" not in changed and changed["jobs"] == []
        assert [s["name"] for s in changed["schedules"]] == ["beat", "nightly"]  # all of them, to replace
        timetable.remove(server.store, "beat")
        changed = read_jobs_event(stream)
        assert [s["name"] for s in changed["schedules"]] == ["nightly"]
