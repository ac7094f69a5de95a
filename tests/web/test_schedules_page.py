"""The page lists the store's schedules with their next slots, in a real headless chromium."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from devtools import Browser
from webtools import Server

from jobctl import timetable

pytestmark = pytest.mark.timeout(120)

ROW_JS = "[...document.querySelectorAll('#schedules tbody tr')].map(r => r.innerText.split('\\t').join('|')).join('/')"


def test_the_page_lists_schedules_with_their_next_slot(start: Callable[..., Server], chromium: Browser) -> None:
    server = start()
    sched = timetable.add(server.store, "nightly <b>", kind="report", cron="30 2 * * *")
    browser = chromium
    browser.open(server.url + "/")
    browser.wait_for("document.body.dataset.schedules === '1'", "the schedules read")
    text = str(browser.evaluate(ROW_JS))
    after = sched.next(server.store.now())
    assert after is not None
    assert "nightly <b>" in text and "cron 30 2 * * *" in text and "report" in text  # text, never HTML
    assert after.strftime("%Y-%m-%dT%H:%M:%S") in text
