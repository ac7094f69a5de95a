"""The page in a real headless browser (Debian's ``chromium``) against a real ``jobctl serve``.

It loads, shows a pipeline's stages, updates when a job changes (from the
change stream: the page never polls), and its approve button lets a held
stage run. The screenshot in docs/images/pipeline-page.png is taken here,
so it shows the page as it is: each run takes one (in the test's temporary
directory, so a run leaves the checkout as it found it), and with
``JOBCTL_SCREENSHOT=1`` it is copied over the docs' image. Without chromium the test skips with one
line; under ``CI=true`` (as PostgreSQL's tests) it fails instead, so CI
cannot pass without it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from devtools import Browser
from webtools import REPO, Server

from jobctl import Record
from jobctl.results import set_result
from jobctl.schedule import plan
from jobctl.wire import Raw

pytestmark = pytest.mark.timeout(180)

SCREENSHOT = REPO / "docs" / "images" / "pipeline-page.png"
#: Set to 1 to replace the docs' screenshot with this run's.
UPDATE_SCREENSHOT = "JOBCTL_SCREENSHOT"


@pytest.fixture
def browser(chromium: Browser) -> Browser:
    """The suite's headless chromium (conftest.py: mandatory under CI=true)."""
    return chromium


def submit(
    server: Server, kind: str, pipeline: str, after: tuple[str, ...] = (), hold: bool = False, **spec: object
) -> str:
    rec = Record(id="", kind=kind, spec=Raw(json.dumps(spec)))
    plan(rec, pipeline=pipeline, after=after, hold=hold, by="ops")
    return server.store.submit(rec)


def complete(server: Server, job_id: str, result: object) -> None:
    store = server.store
    epoch = store.claim(job_id, "worker-1", 60).lease.epoch
    store.update(job_id, epoch, lambda rec: set_result(rec, result))
    store.finish(job_id, epoch, "complete")


#: The step indicator of pipeline ``%s`` as the page shows it: ``stage=step`` words.
STEPS_JS = (
    "[...document.querySelectorAll('[data-pipeline=\"%s\"] .step')]"
    ".map(s => s.dataset.stage + '=' + s.dataset.step).join(' ')"
)


def steps(browser: Browser, pipeline: str) -> str:
    """The pipeline's step indicator as the page shows it: ``stage=step`` words."""
    return str(browser.evaluate(STEPS_JS % pipeline))


