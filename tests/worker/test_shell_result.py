"""A shell job's result: the JSON a child leaves at ``$JOB_RESULT``, stored with the write that completes it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobctl import FileStore, Record, results, runner
from jobctl.runner import Run, processors
from jobctl.worker import Worker

pytestmark = pytest.mark.timeout(60)


def sh(store: FileStore, script: str, **spec: object) -> str:
    return store.submit(Record(kind="shell", spec={"argv": ["/bin/sh", "-c", script], **spec}))


def run(store: FileStore, job_id: str) -> runner.Outcome:
    claimed = store.claim(job_id, "tester", 5.0)
    return Run(store, claimed, processors()[claimed.kind], ttl=5.0, grace=0.5).execute()


def test_the_json_a_child_leaves_is_stored_with_the_completion(store: FileStore) -> None:
    job = sh(store, """printf '{"frames": 240, "file": "out/v.mp4"}' > "$JOB_RESULT"; echo "$JOB_RESULT" """)
    out = run(store, job)
    assert (out.state, out.status) == ("complete", 0)
    rec = store.load(job)
    assert results.has_result(rec) and results.result_of(rec) == {"frames": 240, "file": "out/v.mp4"}
    # The record holds it now: the file is gone, and it was inside the store, beside the attempt's log.
    path = runner.result_path(store, job, 1, rec.lease.epoch)
    assert not os.path.lexists(path)
    assert path.startswith(runner.logs_dir(store, job) + os.sep)
    log = runner.log_read(store, job, 1) or b""
    assert os.path.abspath(path).encode() in log  # what the child was given


def test_no_file_no_result(store: FileStore) -> None:
    job = sh(store, 'test -n "$JOB_RESULT" && test ! -e "$JOB_RESULT"')
    assert run(store, job).state == "complete"
    assert not results.has_result(store.load(job))


def test_null_is_a_result(store: FileStore) -> None:
    job = sh(store, 'echo null > "$JOB_RESULT"')
    assert run(store, job).state == "complete"
    rec = store.load(job)
    assert results.has_result(rec) and results.result_of(rec) is None


def test_a_failed_run_stores_no_result(store: FileStore) -> None:
    job = sh(store, 'echo \'{"partial": true}\' > "$JOB_RESULT"; exit 3')
    out = run(store, job)
    assert (out.state, out.exit_code) == ("failed", 3)
    assert not results.has_result(store.load(job))


def test_invalid_json_fails_the_attempt_naming_the_job_and_the_variable(store: FileStore) -> None:
    job = sh(store, "echo 'not json' > \"$JOB_RESULT\"")
    out = run(store, job)
    assert (out.state, out.reason, out.status) == ("failed", "result", 1)
    rec = store.load(job)
    assert rec.state == "failed" and not results.has_result(rec)
    assert rec.error.startswith(f"attempt 1: job {job}: $JOB_RESULT (")
    assert "result is not JSON" in rec.error


def test_invalid_json_is_retried_under_the_retry_policy(store: FileStore) -> None:
    job = store.submit(
        Record(
            kind="shell",
            spec={"argv": ["/bin/sh", "-c", "echo '{' > \"$JOB_RESULT\""]},
            extensions={"jobctl.run/retry@1": {"intervals": [0]}},
        )
    )
    out = run(store, job)
    assert out.retried and out.state == "pending"
    assert "$JOB_RESULT" in store.load(job).error


def test_a_link_at_the_result_is_refused_not_followed(store: FileStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('{"planted": true}')
    job = sh(store, f'ln -s {outside} "$JOB_RESULT"')
    out = run(store, job)
    assert out.state == "failed"
    rec = store.load(job)
    assert "symbolic link" in rec.error and "$JOB_RESULT" in rec.error
    assert not results.has_result(rec)


def test_a_result_too_large_is_refused(store: FileStore) -> None:
    size = results.RESULT_MAX_BYTES + 10
    job = sh(store, f"head -c {size} /dev/zero | tr '\\0' ' ' > \"$JOB_RESULT\"")
    out = run(store, job)
    assert out.state == "failed" and "$JOB_RESULT" in store.load(job).error


def test_a_file_left_at_the_name_before_the_start_is_not_taken_for_the_result(store: FileStore) -> None:
    job = sh(store, "true")
    claimed = store.claim(job, "tester", 5.0)
    path = Path(runner.result_path(store, job, 1, claimed.lease.epoch))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"stale": true}')
    out = Run(store, claimed, processors()["shell"], ttl=5.0, grace=0.5).execute()
    assert out.state == "complete"
    assert not results.has_result(store.load(job))


@pytest.mark.file_only("plants a link inside the directory store's work area")
def test_a_linked_log_directory_is_not_followed_and_the_job_runs_without_job_result(
    store: FileStore, tmp_path: Path
) -> None:
    """As with the log: no $JOB_RESULT beats no run, and nothing is written through the link."""
    seen = tmp_path / "seen"
    job = sh(store, f'printf "%s" "${{JOB_RESULT-unset}}" > {seen}; echo 1 > "${{JOB_RESULT:-/dev/null}}"')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    logs = Path(runner.logs_dir(store, job))
    logs.parent.mkdir(parents=True)
    os.symlink(elsewhere, logs)
    out = run(store, job)
    assert out.state == "complete" and seen.read_text() == "unset"
    assert list(elsewhere.iterdir()) == []
    assert not results.has_result(store.load(job))


def test_the_worker_stores_a_shell_jobs_result(store: FileStore) -> None:
    job = sh(store, "printf '[1, 2, 3]' > \"$JOB_RESULT\"")
    Worker(store, poll_interval=0.05, ttl=5.0, notices=False).run("drain")
    rec = store.load(job)
    assert rec.state == "complete" and results.result_of(rec) == [1, 2, 3]
    assert json.loads(store.load_bytes(job))["extensions"][results.RESULT] == [1, 2, 3]  # the shared key, in the record
