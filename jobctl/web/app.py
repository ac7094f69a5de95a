"""The ASGI application: the JSON API, the change stream and the page, for one store.

:func:`create_app` returns a Starlette application that ``jobctl serve``
runs and that an application mounts under a prefix of its own
(docs/howto/web.md). Every store call blocks (a file lock, an fsync, a
database round trip), so each runs in the thread pool, never on the event
loop. The library does the work: submit with :func:`jobctl.web.submission.record_from`
and :meth:`Store.submit`, approve and cancel with :meth:`Store.set_intent`
and :meth:`Store.cancel` (what ``jobctl approve`` and ``jobctl cancel``
call), retry with :func:`jobctl.lifecycle.retry` (``jobctl retry``).
"""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import wire
from ..errors import CancelledByDependency, Exists, Invalid, JobError, NoStore, NotFound, WriteFailed
from ..filters import parse_states
from ..lifecycle import replacement_of, replacements, retry
from ..record import ZERO_TIME
from ..roster import roster_for
from ..schedule import refuse_cycle
from ..store.base import Store
from ..submitter import check_name, submitter_of
from .events import Feed
from .logs import parse_tail_query, tail
from .schedules import ScheduleApi
from .submission import idempotent_id, record_from
from .views import job_view, pipeline_names, pipeline_view

__all__ = ["create_app", "MAX_BODY_BYTES", "STATUS", "COOKIE", "LOOPBACK_HOSTS"]

#: The largest request body taken; a larger one is refused 413 before it is read.
MAX_BODY_BYTES = 256 * 1024
#: The most change streams open at once; one more is refused 503.
MAX_STREAMS = 64
#: The cookie the page's ``?token=`` is kept in.
COOKIE = "jobctl_token"
#: The Host names a server without a token answers (a DNS-rebinding page names its own host).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

#: HTTP status by verdict (docs/reference/http.md).
STATUS: dict[str, int] = {
    "not_found": 404,
    "lease_held": 409,
    "stale_epoch": 409,
    "lease_expired": 409,
    "terminal": 409,
    "exists": 409,
    "refused": 409,
    "cancelled_by_dependency": 409,
    "unknown_schema": 409,
    "invalid": 422,
    "no_store": 503,
}


def _error(status: int, verdict: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": verdict, "message": message}, status_code=status, headers=headers)


#: An absolute path in a message: after a space, a quote, a bracket or ``=``, or at the start.
_PATH = re.compile(r"""(?:(?<=[\s'"(=])|^)/[^\s'"(),;]*""")


def _public(message: str) -> str:
    """``message`` with every absolute path cut to its last name: a client learns no server path.

    A refusal's text comes from the library, which names paths for the
    operator's terminal (``cannot create /srv/store/jobs/ID.json.lock``);
    over HTTP the name within the store is enough.
    """
    return _PATH.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], message)


def _refusal(exc: JobError) -> JSONResponse:
    status = 503 if isinstance(exc, (WriteFailed, NoStore)) else STATUS.get(exc.verdict, 409)
    reply = _error(status, exc.verdict, _public(" ".join(str(exc).split())) or exc.verdict.replace("_", " "))
    if isinstance(exc, CancelledByDependency):  # the job to retry instead, for a client to offer
        reply = JSONResponse(
            {"error": exc.verdict, "message": _public(str(exc)), "retry": exc.cause}, status_code=status
        )
    return reply


def _by(request: Request, body: Any) -> str:
    """Who asks, for the intent's ``by``: the body's ``by``, else the client's address."""
    given = body.get("by") if isinstance(body, dict) else None
    if given is not None:
        if not isinstance(given, str) or not given.strip():
            raise Invalid("by must be a non-empty string")
        # As a submission's `by`: it lands in the intent and in a cancel's error, which stay one line.
        return check_name(given)
    client = request.client.host if request.client else "unknown"
    return f"http@{client}"


def _once(request: Request) -> None:
    """Refuse a query parameter given twice: only one of them would be read, and the other silently dropped."""
    seen: set[str] = set()
    for name, _value in request.query_params.multi_items():
        if name in seen:
            several = " (several states are one parameter, comma-separated)" if name == "state" else ""
            raise Invalid(f"parameter {name!r} is given twice: give it once{several}")
        seen.add(name)


def _reason(body: dict[str, Any]) -> str:
    """Why a cancel was asked for (``reason``, optional); the store judges its text (``Store.cancel``)."""
    given = body.get("reason", "")
    if not isinstance(given, str):
        raise Invalid("reason must be a string")
    return given


