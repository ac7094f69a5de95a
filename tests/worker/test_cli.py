"""The worker-side commands: ``jobctl run``, ``worker``, ``logs`` and ``pipeline``.

CliRunner where the command's own process is enough; a real ``jobctl``
process where signals, or a child calling ``jobctl`` itself, are the point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from workertools import gone, job_argv, no_config, read_log, submit, wait_until

from jobctl import FileStore, Record, schedule
from jobctl.cli.main import State, cli
from jobctl.errors import NotFound, Refused

pytestmark = pytest.mark.timeout(60)

JOBCTL = str(Path(sys.executable).parent / "jobctl")


def invoke(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    environ = {"JOB_STORE": str(root), "JOBCTL_CONFIG": no_config(), **(env or {})}
    state = State(terminal=False, env=environ)
    return CliRunner().invoke(cli, list(args), obj=state, env=environ, catch_exceptions=False)


def process_env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_", "MAX_CONCURRENT"))}
    env.update({"JOB_STORE": str(root), "JOBCTL_CONFIG": no_config(), **extra})
    return env


# -- run -----------------------------------------------------------------------------------------


def test_run_mirrors_the_exit_status_and_shows_the_output(store: FileStore, root: Path) -> None:
    job = submit(store, ["true"])
    result = invoke(root, "run", job, "--", "sh", "-c", 'echo "hi $JOB_ID $JOB_ATTEMPT"; exit 4')
    assert result.exit_code == 4
    assert result.stdout == f"hi {job} 1\n"
    assert f"{job} failed (attempt 1: exit status 4)" in result.stderr
    assert store.load(job).state == "failed"


def test_run_without_a_command_runs_the_shell_spec(store: FileStore, root: Path) -> None:
    job = submit(store, ["sh", "-c", "echo from-spec"])
    result = invoke(root, "run", job)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "from-spec\n", "")
    assert store.load(job).state == "complete"


def test_run_next_takes_the_oldest_runnable_of_a_kind(store: FileStore, root: Path) -> None:
    store.submit(Record(kind="other", spec={}))
    first = submit(store, ["true"])
    submit(store, ["true"])
    result = invoke(root, "--json", "run", "--next", "--kind", "shell", "--", "true")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert (out["v"], out["id"], out["state"], out["exit_code"], out["attempt"]) == (1, first, "complete", 0, 1)
    nothing = invoke(root, "run", "--next", "--kind", "nothing", "--", "true")
    assert nothing.exit_code == NotFound.exit_code and "no runnable job of kind nothing" in nothing.stderr


def test_run_schedules_the_retry_and_says_when(store: FileStore, root: Path) -> None:
    job = submit(store, ["sh", "-c", "exit 1"], intervals=[30])
    result = invoke(root, "run", job)
    assert result.exit_code == 1
    assert "pending (attempt 1: exit status 1; next attempt not before" in result.stderr
    rec = store.load(job)
    assert rec.state == "pending" and schedule.attempt(rec) == 2


def test_run_refuses_a_paused_job_and_one_that_waits(store: FileStore, root: Path) -> None:
    paused = submit(store, ["true"], hold=True)
    result = invoke(root, "run", paused)
    assert result.exit_code == Refused.exit_code and "paused" in result.stderr
    dep = submit(store, ["true"])
    waits = submit(store, ["true"], after=[dep])
    result = invoke(root, "run", waits)
    assert result.exit_code == Refused.exit_code and f"waiting for {dep}" in result.stderr
    assert store.load(waits).lease.epoch == 0 and store.load(paused).lease.epoch == 0


def test_run_gives_back_a_job_it_has_no_command_for(store: FileStore, root: Path) -> None:
    job = store.submit(Record(kind="resize", spec={}))
    result = invoke(root, "run", job)
    assert result.exit_code == Refused.exit_code and "--handler resize=CMD" in result.stderr
    rec = store.load(job)
    assert rec.state == "pending" and rec.lease.owner == ""
    handled = invoke(root, "run", job, "--handler", "resize=cat")
    assert (handled.exit_code, handled.stdout) == (0, "{}")


def test_a_child_checkpoints_through_jobctl_with_no_flags(store: FileStore, root: Path) -> None:
    job = submit(store, ["true"])
    script = f'{JOBCTL} checkpoint \'{{"page": 7}}\' --done 7 >/dev/null && test "$JOB_CHECKPOINT" = null'
    proc = subprocess.run([JOBCTL, "run", job, "--", "sh", "-c", script], env=process_env(root), timeout=30)
    assert proc.returncode == 0
    rec = store.load(job)
    assert (rec.state, rec.checkpoint, rec.progress.done) == ("complete", {"page": 7}, 7)


def test_sigterm_to_run_stops_the_child_and_releases(store: FileStore, root: Path, side_log: Path) -> None:
    job = submit(store, job_argv("sleep", 60), side_log)
    proc = subprocess.Popen([JOBCTL, "run", job], env=process_env(root), stdout=subprocess.DEVNULL)
    started = wait_until(lambda: [e for e in read_log(side_log) if e["event"] == "start"], what="the child")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 128 + signal.SIGTERM
    assert gone(started[0]["pid"])
    rec = store.load(job)
    assert rec.state == "pending" and rec.lease.owner == "" and rec.want == "run"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_every_stopping_signal_to_run_stops_the_child_and_releases(
    store: FileStore, root: Path, side_log: Path, sig: signal.Signals
) -> None:
    """A terminal hung up (SIGHUP) or Ctrl-\\ (SIGQUIT) too: not the job left held until its lease lapses."""
    job = submit(store, job_argv("sleep", 60), side_log)
    proc = subprocess.Popen([JOBCTL, "run", job], env=process_env(root), stdout=subprocess.DEVNULL)
    started = wait_until(lambda: [e for e in read_log(side_log) if e["event"] == "start"], what="the child")
    proc.send_signal(sig)
    assert proc.wait(20) == 128 + sig
    assert gone(started[0]["pid"])
    rec = store.load(job)
    assert rec.state == "pending" and rec.lease.owner == "" and rec.want == "run"


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_and_at_a_second_signal(
    store: FileStore, root: Path, side_log: Path
) -> None:
    for second in (False, True):
        side_log.unlink(missing_ok=True)
        job = submit(store, job_argv("sleep", 60, "--ignore-term"), side_log)
        grace = "30" if second else "0.5"
        argv = [JOBCTL, "run", job, "--grace", grace]
        proc = subprocess.Popen(argv, env=process_env(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started = wait_until(lambda: [e for e in read_log(side_log) if e["event"] == "start"], what="the child")
        proc.send_signal(signal.SIGINT)
        if second:  # a second Ctrl-C: SIGKILL at once, not after --grace 30
            time.sleep(0.5)  # two of one signal pending at once are one signal
            proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        finally:
            proc.kill()
        assert proc.returncode == 130 and gone(started[0]["pid"])
        assert "(killed by SIGKILL)" in err.decode()
        assert store.load(job).state == "pending"


def test_run_gives_the_command_no_stdin_but_dev_null(store: FileStore, root: Path) -> None:
    """As documented: the input of a job is its spec, the same for a worker that adopts it."""
    job = submit(store, ["true"])
    script = 'readlink /proc/self/fd/0; cat; echo "status $?"'
    argv = [JOBCTL, "run", job, "--", "sh", "-c", script]
    proc = subprocess.run(argv, env=process_env(root), input=b"x\n", capture_output=True, timeout=30)
    assert (proc.returncode, proc.stdout) == (0, b"/dev/null\nstatus 0\n")


def test_run_of_a_directory_is_126_is_a_directory_as_a_shell_says(store: FileStore, root: Path, tmp_path: Path) -> None:
    job = submit(store, ["true"])
    result = invoke(root, "run", job, "--", str(tmp_path))
    assert result.exit_code == 126
    assert result.stderr == f"jobctl: run: {job} failed (attempt 1: cannot start {tmp_path}: Is a directory)\n"
    assert store.load(job).state == "failed"


def test_a_sigkilled_run_takes_its_child_with_it(store: FileStore, root: Path, side_log: Path) -> None:
    """``jobctl run``'s guardian, the child's parent, kills it when the run's socket to it closes."""
    job = submit(store, job_argv("sleep", 60), side_log)
    proc = subprocess.Popen([JOBCTL, "run", job], env=process_env(root), stdout=subprocess.DEVNULL)
    started = wait_until(lambda: [e for e in read_log(side_log) if e["event"] == "start"], what="the child")
    proc.kill()
    proc.wait(10)
    assert wait_until(lambda: gone(started[0]["pid"]), 10, "the child to die with its supervisor")


