"""Helpers of the HTTP tests: a real ``jobctl serve`` process on a free loopback port, and a client.

The client is the standard library's (``urllib``): what the tests check is
what any HTTP client sees on the wire.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobctl import FileStore

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class Server:
    """A running ``jobctl serve`` and a JSON client for it."""

    def __init__(self, proc: subprocess.Popen[str], url: str, store: FileStore, env: dict[str, str]) -> None:
        self.proc = proc
        self.url = url
        self.store = store
        self.env = env
        self.token: str | None = None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        token: str | None = None,
    ) -> Reply:
        sent = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None or method == "POST":
            sent.setdefault("Content-Type", "application/json")
        given = token if token is not None else self.token
        if given:
            sent.setdefault("Authorization", f"Bearer {given}")
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                status, got = response.status, dict(response.headers)
        except urllib.error.HTTPError as exc:
            with exc:
                raw, status, got = exc.read(), exc.code, dict(exc.headers)
        kind = got.get("content-type", "")
        return Reply(status, json.loads(raw) if kind.startswith("application/json") else raw, got)

    def get(self, path: str, **kw: Any) -> Reply:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return self.call("POST", path, body if body is not None else ({} if "data" not in kw else None), **kw)

    def jobctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the ``jobctl`` command line on the same store, as a separate process."""
        ran = subprocess.run(
            [sys.executable, "-m", "jobctl", *args], env=self.env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert ran.returncode == 0, ran.stderr
        return ran


def serve_env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_", "ABSTRACTION_"))}
    env.update({"JOB_STORE": str(root), "JOBCTL_CONFIG": str(root.parent / "no-config.ini")})
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def start_server(root: Path, *args: str, **env_extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``jobctl serve --listen 127.0.0.1:0 ARGS`` and read the URL it prints when it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "serve", "--listen", "127.0.0.1:0", *args],
        env=serve_env(root, **env_extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip() if proc.stdout else ""
    if not url.startswith("http://"):
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"jobctl serve did not start: {err}")
    return proc, url


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, as a service manager stops it; the server must end on its own, and quietly."""
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return err


def next_event(stream: Any) -> tuple[str, dict[str, Any]]:
    """The next event of a Server-Sent Events stream, as ``(name, data)``; comments and ``retry:`` skipped."""
    name, data = "", []
    while True:
        line = stream.readline().decode()
        assert line, "the stream ended"
        line = line.rstrip("\n")
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            return name, json.loads("\n".join(data))