class _Guard:
    """Token, Host and body-type checks in front of every request (docs/reference/http.md, "Access").

    With a token, a request carries it as ``Authorization: Bearer TOKEN`` or
    in the cookie that ``GET /?token=TOKEN`` sets for a browser. Without
    one, only loopback Host names are answered, so a web page on another
    site cannot reach the API by rebinding its DNS name to 127.0.0.1. A
    request that changes something must say ``Content-Type:
    application/json``: a browser sends that cross-site only after a CORS
    preflight, which is never answered, so another site's form cannot post here.
    """

    def __init__(self, app: ASGIApp, token: str | None, hosts: Sequence[str] | None) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.hosts = None if hosts is None else {h.lower() for h in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self._refuse(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refuse(self, request: Request) -> Response | None:
        if self.hosts is not None:
            host = request.headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1 : host.find("]")]
            if name.lower() not in self.hosts:
                return _error(403, "forbidden", f"host {host!r} is not served here without a token")
        if self.token is not None:
            given = request.headers.get("authorization", "")
            bearer = given[7:] if given[:7].lower() == "bearer " else ""
            cookie = request.cookies.get(COOKIE, "")
            on_page = request.url.path.rstrip("/") == request.scope.get("root_path", "").rstrip("/")
            query = request.query_params.get("token") if on_page and request.method in ("GET", "HEAD") else None
            given_all = [c for c in (bearer, cookie, query) if c]
            # The page keeps a `?token=` as the cookie: a wrong one (or an empty one) is refused even beside a
            # right cookie or header, else it would replace the cookie and lock the browser out.
            wrong_query = query is not None and not hmac.compare_digest(self.token, query.encode())
            if wrong_query or not any(hmac.compare_digest(self.token, c.encode()) for c in given_all):
                return _error(
                    401,
                    "unauthorized",
                    "this server wants its token: send the header Authorization: Bearer TOKEN "
                    "(a browser opens /?token=TOKEN once)",
                    {"WWW-Authenticate": 'Bearer realm="jobctl"'},
                )
        if request.method == "POST":
            kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind != "application/json":
                return _error(415, "invalid", "a request that changes something is sent as application/json")
        return None


def _page_files() -> dict[str, tuple[bytes, str]]:
    static = resources.files(__package__).joinpath("static")
    return {
        "index.html": (static.joinpath("index.html").read_bytes(), "text/html; charset=utf-8"),
        "page.js": (static.joinpath("page.js").read_bytes(), "text/javascript; charset=utf-8"),
        "page.css": (static.joinpath("page.css").read_bytes(), "text/css; charset=utf-8"),
    }


#: The page loads nothing from anywhere else, and runs no inline script.
_CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'self'; form-action 'none'"


class _Api:
    """The API's handlers for one store: the jobs, their actions, the pipelines, the change stream."""

    def __init__(self, store: Store, allow_shell: bool, max_body: int) -> None:
        self.store = store
        self.allow_shell = allow_shell
        self.max_body = max_body
        self.streams = 0
        self.feed = Feed(store)  # one watch of the store, shared by every open GET /api/events

    async def body_of(self, request: Request, required: bool) -> Any:
        max_body = self.max_body
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body):
            raise HTTPException(413, f"the body is larger than {max_body} bytes")
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > max_body:
                raise HTTPException(413, f"the body is larger than {max_body} bytes")
        if not data:
            if required:
                raise Invalid("the body must be a JSON object")
            return {}
        # The record codec's own parser: nesting deeper than wire.MAX_DEPTH is refused before anything
        # recurses into it, as are an escaped lone surrogate, NaN and a member named twice (as `submit --spec`).
        try:
            return wire.parse_value(wire.utf8_text(bytes(data), "the body"))
        except Invalid as exc:
            raise Invalid(f"the body is not JSON: {exc.message}") from None

    def job_or_404(self, job_id: str) -> dict[str, Any]:
        store = self.store
        rec = store.load(job_id)
        return job_view(rec, store.now(), replacement_of(store, rec), roster_for(store, [rec]))

    async def submit(self, request: Request) -> Response:
        store, job_or_404 = self.store, self.job_or_404
        body = await self.body_of(request, required=True)
        key = request.headers.get("idempotency-key")

        def work() -> tuple[dict[str, Any], bool]:
            rec = record_from(body, store.now(), _by(request, body), allow_shell=self.allow_shell)
            if key is not None:
                if rec.id:
                    raise Invalid("give an Idempotency-Key or an id, not both")
                rec.id = idempotent_id(key)
            refuse_cycle(rec, store.load)  # as `jobctl submit --id X --after Y`
            try:
                new_id = store.submit(rec)
            except Exists:
                if key is None:
                    raise
                return job_or_404(rec.id), False  # the same key again: that job, changed in nothing
            return job_or_404(new_id), True

        view, created = await run_in_threadpool(work)
        # Percent-encoded: an id may hold any printable character (`€`, `%`, `?`), and a header only Latin-1.
        root = quote(request.scope.get("root_path", ""), safe="/")
        headers = {"Location": f"{root}/api/jobs/{quote(view['id'], safe='')}"}
        return JSONResponse(view, status_code=201 if created else 200, headers=headers)

    async def show(self, request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(self.job_or_404, request.path_params["job_id"]))

    async def listing(self, request: Request) -> Response:
        store = self.store
        query = request.query_params
        _once(request)
        unknown = sorted(set(query) - {"state", "kind", "pipeline", "by", "limit"})
        if unknown:
            raise Invalid(f"unknown parameter {unknown[0]!r} (state, kind, pipeline, by, limit)")
        limit_text = query.get("limit", "100")
        if not (limit_text.isascii() and limit_text.isdigit()) or not 1 <= int(limit_text) <= 10000:
            raise Invalid(f"limit {limit_text!r} is not a whole number 1..10000")
        limit = int(limit_text)
        states = parse_states(query["state"]) if "state" in query else frozenset()  # as `jobctl list --state`

        def work() -> dict[str, Any]:
            listed = store.list()
            now = store.now()
            replaced = replacements(listed)
            roster = roster_for(store, listed)  # once for the whole answer
            chosen = []
            # Newest first by creation time: an id given by the submitter (an Idempotency-Key's) says nothing of it.
            for rec in sorted(listed, key=lambda r: (r.created_at or ZERO_TIME, r.id), reverse=True):
                if states and rec.state not in states:
                    continue
                if "kind" in query and rec.kind != query["kind"]:
                    continue
                if "by" in query and submitter_of(rec) != query["by"]:
                    continue
                view = job_view(rec, now, replaced.get(rec.id), roster)
                if "pipeline" in query and (view["pipeline"] or {}).get("name") != query["pipeline"]:
                    continue
                chosen.append(view)
                if len(chosen) >= limit:
                    break
            return {
                "jobs": chosen,
                "unreadable": [{"id": job_id, "error": _public(str(exc))} for job_id, exc in listed.unreadable],
            }

        return JSONResponse(await run_in_threadpool(work))

    async def logs(self, request: Request) -> Response:
        _once(request)
        attempt, limit = parse_tail_query(dict(request.query_params))
        return JSONResponse(await run_in_threadpool(tail, self.store, request.path_params["job_id"], attempt, limit))

    async def pipelines(self, request: Request) -> Response:
        store = self.store

        def work() -> dict[str, Any]:
            listed = list(store.list())
            now = store.now()
            names = pipeline_names(listed)[:50]
            roster = roster_for(store, listed)
            return {"pipelines": [pipeline_view(listed, name, now, roster) for name in names]}

        return JSONResponse(await run_in_threadpool(work))

    async def pipeline(self, request: Request) -> Response:
        store = self.store
        name = request.path_params["name"]
        if not name:
            raise NotFound("no such pipeline: the path names none")

        def work() -> dict[str, Any]:
            listed = store.list()
            view = pipeline_view(listed, name, store.now(), roster_for(store, listed))
            if view is None:
                raise NotFound(f"no such pipeline {name}: no job was submitted with pipeline {name}")
            return view

        return JSONResponse(await run_in_threadpool(work))

    def action(
        self, do: Callable[..., Any], status: int = 200, *, reasoned: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        fields = {"by", "reason"} if reasoned else {"by"}

        async def endpoint(request: Request) -> Response:
            body = await self.body_of(request, required=False)
            if not isinstance(body, dict):
                raise Invalid("the body must be a JSON object")
            unknown = sorted(set(body) - fields)
            if unknown:
                raise Invalid(f"unknown field {unknown[0]!r} (this action takes only {' and '.join(sorted(fields))})")
            args: list[Any] = [request.path_params["job_id"], _by(request, body)]
            if reasoned:
                args.append(_reason(body))
            result = await run_in_threadpool(do, *args)
            if isinstance(result, tuple):  # the action says how it went: a retry made its job, or found it
                result, answered = result
                return JSONResponse(result, status_code=answered)
            return JSONResponse(result, status_code=status)

        return endpoint

    def approve(self, job_id: str, by: str) -> dict[str, Any]:
        rec = self.store.set_intent(job_id, "run", by)  # what `jobctl approve` calls
        return job_view(rec, self.store.now(), roster=roster_for(self.store, [rec]))

    def cancel(self, job_id: str, by: str, reason: str) -> dict[str, Any]:
        rec = self.store.cancel(job_id, by, reason=reason)  # what `jobctl cancel` calls
        return job_view(rec, self.store.now())

    def again(self, job_id: str, by: str) -> tuple[dict[str, Any], int]:
        store = self.store
        # `jobctl retry --with-dependents`: a pipeline resumes from its failed stage. A job retried
        # already answers 200 with its replacement, made by whichever request the store let through.
        answers = retry(store, job_id, with_dependents=True, by=by)
        now = store.now()
        made_again = [store.load(answer.new) for answer in answers]
        roster = roster_for(store, made_again)
        views = [job_view(rec, now, roster=roster) for rec in made_again]
        made = [answer.new for answer in answers if answer.created]
        return {"jobs": views, "created": made}, 201 if answers[0].created else 200

    async def events(self, request: Request) -> Response:
        if self.streams >= MAX_STREAMS:
            return _error(503, "refused", f"{MAX_STREAMS} change streams are open already")
        self.streams += 1
        sub = self.feed.subscribe()

        async def stream() -> Any:
            try:
                async for text in sub.events():
                    yield text
            finally:
                self.streams -= 1

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


class _Page:
    """The page and its files; with a token, the page's first visit sets it as a cookie."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.files = _page_files()

    async def page(self, request: Request) -> Response:
        token = self.token
        if token is not None and "token" in request.query_params:  # the guard checked it
            # The token goes into a cookie once, and out of the address bar (and the history).
            root = request.scope.get("root_path", "")
            response: Response = RedirectResponse(f"{root}/", status_code=303)
            response.set_cookie(
                COOKIE,
                request.query_params["token"],
                path=f"{root}/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            return response
        return self.static(request, "index.html")

    def static(self, request: Request, name: str) -> Response:
        data, media = self.files[name]
        headers = {"Content-Security-Policy": _CSP, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        return Response(data, media_type=media, headers=headers)

    def asset(self, name: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return self.static(request, name)

        return endpoint


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, JobError)
    return _refusal(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    verdict = {404: "not_found", 405: "invalid", 413: "too_large"}.get(exc.status_code, "refused")
    return _error(exc.status_code, verdict, _public(str(exc.detail)), dict(exc.headers or {}))


async def _unreadable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OSError)
    where = f"{os.path.basename(str(exc.filename))}: " if exc.filename else ""  # no server path
    return _error(503, "refused", _public(f"the store cannot be read: {where}{exc.strerror or exc}"))


async def _broken(request: Request, exc: Exception) -> Response:
    return _error(500, "internal", f"{type(exc).__name__} (the server's log has the traceback)")


def create_app(
    store: Store,
    token: str | None = None,
    *,
    allow_shell: bool = False,
    max_body: int = MAX_BODY_BYTES,
    hosts: Sequence[str] | None = None,
) -> Starlette:
    """The API, the change stream and the page for ``store``, as an ASGI application.

    ``token``: when given, every request must carry it (``Authorization:
    Bearer``, or the page's cookie). ``hosts``: when given, the only Host
    names answered (``jobctl serve`` without a token passes
    :data:`LOOPBACK_HOSTS`); an application that mounts this one leaves it
    None and guards its own front door. ``allow_shell``: take ``shell``
    jobs, which run a command as the worker's user. ``max_body``: the
    largest request body, in bytes.
    """
    api = _Api(store, allow_shell, max_body)
    page = _Page(token)
    schedules = ScheduleApi(store, allow_shell, api.body_of)
    routes = [
        Route("/", page.page, methods=["GET"]),
        Route("/page.js", page.asset("page.js"), methods=["GET"]),
        Route("/page.css", page.asset("page.css"), methods=["GET"]),
        Route("/api/jobs", api.submit, methods=["POST"]),
        Route("/api/jobs", api.listing, methods=["GET"]),
        Route("/api/jobs/{job_id:str}", api.show, methods=["GET"]),
        Route("/api/jobs/{job_id:str}/logs", api.logs, methods=["GET"]),
        Route("/api/jobs/{job_id:str}/approve", api.action(api.approve), methods=["POST"]),
        Route("/api/jobs/{job_id:str}/cancel", api.action(api.cancel, reasoned=True), methods=["POST"]),
        Route("/api/jobs/{job_id:str}/retry", api.action(api.again, 201), methods=["POST"]),
        Route("/api/pipelines", api.pipelines, methods=["GET"]),
        # a pipeline name may hold "/" (team/nightly): the rest of the path is the name
        Route("/api/pipelines/{name:path}", api.pipeline, methods=["GET"]),
        Route("/api/events", api.events, methods=["GET"]),
        # recurring schedules (jobctl.web.schedules)
        Route("/api/schedules", schedules.listing, methods=["GET"]),
        Route("/api/schedules", schedules.add, methods=["POST"]),
        Route("/api/schedules/{name:str}", schedules.remove, methods=["DELETE"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={JobError: _refused, HTTPException: _http_error, OSError: _unreadable, Exception: _broken},
    )
    app.add_middleware(_Guard, token=token, hosts=hosts)
    app.state.end_streams = api.feed.close  # for the server that stops: open change streams end at once
    return app