# -- worker ------------------------------------------------------------------------------------------


def test_worker_drain_runs_everything_and_reports(store: FileStore, root: Path, tmp_path: Path) -> None:
    alerts = tmp_path / "alerts"
    ok = submit(store, ["true"])
    bad = submit(store, ["sh", "-c", "exit 2"])
    fetch = store.submit(Record(kind="fetch", spec={"u": 1}))
    proc = subprocess.run(
        [JOBCTL, "worker", "--drain", "--concurrency", "2", "--handler", "fetch=cat >/dev/null"],
        env=process_env(root, JOBCTL_ON_FAILURE=f'echo "$JOB_ID $JOB_ATTEMPT" > {alerts}'),
        capture_output=True,
        text=True,
        timeout=60,
    )
    # A job it ran failed: the documented exit code, and the last line names it.
    assert proc.returncode == 17, proc.stderr
    assert proc.stderr.splitlines()[-1] == f"jobctl worker: 1 job(s) it ran did not end complete: {bad} failed"
    assert [store.load(j).state for j in (ok, bad, fetch)] == ["complete", "failed", "complete"]
    assert alerts.read_text() == f"{bad} 1\n"
    assert f"jobctl worker: failed {bad} kind=shell attempt 1: exit status 2" in proc.stderr
    assert "kinds fetch, shell, concurrency 2" in proc.stderr
    assert proc.stdout == ""


