"""``exclusive`` over HTTP: ``POST /api/jobs`` takes the key (refused 422 when it cannot be one), the job
object says it, and the page shows it on the job's row. On each store, over a real ``jobctl serve``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from devtools import Browser
from webtools import Server

from jobctl.errors import KeyHeld

pytestmark = pytest.mark.timeout(120)


def test_post_takes_an_exclusive_key_and_the_job_says_it(served: Callable[..., Server]) -> None:
    server = served()
    made = server.post("/api/jobs", {"kind": "render", "exclusive": "gpu-0"})
    assert made.status == 201 and made.body["exclusive"] == "gpu-0"
    other = server.post("/api/jobs", {"kind": "render", "exclusive": "gpu-0"})
    assert server.get(f"/api/jobs/{made.body['id']}").body["exclusive"] == "gpu-0"
    assert server.post("/api/jobs", {"kind": "render"}).body["exclusive"] is None
    # The key is the job's: a claim of the second waits for the first.
    store = server.store
    store.claim(made.body["id"], "w1", 60)
    with pytest.raises(KeyHeld):
        store.claim(other.body["id"], "w2", 60)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("", "exclusive is blank"),
        ("a\nb", "not printable"),
        ("k" * 201, "at most 200"),
        (7, "must be text"),
    ],
)
def test_post_refuses_a_key_that_cannot_be_one(server: Server, key: object, words: str) -> None:
    before = server.get("/api/jobs").body["jobs"]
    got = server.post("/api/jobs", {"kind": "render", "exclusive": key})
    assert got.status == 422 and got.body["error"] == "invalid" and words in got.body["message"]
    assert server.get("/api/jobs").body["jobs"] == before  # nothing submitted


def test_the_page_shows_the_key_on_the_job(start: Callable[..., Server], chromium: Browser) -> None:
    server = start()
    keyed = server.post("/api/jobs", {"kind": "render", "exclusive": "gpu-0"}).body["id"]
    plain = server.post("/api/jobs", {"kind": "render"}).body["id"]
    chromium.open(server.url + "/")
    row = "document.querySelector('#jobs tr[data-job=\"%s\"]')"
    chromium.wait_for(f"{row % keyed} && {row % plain} && 1", "the rows")
    assert chromium.evaluate(f"{row % keyed}.querySelector('[data-exclusive]').textContent") == "exclusive: gpu-0"
    assert chromium.evaluate(f"{row % plain}.querySelector('[data-exclusive]')") is None
