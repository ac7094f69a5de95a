"""A headless chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

The pipe needs no port and no WebSocket client: chromium reads commands
from its descriptor 3 and writes answers and events to its descriptor 4,
each message a JSON object ended by a NUL byte. Only what the page test
needs is here: open a page, evaluate an expression, take a screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["find_chromium", "Browser"]


def find_chromium() -> str | None:
    """Debian's ``chromium`` (or another build under a usual name), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _above_four(fd: int) -> int:
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Browser:
    """One headless chromium with one page; ``close()`` ends it."""

    def __init__(self, binary: str, profile: Path, width: int = 1180, height: int = 820) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Above 4, so that putting one end on 3 cannot overwrite the other before it is moved.
        to_chrome_r, from_chrome_w = (_above_four(fd) for fd in (to_chrome_r, from_chrome_w))
        args = [
            binary,
            "--headless",
            "--remote-debugging-pipe",
            "--no-sandbox",  # the tests run as root, where chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--window-size={width},{height}",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        profile.mkdir(parents=True, exist_ok=True)
        self.log_path = profile.parent / "chromium.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115  (closed in close())
        # bash puts the two pipe ends on descriptors 3 and 4, where chromium looks for them.
        script = f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, "bash", *args],  # bash: dash takes no descriptor above 9
            pass_fds=(to_chrome_r, from_chrome_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.session = ""

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        """Send one command and wait for its answer (events in between are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        try:
            os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"chromium is gone; {self._tail()}") from None
        while True:
            answer = self._read()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed its end of the pipe; {self._tail()}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def _tail(self) -> str:
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "its last words: " + " | ".join(line for line in lines[-5:] if "dbus" not in line)

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", {"url": url}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
            "sessionId"
        ]
        self.send("Runtime.enable")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        got = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def wait_for(self, expression: str, what: str, seconds: float = 30.0) -> Any:
        """Evaluate ``expression`` until it is truthy; its value. A bound on the wait, not a timing assertion."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:  # the page is still loading: no body yet, no element yet
                value, why = None, str(exc)
            else:
                why = f"it was {value!r}"
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {what} ({expression}): {why}")
            time.sleep(0.05)

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False)
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        self._log.close()