def test_worker_json_streams_events(store: FileStore, root: Path) -> None:
    job = submit(store, ["true"])
    result = invoke(root, "--json", "worker", "--once", "--poll-interval", "0.05")
    assert result.exit_code == 0
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["event"], e["id"]) for e in events] == [("started", job), ("complete", job)]
    assert events[1]["outcome"]["state"] == "complete" and events[0]["v"] == 1


def test_worker_settings_come_from_flags_then_env_then_the_config_file(store: FileStore, root: Path) -> None:
    config = Path(no_config())
    config.write_text("[worker]\nconcurrency = 3\nttl = 9\n[handlers]\nresize = cat\n")
    result = invoke(root, "worker", "--once", "--ttl", "7", env={"MAX_CONCURRENT_JOBS": "2"})
    assert result.exit_code == 0
    assert "kinds resize, shell, concurrency 2, ttl 7 s, mode once" in result.stderr
    bad = invoke(root, "worker", "--once", env={"JOBCTL_GRACE": "soon"})
    assert bad.exit_code == 9 and "env JOBCTL_GRACE" in bad.stderr


def test_worker_sigterm_is_graceful(store: FileStore, root: Path, side_log: Path) -> None:
    job = submit(store, job_argv("sleep", 0.5), side_log)
    proc = subprocess.Popen(
        [JOBCTL, "worker", "--poll-interval", "0.05"], env=process_env(root), stderr=subprocess.PIPE, text=True
    )
    wait_until(lambda: read_log(side_log), what="the job to start")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert store.load(job).state == "complete"


# -- logs and pipeline ----------------------------------------------------------------------------------


def test_logs_prints_every_attempt(store: FileStore, root: Path) -> None:
    job = submit(store, ["sh", "-c", 'echo "try $JOB_ATTEMPT"; exit 1'], intervals=[0])
    invoke(root, "run", job)
    invoke(root, "run", job)
    result = invoke(root, "logs", job)
    assert result.exit_code == 0
    assert result.stdout.count("--- jobctl: attempt") == 2
    assert "try 1\n" in result.stdout and "try 2\n" in result.stdout
    second = invoke(root, "logs", job, "--attempt", "2")
    assert "try 1" not in second.stdout and "try 2\n" in second.stdout
    listed = [json.loads(line) for line in invoke(root, "--json", "logs", job).stdout.splitlines()]
    assert [(e["attempt"], Path(e["path"]).name) for e in listed] == [
        (1, f"{job}.attempt-1.log"),
        (2, f"{job}.attempt-2.log"),
    ]
    assert invoke(root, "logs", job, "--attempt", "3").exit_code == NotFound.exit_code
    assert invoke(root, "logs", "1-nosuchjob").exit_code == NotFound.exit_code


