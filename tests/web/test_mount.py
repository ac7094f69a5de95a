"""The application mounted under a prefix in a Starlette application, served by uvicorn on a loopback port.

What docs/howto/web.md shows: an application's own ``/jobs`` is jobctl's,
beside the application's routes, with the page, the API and the change
stream all under the prefix.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from jobctl import FileStore
from jobctl.web import create_app
from jobctl.web.server import bind

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


def parent_app(store: FileStore, token: str | None = None) -> Starlette:
    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/health", health), Mount("/jobs", app=create_app(store, token))])


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    servers: list[tuple[uvicorn.Server, threading.Thread, socket.socket]] = []

    def start(app: Starlette) -> str:
        sock = bind("127.0.0.1", 0)
        config = uvicorn.Config(app, lifespan="off", log_level="warning", timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        servers.append((server, thread, sock))
        port = sock.getsockname()[1]
        while not server.started:
            threading.Event().wait(0.01)
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread, sock in servers:
        server.should_exit = True
        thread.join(30)
        sock.close()


class _Keep(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def fetch(url: str, data: Any = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    sent = dict(headers or {})
    body = None
    if data is not None:
        body = json.dumps(data).encode()
        sent["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=body, headers=sent, method="POST" if body is not None else "GET")
    opener = urllib.request.build_opener(_Keep)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def test_mounted_under_a_prefix_beside_the_applications_own_routes(serve: Any, tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    url = serve(parent_app(store))
    assert fetch(url + "/health")[2] == b"ok"
    status, headers, page = fetch(url + "/jobs/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'src="page.js"' in page  # relative: under the prefix, as the API calls the page makes
    assert fetch(url + "/jobs/page.js")[0] == 200
    status, headers, body = fetch(url + "/jobs/api/jobs", {"kind": "thumbnail", "pipeline": "upload"})
    job = json.loads(body)
    assert status == 201 and headers["location"] == f"/jobs/api/jobs/{job['id']}"
    assert json.loads(fetch(url + headers["location"])[2])["kind"] == "thumbnail"
    stages = json.loads(fetch(url + "/jobs/api/pipelines/upload")[2])["stages"]
    assert [s["job"]["id"] for s in stages] == [job["id"]]
    with urllib.request.urlopen(url + "/jobs/api/events", timeout=30) as stream:
        lines = []
        while not lines or lines[-1] != "":
            lines.append(stream.readline().decode().rstrip("\n"))
            if lines[-1] == "" and not any(line.startswith("data:") for line in lines):
                lines = []  # the retry: line, before the first event
        data = json.loads(next(line for line in lines if line.startswith("data:"))[5:])
    assert [j["id"] for j in data["jobs"]] == [job["id"]]
    assert fetch(url + "/elsewhere/api/jobs")[0] == 404  # nothing outside the prefix is jobctl's


def test_a_token_cookie_is_scoped_to_the_prefix(serve: Any, tmp_path: Path) -> None:
    url = serve(parent_app(FileStore(tmp_path / "store"), token="t0ken"))
    assert fetch(url + "/health")[0] == 200  # the application's own routes are its own business
    assert fetch(url + "/jobs/api/jobs")[0] == 401
    status, headers, _ = fetch(url + "/jobs/?token=t0ken")
    assert status == 303 and headers["location"] == "/jobs/"
    assert "Path=/jobs/" in headers["set-cookie"]
    assert fetch(url + "/jobs/api/jobs", headers={"Cookie": "jobctl_token=t0ken"})[0] == 200
    assert fetch(url + "/jobs/api/jobs", headers={"Authorization": "Bearer t0ken"})[0] == 200


def howto_example(store_root: Path) -> Starlette:
    """The Starlette example of docs/howto/web.md, run as written with its store moved to ``store_root``."""
    text = (REPO / "docs" / "howto" / "web.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    (source,) = [b for b in blocks if "from starlette.applications import Starlette" in b]
    scope: dict[str, Any] = {}
    exec(compile(source.replace("/srv/jobs", str(store_root)), "docs/howto/web.md", "exec"), scope)
    app = scope["app"]
    assert isinstance(app, Starlette)
    return app


def test_the_howto_example_mounts_the_api(serve: Any, tmp_path: Path) -> None:
    FileStore(tmp_path / "store")
    url = serve(howto_example(tmp_path / "store"))
    assert fetch(url + "/health")[2] == b"ok"
    status, _, body = fetch(url + "/jobs/api/jobs", {"kind": "script_generation", "pipeline": "generate-video"})
    assert status == 201
    assert (
        json.loads(fetch(url + "/jobs/api/pipelines/generate-video")[2])["stages"][0]["job"]["id"]
        == json.loads(body)["id"]
    )
