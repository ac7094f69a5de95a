"""``jobctl worker --app MODULE:ATTR``: a worker defined in Python, run from the command line (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobctl import FileStore, Record, results

pytestmark = pytest.mark.timeout(60)

APP = textwrap.dedent(
    """
    import os
    import jobctl

    worker = jobctl.Worker(os.environ["APP_STORE"], concurrency=3, poll_interval=0.05, ttl=5)

    @worker.processor("greet")
    def greet(job):
        return {"hello": job.spec["name"], "pid": os.getpid()}

    not_a_worker = 42
    """
)


def jobctl_worker(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "myapp.py").write_text(APP)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("JOB", "MAX_CONCURRENT"))}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "jobctl", "worker", *args],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=50,
    )


def test_the_app_runs_on_its_own_store_with_its_processors(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "app-store")
    other = tmp_path / "other-store"
    job = store.submit(Record(kind="greet", spec={"name": "otter"}))
    done = jobctl_worker(tmp_path, "--app", "myapp:worker", "--drain", APP_STORE=str(store.root), JOB_STORE=str(other))
    assert done.returncode == 0, done.stderr
    rec = store.load(job)
    assert rec.state == "complete" and results.result_of(rec)["hello"] == "otter"
    assert "kinds greet, shell, concurrency 3" in done.stderr
    assert not other.exists()  # --store and JOB_STORE do not apply: the object names its store


def test_a_flag_beats_the_objects_option_which_beats_the_environment(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    flag = jobctl_worker(tmp_path, "--app", "myapp:worker", "--drain", "--concurrency", "2", APP_STORE=store)
    assert flag.returncode == 0 and "concurrency 2," in flag.stderr
    env = jobctl_worker(tmp_path, "--app", "myapp:worker", "--drain", APP_STORE=store, MAX_CONCURRENT_JOBS="5")
    assert env.returncode == 0 and "concurrency 3," in env.stderr


@pytest.mark.parametrize(
    ("target", "code", "says"),
    [
        ("myapp", 2, "'myapp' is not MODULE:ATTR"),
        ("nosuchmodule:worker", 9, "jobctl: invalid: --app nosuchmodule:worker: cannot import nosuchmodule"),
        ("myapp:missing", 9, "myapp has no attribute missing"),
        ("myapp:not_a_worker", 9, "not_a_worker is not a jobctl.Worker (it is of type int)"),
    ],
)
def test_an_app_that_cannot_be_loaded_is_one_line_and_an_exit_code(
    tmp_path: Path, target: str, code: int, says: str
) -> None:
    done = jobctl_worker(tmp_path, "--app", target, "--drain", APP_STORE=str(tmp_path / "s"))
    assert done.returncode == code
    assert says in done.stderr and "Traceback" not in done.stderr


BAD_OPTIONS = textwrap.dedent(
    """
    import os
    import jobctl

    worker = jobctl.Worker(os.environ["APP_STORE"], ttl=float(os.environ["APP_TTL"]))
    """
)


@pytest.mark.parametrize(
    ("ttl", "code", "says"),
    [
        # Refused where it is written: the object's constructor judges it as --ttl is judged.
        ("-5", 9, "cannot import badapp: Invalid: ttl: -5.0 is not valid (lease length in seconds"),
        ("nan", 9, "ttl: nan is not valid"),
        # Valid on its own, beyond max_ttl: the refusal names the object, not a flag it was not given as.
        ("90000", 9, "ttl from --app badapp:worker: 90000 is more than max_ttl (86400, default)"),
    ],
)
def test_an_apps_option_is_judged_as_its_flag_and_named_by_its_source(
    tmp_path: Path, ttl: str, code: int, says: str
) -> None:
    (tmp_path / "badapp.py").write_text(BAD_OPTIONS)
    store = tmp_path / "s"
    done = jobctl_worker(tmp_path, "--app", "badapp:worker", "--once", APP_STORE=str(store), APP_TTL=ttl)
    assert done.returncode == code, done.stderr
    assert says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


RUNNER = textwrap.dedent(
    """
    import os
    import sys
    import jobctl

    worker = jobctl.Worker(sys.argv[1], poll_interval=0.05, ttl=5, grace=5, shutdown_grace=0.2)

    @worker.processor("long")
    def long(job):
        open(sys.argv[2], "w").close()  # running: the test may signal now
        job.wait_stop(60)
        return "stopped early"

    summary = worker.run()
    print(sorted(summary.ran.items()))
    """
)


def test_sigterm_stops_worker_run_gracefully(tmp_path: Path) -> None:
    import signal

    from workertools import wait_until

    store = FileStore(tmp_path / "s")
    job = store.submit(Record(kind="long", spec={}))
    (tmp_path / "runner.py").write_text(RUNNER)
    running = tmp_path / "running"
    proc = subprocess.Popen(
        [sys.executable, "runner.py", str(store.root), str(running)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(running.exists, what="the processor to start")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.strip() == str([(job, "pending")])  # released for somebody else, not failed
    rec = store.load(job)
    assert rec.state == "pending" and rec.lease.owner == "" and not results.has_result(rec)