def test_logs_follow_ends_with_the_job(store: FileStore, root: Path) -> None:
    job = submit(store, ["sh", "-c", "echo one; sleep 0.5; echo two"])
    runner = subprocess.Popen([JOBCTL, "run", job], env=process_env(root), stdout=subprocess.DEVNULL)
    wait_until(lambda: store.load(job).lease.owner, what="the claim")
    follow = subprocess.run([JOBCTL, "logs", job, "-f"], env=process_env(root), capture_output=True, timeout=30)
    assert runner.wait(30) == 0
    assert b"one\ntwo\n" in follow.stdout and follow.stdout.endswith(b"--- jobctl: exit status 0 ---\n")


def test_pipeline_shows_its_stages_in_order(store: FileStore, root: Path) -> None:
    fetch = submit(store, ["true"], pipeline="nightly", stage="fetch")
    left = submit(store, ["false"], after=[fetch], pipeline="nightly", stage="left")
    right = submit(store, ["true"], after=[fetch], pipeline="nightly", stage="right")
    join = submit(store, ["true"], after=[left, right], pipeline="nightly", stage="join")
    submit(store, ["true"], pipeline="other")
    before = invoke(root, "pipeline", "nightly").stdout.splitlines()
    assert before == [
        "pipeline nightly waiting",
        f"fetch waiting {fetch} ready; no worker has taken it yet",
        f"left waiting {left} for {fetch} (pending)",
        f"right waiting {right} for {fetch} (pending)",
        f"join waiting {join} for {left} (pending)",
    ]
    invoke(root, "worker", "--drain", "--poll-interval", "0.05")
    after = invoke(root, "pipeline", "nightly").stdout.splitlines()
    assert after == [
        "pipeline nightly failed",
        f"fetch done {fetch}",
        f"left failed {left} attempt 1: exit status 1",
        f"right done {right}",
        f"join cancelled {join} cancelled: dependency {left} ended failed",
    ]
    rows = [json.loads(line) for line in invoke(root, "--json", "pipeline", "nightly").stdout.splitlines()]
    assert rows[3] == {
        "v": 1,
        "pipeline": "nightly",
        "pipeline_state": "failed",
        "stage": "join",
        "id": join,
        "status": "cancelled",
        "state": "cancelled",
        "detail": f"cancelled: dependency {left} ended failed",
        "after": [left, right],
        "history": [],
    }
    assert invoke(root, "pipeline", "nosuch").exit_code == NotFound.exit_code


# -- drain: retries, exit status, what it leaves (issue 7 items 3 and 9) ------------------------


