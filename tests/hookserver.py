"""A real HTTP server on a loopback port standing in for a webhook (Slack and the like), for the alert tests.

Each request takes the next answer of a script: a status code to answer with,
or ``"hang"`` to hold the request without an answer until :meth:`Hook.release`
(or the end of the test). Once the script runs out, every request gets 200.
Every request is kept (method, path, headers, body) in arrival order.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


class Hook:
    def __init__(self, script: list[int | str]) -> None:
        self.script = list(script)
        self.requests: list[Request] = []
        self.hanging = 0
        self._lock = threading.Condition()
        self._released = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with hook._lock:
                    hook.requests.append(Request("POST", self.path, dict(self.headers.items()), body))
                    answer = hook.script.pop(0) if hook.script else 200
                    if answer == "hang":
                        hook.hanging += 1
                    hook._lock.notify_all()
                if answer == "hang":
                    hook._released.wait()
                    answer = 200
                status = int(answer)
                payload = b"ok" if status == 200 else b"no"
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "http://127.0.0.1:1/elsewhere")
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test reads self.requests, not a log

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T0/B0/secret"
        self._thread = threading.Thread(target=self.server.serve_forever, name="hook server", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Answer every held request (200), and every later ``"hang"`` at once."""
        self._released.set()

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Request]:
        """The first ``count`` requests, once that many have arrived; fails the test after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"the webhook got {len(self.requests)} request(s), not {count}")
                self._lock.wait(left)
            return list(self.requests[:count])

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


@contextmanager
def hook(*script: int | str) -> Iterator[Hook]:
    served = Hook(list(script))
    try:
        yield served
    finally:
        served.close()