def test_the_page_shows_a_pipeline_follows_it_and_approves_a_held_stage(
    start: Callable[..., Server], browser: Browser, tmp_path: Path
) -> None:
    server = start()
    store = server.store
    # The seed's "Generate Video" pipeline (§7), part way through, its last stage held for approval.
    script = submit(server, "script_generation", "generate-video", topic="tides")
    voice = submit(server, "voice_synthesis", "generate-video", (script,))
    image = submit(server, "image_generation", "generate-video", (script,))
    video = submit(server, "video_generation", "generate-video", (voice, image))
    compositing = submit(server, "compositing", "generate-video", (video,), hold=True)
    complete(server, script, {"chars": 1834, "title": "Tides"})
    complete(server, voice, {"seconds": 92.5})
    image_epoch = store.claim(image, "worker-2", 60).lease.epoch
    store.update(image, image_epoch, lambda rec: setattr(rec.progress, "total", 8))
    store.progress(image, image_epoch, 3)
    report = submit(server, "fetch", "weekly-report")
    failed_epoch = store.claim(report, "worker-1", 60).lease.epoch
    store.finish(report, failed_epoch, "failed", error="attempt 1: exit status 2")

    browser.open(server.url + "/")
    browser.wait_for("document.body.dataset.loaded", "its first load")
    browser.wait_for("document.getElementById('live').dataset.state === 'live'", "the change stream connected")
    expected = (
        "script_generation=done voice_synthesis=done image_generation=running video_generation=pending compositing=held"
    )
    # The first load and the refresh the stream's connection asks for may still be under way on a busy machine.
    browser.wait_for(f"({STEPS_JS % 'generate-video'}) === {json.dumps(expected)}", "the pipeline's steps")
    assert steps(browser, "generate-video") == expected
    assert steps(browser, "weekly-report") == "fetch=failed"
    shown = browser.evaluate(f"document.querySelector('[data-job=\"{script}\"] pre').textContent")
    assert json.loads(shown) == {"chars": 1834, "title": "Tides"}  # an intermediate result to inspect
    assert browser.evaluate(f"document.querySelector('[data-job=\"{image}\"] progress').value") == 3
    buttons = (
        "[...document.querySelectorAll('.step button')]"
        ".map(b => b.closest('[data-job]').dataset.job + ':' + b.dataset.action)"
    )
    assert sorted(browser.evaluate(buttons)) == sorted(
        [f"{image}:cancel", f"{video}:cancel", f"{compositing}:approve", f"{compositing}:cancel", f"{report}:retry"]
    )
    browser.evaluate(f"document.querySelector('.step[data-job=\"{script}\"] details').open = true")
    shot = tmp_path / SCREENSHOT.name
    browser.screenshot(shot)
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    if os.environ.get(UPDATE_SCREENSHOT) == "1":
        SCREENSHOT.write_bytes(shot.read_bytes())

    # A job changes in the store: the page follows, from the change stream alone.
    events = int(browser.evaluate("Number(document.body.dataset.events || 0)"))
    store.progress(image, image_epoch, 8)
    store.finish(image, image_epoch, "complete")
    browser.wait_for(
        f"document.querySelector('[data-pipeline=\"generate-video\"] [data-job=\"{image}\"]')?.dataset.step === 'done'",
        "the image stage done",
    )
    assert int(browser.evaluate("Number(document.body.dataset.events)")) > events
    server.jobctl("run", video, "--", "true")
    browser.wait_for(f"document.querySelector('.step[data-job=\"{video}\"]')?.dataset.step === 'done'", "video done")

    # The held stage: nothing runs it until its approve button is pressed.
    assert server.jobctl("run", "--next", "--", "true", check=False).returncode == 3
    browser.evaluate(f"document.querySelector('.step[data-job=\"{compositing}\"] button[data-action=approve]').click()")
    browser.wait_for(
        f"document.querySelector('.step[data-job=\"{compositing}\"]')?.dataset.step === 'pending'", "the approval"
    )
    assert store.load(compositing).want == "run"
    server.jobctl("run", "--next", "--", "true")
    browser.wait_for(
        f"document.querySelector('.step[data-job=\"{compositing}\"]')?.dataset.step === 'done'", "compositing done"
    )
    assert steps(browser, "generate-video") == " ".join(
        f"{stage}=done"
        for stage in ("script_generation", "voice_synthesis", "image_generation", "video_generation", "compositing")
    )
    assert browser.evaluate("document.getElementById('message').hidden") is True  # no refusal was shown