def test_drain_waits_for_the_retries_of_the_jobs_it_ran_and_exits_0_when_all_complete(
    store: FileStore, root: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "failed-once"
    # Fails on its first attempt, succeeds on its second, one second later.
    flaky = submit(store, ["sh", "-c", f"[ -e {marker} ] || {{ touch {marker}; exit 1; }}"], intervals=[1])
    after = submit(store, ["true"], after=[flaky])
    proc = subprocess.run(
        [JOBCTL, "worker", "--drain", "--poll-interval", "0.1"],
        env=process_env(root),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert [store.load(j).state for j in (flaky, after)] == ["complete", "complete"]
    waits = [line for line in proc.stderr.splitlines() if line.startswith("jobctl worker: waiting ")]
    assert len(waits) == 1, proc.stderr
    assert waits[0].startswith(f"jobctl worker: waiting {flaky} kind=shell attempt 2 not before ")


def test_drain_does_not_wait_for_what_it_did_not_start(store: FileStore, root: Path) -> None:
    from datetime import timedelta

    later = submit(store, ["true"], start_after=store.now() + timedelta(hours=1))
    held_job = submit(store, ["true"], hold=True)
    leased = submit(store, ["true"])
    store.claim(leased, "somebody-else", 3600)
    proc = subprocess.run(
        [JOBCTL, "worker", "--drain", "--poll-interval", "0.1"],
        env=process_env(root),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert [store.load(j).state for j in (later, held_job, leased)] == ["pending", "pending", "running"]
    assert "waiting" not in proc.stderr


def test_drain_names_kinds_it_cannot_run_and_a_kind_without_handler_is_a_usage_error(
    store: FileStore, root: Path
) -> None:
    for _ in range(2):
        store.submit(Record(kind="thumb", spec={"u": 1}))
    store.submit(Record(kind="resize", spec={"u": 1}))
    proc = subprocess.run(
        [JOBCTL, "worker", "--drain", "--quiet"], env=process_env(root), capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "jobctl worker: unhandled kind=resize 1 pending job(s) left: no handler for kind resize",
        "jobctl worker: unhandled kind=thumb 2 pending job(s) left: no handler for kind thumb",
    ]
    ran = invoke(root, "worker", "--kind", "thumb", "--drain")
    assert ran.exit_code == 2
    assert "no handler for kind thumb: give one with --handler thumb=CMD" in ran.stderr


def _quiet_drain(root: Path) -> subprocess.CompletedProcess[str]:
    """``jobctl worker --drain --quiet`` on the store at ``root``, its output kept."""
    return subprocess.run(
        [JOBCTL, "worker", "--drain", "--quiet", "--poll-interval", "0.05"],
        env=process_env(root),
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.file_only("writes garbage into a record file; a database row is only ever written whole")
def test_an_unreadable_record_is_named_once_and_its_dependents_are_blocked(store: FileStore, root: Path) -> None:
    broken = "1787202430967-a752f9a9c2c77b123ffd"
    path = Path(store.path(broken))
    path.write_bytes(b"garbage")
    waiting = submit(store, ["true"], after=[broken])
    ok = submit(store, ["true"])
    proc = _quiet_drain(root)
    assert proc.returncode == 0, proc.stderr
    assert store.load(ok).state == "complete" and store.load(waiting).state == "pending"
    assert proc.stderr.splitlines() == [
        f"jobctl worker: unreadable {broken} {path}: record is not valid JSON at byte 0",
        f"jobctl worker: blocked {waiting} kind=shell waits for {broken}, which cannot be read",
    ]


def test_claim_env_and_run_agree_on_job_checkpoint_when_there_is_none(store: FileStore, root: Path) -> None:
    claimed = submit(store, ["true"])
    line = invoke(root, "claim", claimed, "--owner", "a", "--format", "env").stdout
    ran = submit(store, ["true"])
    seen = invoke(root, "run", ran, "--", "sh", "-c", 'printf %s "${JOB_CHECKPOINT-unset}"').stdout
    assert line.rstrip("\n").endswith(" JOB_CHECKPOINT=null")
    assert seen == "null"  # the same JSON null, which `jq -r '.offset // 0'` reads as 0


@pytest.mark.file_only("plants a stray file in jobs/; a database has no file names")
def test_a_stray_record_file_whose_name_is_no_id_is_named_and_the_worker_goes_on(store: FileStore, root: Path) -> None:
    (root / "jobs" / "stray\nname.json").write_bytes(b"garbage")  # path() refuses such an id
    ok = submit(store, ["true"])
    proc = _quiet_drain(root)
    assert proc.returncode == 0, proc.stderr
    assert store.load(ok).state == "complete"
    assert "jobctl worker: unreadable stray" in proc.stderr, proc.stderr


def test_a_kind_another_writer_made_with_a_newline_stays_on_one_line_of_the_workers_output(
    store: FileStore, root: Path
) -> None:
    """A worker's stderr is read line by line (journald, a log file): a record's text once split its line in two."""
    from jobctl.record import encode

    store.import_bytes(encode(Record(id="odd-kind", kind="evil\nkind", spec={})))  # as another writer may leave it
    proc = _quiet_drain(root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "jobctl worker: unhandled kind=evil\\nkind 1 pending job(s) left: no handler for kind evil\\nkind"
    ], proc.stderr
