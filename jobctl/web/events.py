"""The change stream behind ``GET /api/events``: one :class:`jobctl.watch.Watch` a subscriber.

The watch blocks (it waits on inotify for a file store), so it runs in a
thread of its own, never on the event loop nor in the thread pool the
endpoints share: a page left open must not hold a worker thread the API
needs. The thread keeps only the newest notice; a slow reader gets the
latest views, never a backlog.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from ..store.base import Store
from ..watch import Watch
from .views import changed_views

__all__ = ["Feed", "KEEPALIVE_SECONDS"]

#: A comment line this often keeps proxies from closing a quiet stream.
KEEPALIVE_SECONDS = 15.0
#: How long the watch thread waits at a time, so that it sees a closed feed soon after.
_TICK = 1.0


class Feed:
    """One subscriber's stream of ``jobs`` events: the jobs whose view changed, and the ids gone."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._watch = Watch(store, None)
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._gone: list[str] = []
        self._seen: dict[str, str] = {}
        self._thread = threading.Thread(target=self._pump, name="jobctl-events", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        watch = self._watch
        while not watch.closed:
            notice = watch.next(timeout=_TICK)
            if notice is None or notice.what != "changed":
                continue
            self._seen, changed, gone = changed_views(self._seen, notice.records, self._store.now())
            if not changed and not gone:
                continue
            with self._lock:  # coalesce: a job changed twice before the reader came is sent once, as it is now
                ids = {view["id"] for view in changed}
                self._pending = [v for v in self._pending if v["id"] not in ids] + changed
                self._gone = sorted((set(self._gone) - ids) | set(gone))
            try:
                self._loop.call_soon_threadsafe(self._ready.set)
            except RuntimeError:  # the loop is gone: the server stopped
                watch.close()
        watch.next(0)  # a closed watch lets go of its inotify descriptor on its next call

    def _take(self) -> tuple[list[dict[str, Any]], list[str]]:
        with self._lock:
            taken = self._pending, self._gone
            self._pending, self._gone = [], []
        return taken

    async def events(self) -> AsyncIterator[str]:
        """Server-Sent Events text: ``event: jobs`` with ``{"jobs": [...], "removed": [...]}``."""
        try:
            yield "retry: 2000\n\n"
            while True:
                try:
                    await asyncio.wait_for(self._ready.wait(), KEEPALIVE_SECONDS)
                except asyncio.TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                self._ready.clear()
                jobs, removed = self._take()
                if jobs or removed:
                    data = json.dumps({"jobs": jobs, "removed": removed}, ensure_ascii=False)
                    yield f"event: jobs\ndata: {data}\n\n"
        finally:
            self.close()

    def close(self) -> None:
        self._watch.close()
