"""The change stream in one process: it outlives a store that goes away, says so once, and re-sends the present.

The store here is a directory store that can be taken away (:class:`Away`):
while it is, every read raises ``Refused`` as a PostgreSQL store does once
its server has been away past its patience, and writes still land, as
another host's would, so the stream has something to catch up on. The same
with a real server and a real ``jobctl serve`` is in test_stream_outage.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobctl import FileStore, Record
from jobctl.errors import Refused
from jobctl.schedule import plan
from jobctl.web.events import _TICK, Feed, _Pump

pytestmark = pytest.mark.timeout(120)


class Away:
    """A directory store whose reads can be refused (``down``); counts the refused reads."""

    def __init__(self, inner: FileStore) -> None:
        self.inner = inner
        self.down = False
        self.refused = 0

    def _check(self) -> None:
        if self.down:
            self.refused += 1
            raise Refused("postgresql://db/jobs: connection refused (no connection for 30 s)")

    def notices(self, **kw: Any) -> Any:
        return self.inner.notices(**kw)  # inotify: a write while away is noticed, and its load refused

    def list(self) -> Any:
        self._check()
        return self.inner.list()

    def load(self, job_id: str) -> Record:
        self._check()
        return self.inner.load(job_id)

    def announcements(self) -> Any:
        self._check()
        return self.inner.announcements()

    def schedules(self, unreadable: Any = None) -> Any:
        self._check()
        return self.inner.schedules(unreadable)

    def now(self) -> Any:
        return self.inner.now()  # a PostgreSQL store's clock answers from its last reading for a while


class Reader:
    """The events of one subscription, parsed: ``(name, data)``."""

    def __init__(self, stream: AsyncIterator[str]) -> None:
        self.stream = stream
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def next(self, wanted: str, within: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no {wanted} event within {within} s; seen {self.seen[-5:]}"
            text = await asyncio.wait_for(self.stream.__anext__(), left)
            if text.startswith(("retry:", ":")):
                continue
            head, data = text.split("\n", 1)
            name = head.removeprefix("event: ")
            event = json.loads(data.removeprefix("data: "))
            self.seen.append((name, event))
            if name == wanted:
                return event

    async def status(self, state: str, within: float = 30.0) -> dict[str, Any]:
        while True:
            got = await self.next("status", within)
            if got["state"] == state:
                return got


def submit(store: FileStore, kind: str, pipeline: str | None = None) -> str:
    rec = Record(id="", kind=kind, spec={})
    if pipeline is not None:
        plan(rec, pipeline=pipeline)
    return store.submit(rec)


def finish(store: FileStore, job_id: str) -> None:
    epoch = store.claim(job_id, "w", 60).lease.epoch
    store.finish(job_id, epoch, "complete")


async def wait_until(what: str, check: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("slow_end", [False, True], ids=["as-it-comes", "slow-end-of-outage"])
def test_the_stream_outlives_outages_says_each_once_and_sends_the_present_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow_end: bool
) -> None:
    if slow_end:
        # The read that ends an outage found changes: it is published, and the outage is marked over after.
        # A reader that woke in between was once sent those changes as a part, before the full event.
        ended = _Pump._succeeded

        def late(pump: _Pump) -> None:
            if pump._failure is not None:
                time.sleep(1.5 * _TICK)
            ended(pump)

        monkeypatch.setattr(_Pump, "_succeeded", late)
    inner = FileStore(tmp_path / "store", create=True)
    store = Away(inner)
    first = submit(inner, "fetch", "report")
    lines: list[str] = []

    async def scenario() -> None:
        feed = Feed(store, log=lines.append, stale_after=0.5)  # type: ignore[arg-type]  # a Store for what it uses
        events = feed.subscribe().events()
        reader = Reader(events)
        present = await reader.next("jobs")
        assert present["full"] is True and [j["id"] for j in present["jobs"]] == [first]
        assert [p["name"] for p in present["pipelines"]] == ["report"]
        assert (await reader.status("live"))["since"] is None

        for outage in (1, 2):
            before = store.refused
            store.down = True
            # Changes land meanwhile (another host's writes): the stream hears of them, and cannot read them.
            if outage == 1:
                finish(inner, first)
            else:
                submit(inner, "fetch", "report")
            stale = await reader.status("stale")
            assert stale["since"] is not None  # as of the last read that succeeded
            await wait_until("the stream tried again and again", lambda: store.refused >= before + 3)  # noqa: B023
            assert sum("cannot read" in line for line in lines) == outage  # said once, however many reads failed
            assert sum("reads the store again" in line for line in lines) == outage - 1
            store.down = False
            again = await reader.next("jobs")
            assert again["full"] is True  # after an outage, the whole present again
            assert await reader.status("live")
            for name, data in reader.seen:
                assert name != "jobs" or not data.get("removed"), data  # nothing was taken for gone
            shown = {j["id"]: j["state"] for j in again["jobs"]}
            assert shown == {r.id: r.state for r in inner.list()}
            assert len(again["pipelines"]) == 1 and len(again["pipelines"][0]["stages"]) == outage
            reader.seen.clear()
        await events.aclose()  # type: ignore[attr-defined]

    asyncio.run(scenario())
    # One line as each outage began, however many reads failed, and one as it ended; no traceback.
    assert len(lines) == 4, lines
    assert (
        lines[0]
        == lines[2]
        == (
            "the change stream cannot read the store: postgresql://db/jobs: connection refused"
            " (no connection for 30 s); trying again (pages say stale)"
        )
    )
    for line in (lines[1], lines[3]):
        assert line.startswith("the change stream reads the store again (it could not for "), line
    deadline = time.monotonic() + 10
    while any(t.name == "jobctl-events" for t in threading.enumerate()):  # the last reader left: the watch ends
        assert time.monotonic() < deadline, "the change stream's thread outlived its last reader"
        time.sleep(0.05)


def test_a_reader_that_comes_during_an_outage_gets_what_was_last_read_marked_stale(tmp_path: Path) -> None:
    inner = FileStore(tmp_path / "store", create=True)
    store = Away(inner)
    job = submit(inner, "fetch")

    async def scenario() -> None:
        feed = Feed(store, log=lambda line: None, stale_after=0.5)  # type: ignore[arg-type]
        early = Reader(feed.subscribe().events())
        await early.status("live")
        store.down = True
        await early.status("stale")
        late = Reader(feed.subscribe().events())
        present = await late.next("jobs")
        assert present["full"] is True and [j["id"] for j in present["jobs"]] == [job]
        assert (await late.next("status"))["state"] == "stale"
        store.down = False
        await late.status("live")
        await early.status("live")
        for reader in (early, late):
            await reader.stream.aclose()  # type: ignore[attr-defined]

    asyncio.run(scenario())
