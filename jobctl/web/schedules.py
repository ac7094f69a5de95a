"""``/api/schedules``: the store's recurring schedules over HTTP (list, add, remove), as ``jobctl schedule`` does.

``GET /api/schedules`` answers ``{"schedules": [...]}``, each as ``schedule
list --json`` prints it (``next`` its next slot). ``POST`` takes ``{"name",
"every" or "cron", "kind", "spec"?, "by"?}`` and answers the schedule (201);
The change stream (``GET /api/events``) carries the same views
(:mod:`jobctl.web.events`). ``DELETE /api/schedules/NAME`` answers ``{"name", "removed": true}``, or
``not_found`` (404). A ``shell`` schedule runs a command as the workers'
user at every slot: it is refused unless the server takes shell jobs
(``jobctl serve --allow-shell``), as a ``shell`` job is.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .. import timetable
from ..errors import Invalid, NotFound
from ..recurring import Schedule
from ..store.base import Store
from ..wire import Raw

__all__ = ["ScheduleApi", "schedule_view"]

_KEYS = ("name", "every", "cron", "kind", "spec", "by")


def schedule_view(sched: Schedule, now: datetime) -> dict[str, Any]:
    """The schedule as the API and the change stream show it (``schedule list --json``; ``next`` after ``now``)."""
    from ..record import format_time

    out = sched.to_json()
    out["spec"] = json.loads(Raw(sched.spec).text)
    after = sched.next(now)
    out["next"] = None if after is None else format_time(after)
    out["when"] = sched.when
    return out


class ScheduleApi:
    """The handlers of ``/api/schedules`` for one store."""

    def __init__(self, store: Store, allow_shell: bool, body_of: Callable[[Request, bool], Awaitable[Any]]) -> None:
        self.store = store
        self.allow_shell = allow_shell
        self.body_of = body_of

    async def listing(self, request: Request) -> Response:
        store = self.store

        def work() -> dict[str, Any]:
            now = store.now()
            return {"schedules": [schedule_view(s, now) for s in timetable.listing(store)]}

        return JSONResponse(await run_in_threadpool(work))

    async def add(self, request: Request) -> Response:
        store = self.store
        body = await self.body_of(request, True)

        def work() -> dict[str, Any]:
            from ..shell import SHELL

            if not isinstance(body, dict):
                raise Invalid("the body must be a JSON object")
            unknown = sorted(set(body) - set(_KEYS))
            if unknown:
                raise Invalid(f"unknown field {unknown[0]!r} ({', '.join(_KEYS)})")
            kind, name = body.get("kind"), body.get("name")
            if not isinstance(kind, str):
                raise Invalid("kind must be a string")
            if kind == SHELL and not self.allow_shell:
                raise Invalid(f"kind {SHELL} is not taken over HTTP here (jobctl serve --allow-shell)")
            by = body.get("by")
            if by is None or by == "":  # as a submission's: none given is the client's address
                by = f"http@{request.client.host if request.client else 'unknown'}"
            if not isinstance(by, str):
                raise Invalid("by must be a string")
            cron = body.get("cron")
            if cron is not None and not isinstance(cron, str):
                raise Invalid("cron must be a string")
            if not isinstance(name, str):
                raise Invalid("name must be a string")
            spec = json.dumps(body.get("spec", {}), ensure_ascii=False)
            added = timetable.add(store, name, kind=kind, spec=spec, every=body.get("every"), cron=cron, by=by)
            return schedule_view(added, store.now())

        got = await run_in_threadpool(work)
        return JSONResponse(got, status_code=201)

    async def remove(self, request: Request) -> Response:
        name = request.path_params["name"]

        def work() -> dict[str, Any]:
            if not timetable.remove(self.store, name):
                raise NotFound(f"no schedule {name}", name)
            return {"name": name, "removed": True}

        return JSONResponse(await run_in_threadpool(work))