def test_the_page_offers_retry_where_the_cause_is_and_shows_each_stage_once(
    start: Callable[..., Server], browser: Browser
) -> None:
    server = start()
    store = server.store
    fetch = submit(server, "fetch", "nightly")
    report = submit(server, "report", "nightly", (fetch,))
    epoch = store.claim(fetch, "worker-1", 60).lease.epoch
    store.finish(fetch, epoch, "failed", error="attempt 1: exit status 2")
    server.jobctl("worker", "--drain", "--handler", "report=true")  # cancels report: its dependency failed
    assert store.load(report).error == f"cancelled: dependency {fetch} ended failed"

    browser.open(server.url + "/")
    browser.wait_for("document.querySelector('[data-pipeline=\"nightly\"]')?.dataset.state === 'failed'", "failed")
    buttons = "[...document.querySelectorAll('.step button')].map(b => b.closest('[data-job]').dataset.job)"
    assert browser.evaluate(buttons) == [fetch]  # no Retry on the stage cancelled for its dependency
    pointer = f"document.querySelector('.step[data-job=\"{report}\"] [data-cancelled-for]')?.dataset.cancelledFor"
    assert browser.evaluate(pointer) == fetch

    browser.evaluate(f"document.querySelector('.step[data-job=\"{fetch}\"] button[data-action=retry]').click()")
    browser.wait_for("document.querySelector('[data-pipeline=\"nightly\"]')?.dataset.state === 'waiting'", "the retry")
    new_fetch, new_report = (
        rec.id for rec in sorted(store.list(), key=lambda r: r.created_at) if rec.id not in (fetch, report)
    )
    browser.wait_for(f"({STEPS_JS % 'nightly'}) === 'fetch=pending report=pending'", "one card a stage")
    shown = "[...document.querySelectorAll('[data-pipeline=\"nightly\"] .step')].map(s => s.dataset.job)"
    assert browser.evaluate(shown) == [new_fetch, new_report]  # the newest runs, not beside the old ones
    row = f"document.querySelector('#jobs tr[data-job=\"{fetch}\"]')"
    assert browser.evaluate(f"{row}.querySelector('[data-replaced-by]').dataset.replacedBy") == new_fetch
    assert browser.evaluate(f"{row}.querySelector('button')") is None  # retried: no second Retry
    assert browser.evaluate("document.getElementById('message').hidden") is True


def test_a_long_error_keeps_its_card_small_and_more_shows_it_whole_with_the_output(
    start: Callable[..., Server], browser: Browser
) -> None:
    server = start()
    store = server.store
    short = submit(server, "fetch", "failures")
    long = submit(server, "render", "failures")
    logged = submit(server, "encode", "failures")
    for job_id, error in ((short, "attempt 1: exit status 2"), (long, "render: " + "the disk is full. " * 85)):
        epoch = store.claim(job_id, "worker-1", 60).lease.epoch
        store.finish(job_id, epoch, "failed", error=error)
    assert len(store.load(long).error) > 1500
    script = "echo encoding frame 7; echo 'encoder: out of memory' >&2; exit 3"
    assert server.jobctl("run", logged, "--", "sh", "-c", script, check=False).returncode != 0

    browser.open(server.url + "/")
    card = "document.querySelector('.step[data-job=\"%s\"]')"
    browser.wait_for(f"{card % logged}?.dataset.step === 'failed'", "the failed cards")
    # Cards of a row stretch to the tallest: the long error's card bounds them all.
    error_height = browser.evaluate(f"{card % long}.querySelector('.error').getBoundingClientRect().height")
    card_height = browser.evaluate(f"{card % long}.getBoundingClientRect().height")
    assert error_height < 60 and card_height < 260, (error_height, card_height)  # three lines of error at most
    button = f"{card % long}.querySelector('button[data-action=retry]').getBoundingClientRect().bottom"
    assert browser.evaluate(button) < browser.evaluate("window.innerHeight")  # its button stays on screen

    browser.evaluate(f"{card % long}.querySelector('.more summary').click()")
    whole = browser.wait_for(f"{card % long}.querySelector('.full-error').checkVisibility() && 1", "the whole error")
    assert whole == 1
    assert browser.evaluate(f"{card % long}.querySelector('.full-error').textContent") == store.load(long).error
    browser.evaluate(f"{card % logged}.querySelector('.more summary').click()")
    log = f"{card % logged}.querySelector('.log')"
    browser.wait_for(f"{log}.dataset.state === 'loaded'", "the attempt's output")
    text = browser.evaluate(f"{log}.textContent")
    assert text.startswith("output of attempt 1:") and "encoding frame 7" in text and "out of memory" in text
    none = f"{card % long}.querySelector('.log')"
    browser.wait_for(f"{none}.dataset.state === 'none'", "no output for a job that never ran here")
    assert "no log of any attempt" in browser.evaluate(f"{none}.textContent")
