"""``on_failure_url``: the worker posts a job's final failure to a webhook, and is never held up by it.

The webhook is a real HTTP server on a loopback port (tests/hookserver.py).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hookserver import hook
from workertools import WorkerProcess, job_argv, submit

from jobctl import FileStore
from jobctl.cli.main import State, cli
from jobctl.worker import Event, Worker

Workers = Callable[..., WorkerProcess]


def drain(store: FileStore, url: str) -> tuple[Worker, list[Event]]:
    events: list[Event] = []
    loop = Worker(store, poll_interval=0.05, ttl=2.0, grace=0.5, on_failure_url=url, on_event=events.append)
    loop.run("drain")
    return loop, events


def test_a_job_that_finally_fails_is_posted(store: FileStore) -> None:
    job = submit(store, job_argv("exit", 3), pipeline="nightly", stage="download", intervals=[0.05])
    fine = submit(store, ["true"])
    with hook() as served:
        loop, events = drain(store, served.url)
        (request,) = served.wait_for(1)
    body: dict[str, Any] = request.json()
    assert body == {
        "v": 1,
        "text": f"jobctl: job {job} (shell) failed on attempt 2: attempt 2: exit status 3"
        f" [pipeline nightly, stage download] ({loop.owner})",
        "event": "failed",
        "id": job,
        "kind": "shell",
        "error": "attempt 2: exit status 3",
        "attempt": 2,
        "pipeline": "nightly",
        "stage": "download",
        "worker": loop.owner,
    }
    assert request.path == "/services/T0/B0/secret"  # the whole URL is used; only its host is ever shown
    alerts = [e for e in events if e.what.startswith("alert")]
    assert [(e.what, e.job_id, e.kind) for e in alerts] == [("alert", job, "shell")]
    assert alerts[0].detail.startswith("posted to http://127.0.0.1:") and "secret" not in alerts[0].detail
    assert loop.summary["alert"] == 1 and store.load(fine).state == "complete"


def test_a_500_is_tried_again(store: FileStore) -> None:
    job = submit(store, job_argv("exit", 1))
    with hook(500) as served:
        _loop, events = drain(store, served.url)
        first, second = served.wait_for(2)
    assert first.body == second.body and first.json()["id"] == job
    said = [(e.what, e.detail) for e in events if e.what.startswith("alert")]
    assert said == [("alert", f"posted to {served.url.split('/services')[0]}/… (HTTP 200, try 2)")]


def test_a_webhook_that_refuses_is_said_in_the_log(store: FileStore) -> None:
    job = submit(store, job_argv("exit", 1))
    with hook(404) as served:
        loop, events = drain(store, served.url)
    failed = [e for e in events if e.what == "alert-failed"]
    assert [(e.job_id, e.detail.split(": ", 1)[1]) for e in failed] == [(job, "HTTP 404 (1 try)")]
    assert failed[0].line().startswith(f"alert-failed {job} kind=shell webhook http://127.0.0.1:")
    assert loop.summary["alert"] == 0


def test_a_hanging_webhook_never_holds_up_the_worker(store: FileStore, workers: Workers) -> None:
    with hook("hang") as served:
        worker = workers(concurrency=1, on_failure_url=served.url)
        doomed = submit(store, job_argv("exit", 1))
        worker.next_event(lambda e: e["what"] == "failed" and e["id"] == doomed)
        served.wait_for(1)  # the post of doomed's alert has started, and hangs
        later = [submit(store, ["true"]) for _ in range(3)]
        for job in later:  # one at a time, oldest first: concurrency 1
            worker.next_event(lambda e, job=job: e["what"] == "complete" and e["id"] == job)
        # They ran while the post hung: nobody has answered it yet, and no alert line came.
        assert all(store.load(j).state == "complete" for j in later)
        assert served.hanging == 1 and len(served.requests) == 1
        assert not any(e["what"].startswith("alert") for e in worker.seen)
        served.release()
        posted = worker.next_event(lambda e: e["what"].startswith("alert"))
        assert (posted["what"], posted["id"]) == ("alert", doomed)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    assert worker.summary()["alert"] == 1


# -- the command line ------------------------------------------------------------------------


def invoke(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    environ = {"JOB_STORE": str(root), "JOBCTL_CONFIG": str(root.parent / "no-config.ini"), **(env or {})}
    state = State(terminal=False, env=environ)
    return CliRunner().invoke(cli, list(args), obj=state, env=environ, catch_exceptions=False)


@pytest.mark.file_only("the command line is given the directory, with a config file beside it")
def test_worker_on_failure_url_posts_and_says_so(store: FileStore, root: Path) -> None:
    first = submit(store, job_argv("exit", 5))
    with hook() as served:
        host = served.url.split("/services")[0]
        ran = invoke(root, "worker", "--drain", "--on-failure-url", served.url)
        assert ran.exit_code == 17, ran.stderr
        assert served.wait_for(1)[0].json()["id"] == first
        assert f"jobctl worker: alert {first} kind=shell posted to {host}/… (HTTP 200)\n" in ran.stderr
        # The same from the environment, as every worker setting.
        second = submit(store, job_argv("exit", 5))
        ran = invoke(root, "worker", "--drain", "-q", env={"JOBCTL_ON_FAILURE_URL": served.url})
        assert served.wait_for(2)[1].json()["id"] == second
    assert "secret" not in ran.stderr


@pytest.mark.file_only("the command line is given the directory, with a config file beside it")
def test_a_malformed_url_is_a_usage_error_naming_the_option(root: Path) -> None:
    FileStore(root)
    ran = invoke(root, "worker", "--drain", "--on-failure-url", "hooks.slack.com/services/x")
    assert ran.exit_code == 2
    assert "Invalid value for '--on-failure-url'" in ran.stderr and "not an http or https URL" in ran.stderr
    ran = invoke(root, "worker", "--drain", env={"JOBCTL_ON_FAILURE_URL": "ftp://example.com/x"})
    assert ran.exit_code == 9
    assert ran.stderr.startswith("jobctl: invalid: on_failure_url from env JOBCTL_ON_FAILURE_URL: ")


@pytest.mark.file_only("the command line is given the directory, with a config file beside it")
def test_paths_shows_the_webhook_host_not_its_secret(root: Path, tmp_path: Path) -> None:
    FileStore(root)
    config = tmp_path / "config.ini"
    config.write_text("[worker]\non_failure_url = https://hooks.slack.com/services/T0/B0/secret\n")
    ran = invoke(root, "paths", "--json", env={"JOBCTL_CONFIG": str(config)})
    rows = {row["name"]: row for row in json.loads(ran.stdout)["worker"]}
    assert rows["on_failure_url"]["value"] == "https://hooks.slack.com/…"
    assert rows["on_failure_url"]["source"] == f"config {config}"
    assert "secret" not in ran.stdout


def test_a_python_workers_processor_failure_is_posted_too(store: FileStore) -> None:
    import jobctl
    from jobctl.record import Record

    with hook() as served:
        app = jobctl.Worker(store, poll_interval=0.05, on_failure_url=served.url, on_event=lambda event: None)

        @app.processor("doomed")
        def doomed(job: jobctl.Job) -> None:
            raise jobctl.NotRetryable("bad input")

        job_id = store.submit(Record(kind="doomed", spec={}))
        assert app.drain().ran == {job_id: "failed"}
        (request,) = served.wait_for(1)
    body = request.json()
    assert (body["id"], body["kind"], body["error"]) == (job_id, "doomed", "attempt 1: NotRetryable: bad input")


def test_a_python_worker_refuses_a_webhook_that_is_not_http(store: FileStore) -> None:
    import pytest

    import jobctl
    from jobctl.errors import Invalid

    with pytest.raises(Invalid, match="on_failure_url"):
        jobctl.Worker(store, on_failure_url="ftp://example.com/hook")
