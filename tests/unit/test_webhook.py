"""jobctl.webhook: which URLs it takes, what it posts, how it retries, and that it stays bounded.

Against a real HTTP server on a loopback port (tests/hookserver.py); the
delays between tries are shortened so the suite stays fast.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from hookserver import hook

from jobctl import webhook
from jobctl.webhook import Delivery, Webhook


class Said:
    """The deliveries a webhook reported, as the worker's queue would get them."""

    def __init__(self) -> None:
        self.got: list[Delivery] = []
        self._cond = threading.Condition()

    def __call__(self, delivery: Delivery) -> None:
        with self._cond:
            self.got.append(delivery)
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = 20.0) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.got) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"{len(self.got)} deliveries reported, not {count}: {self.got}")
                self._cond.wait(left)
            return list(self.got)


FAST = (0.01, 0.01, 0.01)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/hook", "https://hooks.slack.com/services/T0/B0/x", "HTTPS://h.example/"]
)
def test_http_and_https_urls_with_a_host_are_taken(url: str) -> None:
    assert webhook.check_url(f"  {url} ") == url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/x", "not an http or https URL"),
        ("file:///etc/passwd", "not an http or https URL"),
        ("hooks.slack.com/services/x", "not an http or https URL"),
        ("", "not an http or https URL"),
        ("http:///path", "names no host"),
        ("http://h:99999/x", "is not a URL"),
        ("http://h:port/x", "is not a URL"),
        ("http://h/a b", "space or a control character"),
    ],
)
def test_anything_else_is_refused_saying_why(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        webhook.check_url(url)


def test_only_scheme_host_and_port_are_ever_shown() -> None:
    assert webhook.where("https://hooks.slack.com/services/T0/B0/secret") == "https://hooks.slack.com/…"
    assert webhook.where("http://user:pw@127.0.0.1:8080/x?token=s") == "http://127.0.0.1:8080/…"
    assert webhook.where("http://[::1]:81") == "http://[::1]:81"


def test_the_message_has_a_slack_text_and_the_job_fields() -> None:
    body = webhook.message("J1", "fetch", "attempt 2: <exit> & more", 2, ("nightly", "download"), "w@h:1")
    assert list(body) == ["v", "text", "event", "id", "kind", "error", "attempt", "pipeline", "stage", "worker"]
    assert body["text"] == (
        "jobctl: job J1 (fetch) failed on attempt 2: attempt 2: &lt;exit&gt; &amp; more"
        " [pipeline nightly, stage download] (w@h:1)"
    )
    assert (body["error"], body["attempt"], body["pipeline"], body["stage"]) == (
        "attempt 2: <exit> & more",
        2,
        "nightly",
        "download",
    )
    long = webhook.message("J2", "k", "x" * 5000, 1)
    assert (long["pipeline"], long["stage"]) == (None, None)
    assert len(long["error"]) == 5000 and "x" * 1000 + "…" in long["text"] and "x" * 1001 not in long["text"]


def test_a_message_is_posted_as_json() -> None:
    said = Said()
    with hook() as served:
        hooked = Webhook(served.url, said, delays=FAST)
        assert hooked.post("J1", "k", webhook.message("J1", "k", "boom", 1))
        (got,) = said.wait(1)
        (request,) = served.requests
    assert got == Delivery("J1", "k", True, f"posted to {hooked.where} (HTTP 200)")
    assert request.path == "/services/T0/B0/secret"
    assert request.headers["Content-Type"] == "application/json; charset=utf-8"
    assert request.headers["User-Agent"].startswith("jobctl/")
    assert request.json()["text"].startswith("jobctl: job J1 (k) failed")
    hooked.close(1.0)
    assert said.got == [got]  # nothing left to report
    assert not hooked.post("J2", "k", {"text": "late"})


def test_a_5xx_or_429_is_tried_again_and_a_4xx_is_not() -> None:
    said = Said()
    with hook(500, 429, 200, 404) as served:
        hooked = Webhook(served.url, said, delays=FAST)
        hooked.post("A", "k", {"text": "a"})
        hooked.post("B", "k", {"text": "b"})
        first, second = said.wait(2)
        bodies = [r.body for r in served.requests]
        hooked.close(1.0)
    assert first == Delivery("A", "k", True, f"posted to {hooked.where} (HTTP 200, try 3)")
    assert bodies == [b'{"text":"a"}'] * 3 + [b'{"text":"b"}']
    assert second == Delivery("B", "k", False, f"webhook {hooked.where}: HTTP 404 (1 try)")


def test_it_gives_up_after_the_last_try() -> None:
    said = Said()
    with hook(500, 502, 503, 504, 200) as served:
        hooked = Webhook(served.url, said, delays=FAST)
        hooked.post("A", "k", {"text": "a"})
        (got,) = said.wait(1)
        assert len(served.requests) == 4  # the first try and one a delay
        hooked.close(1.0)
    assert got == Delivery("A", "k", False, f"webhook {hooked.where}: HTTP 504 (4 tries)")


def test_a_redirect_is_not_followed() -> None:
    said = Said()
    with hook(302) as served:
        hooked = Webhook(served.url, said, delays=FAST)
        hooked.post("A", "k", {"text": "a"})
        (got,) = said.wait(1)
        hooked.close(1.0)
    assert got.detail.endswith("HTTP 302 (redirects are not followed) (1 try)") and not got.ok
    assert len(served.requests) == 1


def test_a_refused_connection_is_tried_again_and_reported() -> None:
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    said = Said()
    hooked = Webhook(f"http://127.0.0.1:{port}/hook", said, delays=(0.01,))
    hooked.post("A", "k", {"text": "a"})
    (got,) = said.wait(1)
    hooked.close(1.0)
    assert not got.ok and "refused" in got.detail and got.detail.endswith("(2 tries)")
    assert got.detail.startswith(f"webhook http://127.0.0.1:{port}/…: ")


def test_a_hanging_endpoint_costs_one_thread_and_a_bounded_backlog() -> None:
    said = Said()
    with hook("hang", "hang") as served:
        hooked = Webhook(served.url, said, delays=FAST, backlog=2, timeout=30)
        assert hooked.post("A", "k", {"text": "a"})
        served.wait_for(1)  # A is being posted, and hangs
        threads = threading.active_count()
        accepted = [hooked.post(job, "k", {"text": job}) for job in ("B", "C", "D", "E")]
        assert accepted == [True, True, False, False]  # two wait behind A; the rest are refused at once
        assert threading.active_count() == threads
        assert [t.name for t in threading.enumerate()].count("jobctl webhook") == 1
        started = time.monotonic()
        hooked.close(0.2)  # gives up on A, B and C, without waiting for the hanging try
        assert time.monotonic() - started < 10
        failed = said.wait(3)
        served.release()
        sender = hooked._thread
        assert sender is not None
        sender.join(10)  # A's try ends with the answer, and the thread with it
        assert not sender.is_alive()
    assert [(d.job_id, d.ok) for d in failed] == [("A", False), ("B", False), ("C", False)]
    assert all(d.detail.endswith("not posted before the worker left") for d in failed)
    assert len(said.got) == 3 and len(served.requests) == 1  # A's late answer is not reported again
