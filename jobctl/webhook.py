"""Failure alerts posted to a webhook (``worker --on-failure-url URL``).

When a job finally fails, the worker hands :meth:`Webhook.post` a JSON
message (:func:`message`) and goes on at once: one background thread posts
the messages in turn with :mod:`urllib.request`, trying each up to
``len(delays) + 1`` times (a refused connection, a timeout, HTTP 408, 429 or
5xx is tried again after the next delay; any other answer is final), and
tells the worker how each went through ``report``, a callable the worker
turns into its ``alert`` / ``alert-failed`` log lines. The message carries a
``text`` field, so it works as-is with Slack-compatible incoming webhooks
(Slack, Mattermost, Rocket.Chat), which ignore the other fields.

Bounded: one thread, however many alerts; at most ``backlog`` messages wait
behind the one being posted, and a message beyond that is refused at once
(:meth:`post` returns False) rather than queued: a dead or hanging endpoint
costs one thread and a fixed amount of memory, never the worker's progress.
Each try has a ``timeout``. Redirects are not followed (a redirected POST
would lose its body, and a webhook that moved should be configured anew).

A webhook URL often holds its secret in its path (Slack's do), so nothing
here ever names more of it than :func:`where` shows: scheme, host and port.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import urllib.request

__all__ = ["SCHEMES", "Delivery", "Webhook", "check_url", "message", "where"]

#: The only schemes an alert is posted over.
SCHEMES = ("http", "https")
#: Seconds to wait before the second, third and fourth try.
DELAYS = (1.0, 4.0, 15.0)
#: Seconds each try may take to connect, and between bytes of the answer.
TIMEOUT = 10.0
#: Messages that may wait behind the one being posted; more are dropped, and said so.
BACKLOG = 100
#: HTTP statuses worth another try besides every 5xx: request timeout, too many requests.
_AGAIN = frozenset((408, 429))
#: The most of a job's error the message's ``text`` quotes (the ``error`` field has it all).
TEXT_ERROR = 1000


def check_url(url: str) -> str:
    """``url`` if an alert can be posted to it: ``http`` or ``https``, with a host; else ``ValueError`` saying why."""
    from urllib.parse import urlsplit

    text = url.strip()
    try:
        parts = urlsplit(text)
        _ = parts.port  # a port that is not a number in range raises here
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a URL: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"{text!r} is not an http or https URL")
    if not parts.hostname:
        raise ValueError(f"{text!r} names no host")
    if any(ch.isspace() or ord(ch) < 32 for ch in text):
        raise ValueError(f"{text!r} has a space or a control character in it")
    return text


def where(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: all of it that a log line or ``jobctl paths`` shows."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(a malformed URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    shown = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    return shown + ("/…" if parts.path.strip("/") or parts.query else "")


def _slack_escape(text: str) -> str:
    # Slack reads <...> as links and mentions, & as the start of an entity.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def message(
    job_id: str,
    kind: str,
    error: str,
    attempt: int,
    pipeline: tuple[str, str] | None = None,
    worker: str = "",
) -> dict[str, Any]:
    """The ``alert`` shape (v1) of docs/reference/json.md: ``text`` for people, the rest for programs."""
    error_text = error if len(error) <= TEXT_ERROR else error[:TEXT_ERROR] + "…"
    text = f"jobctl: job {job_id} ({kind}) failed on attempt {attempt}: {error_text or 'no error given'}"
    if pipeline is not None:
        text += f" [pipeline {pipeline[0]}, stage {pipeline[1]}]"
    if worker:
        text += f" ({worker})"
    return {
        "v": 1,
        "text": _slack_escape(text),
        "event": "failed",
        "id": job_id,
        "kind": kind,
        "error": error,
        "attempt": attempt,
        "pipeline": pipeline[0] if pipeline is not None else None,
        "stage": pipeline[1] if pipeline is not None else None,
        "worker": worker,
    }


@dataclass(frozen=True)
class Delivery:
    """How one message went: ``ok`` and what to say (the status, the tries, the reason)."""

    job_id: str
    kind: str
    ok: bool
    detail: str


@dataclass
class _Message:
    job_id: str
    kind: str
    body: bytes


class Webhook:
    """Posts messages to one URL from one background thread; see the module docstring for the bounds.

    ``report`` is called once per message taken by :meth:`post`: from the
    posting thread as each ends, or from :meth:`close` for those it leaves
    behind, never after :meth:`close` returns. It must not block (it runs
    under the webhook's lock); the worker's queues the news and wakes its loop.
    """

    def __init__(
        self,
        url: str,
        report: Callable[[Delivery], None],
        *,
        timeout: float = TIMEOUT,
        delays: tuple[float, ...] = DELAYS,
        backlog: int = BACKLOG,
    ) -> None:
        self.url = check_url(url)
        self.where = where(self.url)
        self.timeout = float(timeout)
        self.delays = tuple(float(d) for d in delays)
        self.backlog = int(backlog)
        self._report = report
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Message | None] = queue.SimpleQueue()
        self._waiting = 0  # messages queued, not yet taken by the thread
        self._current: _Message | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._abort = threading.Event()

    def post(self, job_id: str, kind: str, body: Mapping[str, Any]) -> bool:
        """Queue ``body`` for posting and return at once; False when it was refused (backlog full, or closed)."""
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        with self._lock:
            if self._closed or self._waiting >= self.backlog:
                return False
            self._waiting += 1
            self._queue.put(_Message(job_id, kind, data))
            if self._thread is None:
                # Started on the first alert: a worker whose jobs never fail runs no thread for it.
                self._thread = threading.Thread(target=self._run, name="jobctl webhook", daemon=True)
                self._thread.start()
        return True

    def close(self, wait: float) -> None:
        """Post what is queued for up to ``wait`` seconds, then give up: each message left is reported failed.

        The thread is a daemon: a try still hanging at the end keeps nobody waiting.
        """
        with self._lock:
            thread = self._thread
            if thread is None:
                self._closed = True
                return
        self._queue.put(None)
        thread.join(max(0.0, wait))
        with self._lock:
            self._closed = True
            left = [self._current] if self._current is not None else []
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    left.append(item)
        self._abort.set()  # a wait between tries ends now; its message was reported here
        for item in left:
            self._report(
                Delivery(item.job_id, item.kind, False, f"webhook {self.where}: not posted before the worker left")
            )

    # -- the posting thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            with self._lock:
                if self._closed:
                    return
                self._waiting -= 1
                self._current = item
            delivery = self._deliver(item)
            with self._lock:
                self._current = None
                if self._closed:
                    return  # close() has reported it already
                # Under the lock, so nothing is reported once close() has
                # returned: the worker says what close() leaves, and then stops listening.
                self._report(delivery)

    def _deliver(self, item: _Message) -> Delivery:
        tries = 0
        detail = ""
        for delay in (0.0, *self.delays):
            if delay and self._abort.wait(delay):
                break
            tries += 1
            ok, again, detail = self._send(item.body)
            if ok:
                said = f"posted to {self.where} ({detail}" + (f", try {tries})" if tries > 1 else ")")
                return Delivery(item.job_id, item.kind, True, said)
            if not again:
                break
        plural = "try" if tries == 1 else "tries"
        return Delivery(item.job_id, item.kind, False, f"webhook {self.where}: {detail} ({tries} {plural})")

    def _send(self, body: bytes) -> tuple[bool, bool, str]:
        """One try: ``(posted, worth another try, what happened)``. Never raises."""
        import http.client
        import urllib.error
        import urllib.request

        from . import __version__

        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json; charset=utf-8", "User-Agent": f"jobctl/{__version__}"},
        )
        opener = urllib.request.build_opener(_no_redirect())
        try:
            with opener.open(request, timeout=self.timeout) as answer:
                answer.read(1 << 16)
                return True, False, f"HTTP {answer.status}"
        except urllib.error.HTTPError as exc:
            code = exc.code
            exc.close()
            moved = " (redirects are not followed)" if 300 <= code < 400 else ""
            return False, code >= 500 or code in _AGAIN, f"HTTP {code}{moved}"
        except urllib.error.URLError as exc:
            return False, True, str(exc.reason)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            # OSError: a timeout while reading the answer, a reset; HTTPException:
            # a malformed answer; ValueError: what urllib says of a URL it cannot use.
            return False, True, str(exc) or type(exc).__name__


def _no_redirect() -> urllib.request.BaseHandler:
    """A redirect handler that follows nothing: a 3xx reaches the caller as an ``HTTPError``."""
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return NoRedirect()
