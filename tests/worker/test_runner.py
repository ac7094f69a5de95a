"""One command under a lease (jobctl.runner.Run), through the Python API, with real child processes."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from workertools import gone, job_argv, read_log, submit, wait_until

from jobctl import FileStore, Record, StaleEpoch, runner, schedule
from jobctl.errors import LeaseExpired
from jobctl.record import held
from jobctl.runner import Command, Run, log_files, log_path, logs_dir, processors, shell_command
from jobctl.store.file import is_orphan
from jobctl.store.location import address
from jobctl.wire import Raw

pytestmark = pytest.mark.timeout(60)


def run_job(store: FileStore, job_id: str, ttl: float = 1.5, grace: float = 0.5, **kw: object) -> Run:
    claimed = store.claim(job_id, "tester", ttl)
    return Run(store, claimed, processors()[claimed.kind], ttl=ttl, grace=grace, **kw)  # type: ignore[arg-type]


def when_checkpointed(store: FileStore, job_id: str, action: object) -> threading.Thread:
    """Do ``action`` in a thread once the running child has written its first checkpoint."""

    def go() -> None:
        wait_until(lambda: store.load(job_id).checkpoint is not None, what="the child's first checkpoint")
        action()  # type: ignore[operator]

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_the_child_gets_its_environment(store: FileStore, tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    code = (
        "import json, os, sys; "
        "json.dump({k: v for k, v in os.environ.items() if k.startswith('JOB_')}, open(sys.argv[1], 'w'))"
    )
    job_id = submit(store, [sys.executable, "-c", code, str(out)], kind="shell")
    outcome = run_job(store, job_id).execute()
    assert outcome.state == "complete"
    env = json.loads(out.read_text())
    assert env == {
        "JOB_STORE": address(store),  # the directory's absolute path, or the database URL as given
        "JOB_ID": job_id,
        "JOB_EPOCH": "1",
        "JOB_KIND": "shell",
        "JOB_WORK": os.path.abspath(store.work_path(job_id)),
        "JOB_ATTEMPT": "1",
        "JOB_CHECKPOINT": "null",  # none yet: JSON null, as claim --format env prints it
        "JOB_RESULT": os.path.abspath(runner.result_path(store, job_id, 1, 1)),  # where it may leave its result
    }


def test_the_checkpoint_reaches_the_successor_with_its_spelling(store: FileStore, tmp_path: Path) -> None:
    out = tmp_path / "checkpoint.txt"
    job_id = submit(store, ["sh", "-c", 'printf %s "$JOB_CHECKPOINT" > "$0"', str(out)])
    first = store.claim(job_id, "a", 30)
    store.progress(job_id, first.lease.epoch, 3, checkpoint=Raw('{"offset": 3, "rate": 1.50, "p": "a\\/b"}'))
    store.release(job_id, first.lease.epoch)
    assert run_job(store, job_id).execute().state == "complete"
    assert out.read_text() == '{"offset":3,"rate":1.50,"p":"a\\/b"}'


def test_exit_zero_completes_and_the_output_goes_to_the_attempt_log(store: FileStore) -> None:
    job_id = submit(store, ["sh", "-c", "echo out; echo err >&2"])
    outcome = run_job(store, job_id).execute()
    rec = store.load(job_id)
    assert (outcome.state, outcome.reason, outcome.exit_code, outcome.status) == ("complete", "exit", 0, 0)
    assert rec.state == "complete" and rec.error == ""
    [(attempt, path)] = log_files(store, job_id)
    assert attempt == 1 and path == outcome.log
    text = Path(path).read_text()
    assert "out\nerr\n" in text
    assert text.startswith("--- jobctl: attempt 1, epoch 1, owner tester")
    assert text.endswith("--- jobctl: exit status 0 ---\n")


def test_work_id_is_left_to_the_job(store: FileStore) -> None:
    """The log lives outside work/<id>, so a job may make work/<id> a file [JOB-W1]."""
    job_id = submit(store, ["sh", "-c", 'echo result > "$JOB_WORK"'])
    assert run_job(store, job_id).execute().state == "complete"
    work = Path(store.work_path(job_id))
    assert work.is_file() and work.read_text() == "result\n"
    assert not Path(logs_dir(store, job_id)).is_relative_to(work)
    assert Path(log_path(store, job_id, 1)).is_file()
    # A job that leaves work/<id> alone finds nothing created there.
    other = submit(store, ["true"])
    run_job(store, other).execute()
    assert not os.path.lexists(store.work_path(other))


def test_nonzero_exit_fails_with_the_error_when_there_is_no_retry_policy(store: FileStore) -> None:
    job_id = submit(store, ["sh", "-c", "exit 3"])
    outcome = run_job(store, job_id).execute()
    assert (outcome.state, outcome.exit_code, outcome.status, outcome.retried) == ("failed", 3, 3, False)
    rec = store.load(job_id)
    assert rec.state == "failed" and rec.error == "attempt 1: exit status 3"


def test_a_signal_death_is_reported_and_mirrored(store: FileStore) -> None:
    job_id = submit(store, ["sh", "-c", "kill -SEGV $$"])
    outcome = run_job(store, job_id).execute()
    assert outcome.exit_code == -11 and outcome.status == 128 + 11
    assert store.load(job_id).error == "attempt 1: killed by SIGSEGV"


def test_the_final_write_keeps_what_the_child_checkpointed(store: FileStore) -> None:
    """The child writes with the same epoch; the runner's final update re-reads and keeps it [JOB-T4]."""
    code = (
        "import os; from jobctl import open_store; "
        "open_store(os.environ['JOB_STORE']).progress(os.environ['JOB_ID'], int(os.environ['JOB_EPOCH']), 7, "
        "checkpoint={'cursor': 'z'})"
    )
    for exit_code, state in ((0, "complete"), (5, "failed")):
        job_id = submit(store, [sys.executable, "-c", f"{code}; raise SystemExit({exit_code})"])
        run_job(store, job_id).execute()
        rec = store.load(job_id)
        assert rec.state == state
        assert rec.checkpoint == {"cursor": "z"} and rec.progress.done == 7


def test_retries_follow_the_schedule_then_fail(store: FileStore) -> None:
    job_id = submit(store, ["sh", "-c", "exit 1"], intervals=[0.2, 0.4])
    seen = []
    for expected in (1, 2, 3):
        rec = store.load(job_id)
        when = schedule.not_before(rec)
        if when is not None:
            wait_until(lambda when=when: store.now() >= when, what="the not-before time")
        assert schedule.attempt(rec) == expected
        before = store.now()
        outcome = run_job(store, job_id).execute()
        seen.append((outcome.state, outcome.retried, outcome.error))
        if expected < 3:
            rec = store.load(job_id)
            assert rec.state == "pending" and not held(rec.lease, store.now())
            gap = [0.2, 0.4][expected - 1]
            nb = schedule.not_before(rec)
            assert nb is not None and (nb - before).total_seconds() >= gap
            assert not schedule.runnable([rec], store.now())  # not before its time
    assert seen == [
        ("pending", True, "attempt 1: exit status 1"),
        ("pending", True, "attempt 2: exit status 1"),
        ("failed", False, "attempt 3: exit status 1"),
    ]
    rec = store.load(job_id)
    assert rec.state == "failed" and rec.extensions[schedule.RETRY]["failures"] == 3


def test_a_non_retryable_exit_code_fails_at_once(store: FileStore) -> None:
    job_id = submit(store, ["sh", "-c", "exit 64"], intervals=[0.1, 0.1], no_retry_on=[2, 64])
    outcome = run_job(store, job_id).execute()
    assert (outcome.state, outcome.retried) == ("failed", False)
    assert store.load(job_id).extensions[schedule.RETRY]["failures"] == 1


def test_cancel_stops_the_child_and_records_the_reason(store: FileStore, side_log: Path) -> None:
    job_id = submit(store, job_argv("sleep", 30, "--ignore-term"), side_log)
    run = run_job(store, job_id)
    when_checkpointed(store, job_id, lambda: store.set_intent(job_id, "cancel", "alice"))
    outcome = run.execute()
    assert (outcome.state, outcome.reason) == ("cancelled", "cancel")
    assert outcome.exit_code == -9  # it ignored SIGTERM: SIGKILL after the grace
    rec = store.load(job_id)
    assert rec.state == "cancelled" and "alice" in rec.error
    assert rec.checkpoint is not None  # what it wrote before the stop stays [JOB-T4]
    assert gone(read_log(side_log)[0]["pid"])
    assert "killed by SIGKILL (cancel: cancelled at the request of alice)" in Path(outcome.log or "").read_text()


def test_a_cancel_before_the_start_runs_nothing(store: FileStore, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    job_id = submit(store, ["touch", str(marker)])
    claimed = store.claim(job_id, "tester", 5)
    store.set_intent(job_id, "cancel", "bob")
    claimed.intent = store.load(job_id).intent  # as a claim taken after the intent would see it
    outcome = Run(store, claimed, shell_command).execute()
    assert (outcome.state, outcome.reason, outcome.exit_code) == ("cancelled", "not-started", None)
    assert not marker.exists()


def test_pause_stops_the_child_and_releases_a_paused_job(store: FileStore, side_log: Path) -> None:
    job_id = submit(store, job_argv("sleep", 30), side_log)
    run = run_job(store, job_id)
    when_checkpointed(store, job_id, lambda: store.set_intent(job_id, "pause", "carol"))
    outcome = run.execute()
    assert (outcome.state, outcome.reason) == ("pending", "pause")
    rec = store.load(job_id)
    assert rec.state == "pending" and rec.want == "pause" and rec.lease.owner == ""
    assert not is_orphan(rec, store.now())  # paused, so nobody adopts it [JOB-I11]
    assert rec.checkpoint is not None
    assert gone(read_log(side_log)[0]["pid"])


def test_recall_stops_the_child_before_until_and_keeps_the_checkpoint(store: FileStore, side_log: Path) -> None:
    job_id = submit(store, job_argv("sleep", 30, "--ignore-term"), side_log)
    run = run_job(store, job_id, ttl=3.0, grace=5.0)  # the grace is longer than the recall allows
    when_checkpointed(store, job_id, lambda: store.recall(job_id, run.epoch, "maintenance", "ops", 1.5))
    outcome = run.execute()
    assert (outcome.state, outcome.reason) == ("pending", "recall")
    rec = store.load(job_id)
    recall = rec.lease.recall
    assert recall is not None and recall.reason == "maintenance"  # it stays after release [JOB-R6]
    assert rec.lease.owner == "" and rec.lease.expires_at is not None and recall.until is not None
    assert rec.lease.expires_at < recall.until  # released before until: yielded, not evicted
    assert rec.checkpoint is not None and rec.checkpoint["slept"] >= 1
    assert gone(read_log(side_log)[0]["pid"])


def test_a_recall_is_heard_when_the_record_is_written_not_at_the_next_read(store: FileStore) -> None:
    """A run that reads its record only at renewals (every 10 s) still yields to a 3 s recall: it hears the write."""
    job_id = submit(store, ["sleep", "60"])
    claimed = store.claim(job_id, "tester", 30)
    run = Run(store, claimed, shell_command, ttl=30, grace=5.0, check_every=30)
    threading.Timer(0.2, lambda: store.recall(job_id, claimed.lease.epoch, "maintenance", "ops", 3.0)).start()
    outcome = run.execute()
    assert (outcome.state, outcome.reason) == ("pending", "recall")  # released: yielded, not evicted
    rec = store.load(job_id)
    recall = rec.lease.recall
    assert recall is not None and recall.until is not None and rec.lease.expires_at is not None
    assert rec.lease.owner == "" and rec.lease.expires_at < recall.until


def test_a_lost_lease_kills_the_child_and_writes_nothing(store: FileStore, side_log: Path) -> None:
    job_id = submit(store, job_argv("sleep", 30), side_log)
    run = run_job(store, job_id)
    # Somebody claims it from under the run (the same owner may re-claim a live lease [JOB-O2]).
    when_checkpointed(store, job_id, lambda: store.claim(job_id, "tester", 30))
    outcome = run.execute()
    assert outcome.fenced and isinstance(outcome.verdict, StaleEpoch)
    assert outcome.status == StaleEpoch.exit_code and outcome.exit_code == -9
    rec = store.load(job_id)
    assert rec.state == "running" and rec.lease.epoch == run.epoch + 1 and rec.error == ""
    assert gone(read_log(side_log)[0]["pid"])


class _NoRenewals:
    """A store whose renewals fail for a reason that is not a verdict about the lease (an I/O error)."""

    def __init__(self, store: FileStore) -> None:
        self._store = store
        self.root = store.root

    def renew(self, job_id: str, epoch: int, ttl: float) -> Record:
        raise OSError("disk on fire")

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_a_lease_that_cannot_be_renewed_kills_the_child_before_it_runs_out(store: FileStore, side_log: Path) -> None:
    job_id = submit(store, job_argv("sleep", 30), side_log)
    claimed = store.claim(job_id, "tester", 2.0)
    outcome = Run(_NoRenewals(store), claimed, shell_command, ttl=2.0, grace=0.2).execute()  # type: ignore[arg-type]
    ended = store.now()
    assert outcome.fenced and isinstance(outcome.verdict, LeaseExpired)
    assert gone(read_log(side_log)[0]["pid"])
    # The child was reaped while the lease it held was still live: an adopter
    # could not have started yet.
    assert claimed.lease.expires_at is not None and ended < claimed.lease.expires_at
    assert store.load(job_id).state == "running"  # it wrote nothing


def test_a_timeout_fails_the_attempt(store: FileStore) -> None:
    rec = Record(kind="shell", spec={"argv": ["sleep", "30"], "timeout": 0.3})
    job_id = store.submit(rec)
    outcome = run_job(store, job_id).execute()
    assert (outcome.state, outcome.reason) == ("failed", "timeout")
    assert store.load(job_id).error == "attempt 1: timed out after 0.3 s"


def test_cwd_and_env_from_the_spec(store: FileStore, tmp_path: Path) -> None:
    rec = Record(
        kind="shell",
        spec={"argv": ["sh", "-c", 'echo "$GREETING" > here'], "cwd": str(tmp_path), "env": {"GREETING": "hi"}},
    )
    job_id = store.submit(rec)
    assert run_job(store, job_id).execute().state == "complete"
    assert (tmp_path / "here").read_text() == "hi\n"


@pytest.mark.parametrize(
    "spec",
    [
        {"argv": []},
        {"argv": "true"},
        {"cmd": ["true"]},
        {"argv": ["true"], "env": {"A": 1}},
        {"argv": ["true"], "timeout": 0},
    ],
)
def test_a_spec_the_shell_kind_cannot_run_fails_at_once(store: FileStore, spec: dict[str, object]) -> None:
    rec = Record(kind="shell", spec=spec)
    schedule.plan(rec, intervals=[0.1])
    job_id = store.submit(rec)
    outcome = run_job(store, job_id).execute()
    assert (outcome.state, outcome.reason, outcome.exit_code) == ("failed", "not-started", None)
    assert store.load(job_id).error.startswith("cannot run:")


def test_a_command_that_cannot_start_is_a_failed_attempt(store: FileStore) -> None:
    job_id = submit(store, ["/nonexistent/command"], intervals=[0.1])
    outcome = run_job(store, job_id).execute()
    assert (outcome.state, outcome.retried, outcome.exit_code) == ("pending", True, 127)
    assert "cannot start /nonexistent/command" in store.load(job_id).error


def test_a_script_with_no_interpreter_line_is_run_by_the_shell(store: FileStore, tmp_path: Path) -> None:
    """As execvp and every shell run it: ``/bin/sh SCRIPT ARG...``, its own exit status the attempt's."""
    out, script = tmp_path / "out", tmp_path / "plain script"
    script.write_text(f'echo "$0|$1|$#" > "{out}"\nexit 3\n')
    script.chmod(0o755)
    job_id = submit(store, [str(script), "one arg"], intervals=[0.1])
    outcome = run_job(store, job_id).execute()
    assert (outcome.state, outcome.retried, outcome.exit_code) == ("pending", True, 3)
    assert out.read_text() == f"{script}|one arg|1\n"
    assert store.load(job_id).error == "attempt 1: exit status 3"


def test_a_file_that_may_not_be_executed_is_not_run_by_the_shell(store: FileStore, tmp_path: Path) -> None:
    """The shell runs only what the kernel could not execute (no ``#!``), never what it may not: 126."""
    out, script = tmp_path / "out", tmp_path / "not executable"
    script.write_text(f'echo ran > "{out}"\n')
    script.chmod(0o644)
    job_id = submit(store, [str(script)], intervals=[0.1])
    outcome = run_job(store, job_id).execute()
    assert (outcome.state, outcome.retried, outcome.exit_code) == ("pending", True, 126)
    assert "Permission denied" in store.load(job_id).error and not out.exists()


def test_a_handler_gets_the_spec_on_stdin(store: FileStore, tmp_path: Path) -> None:
    out = tmp_path / "spec"
    job_id = store.submit(Record(kind="fetch", spec=Raw('{"url": "https://example.invalid/x", "n": 1.50}')))
    claimed = store.claim(job_id, "tester", 5)
    table = processors({"fetch": f'cat > {out}; echo "$JOB_KIND" >> {out}'})
    assert Run(store, claimed, table["fetch"]).execute().state == "complete"
    assert out.read_text() == '{"url":"https://example.invalid/x","n":1.50}fetch\n'


def test_nothing_the_job_started_outlives_it(store: FileStore, tmp_path: Path) -> None:
    pidfile = tmp_path / "bg"
    job_id = submit(store, ["sh", "-c", f"sleep 30 & echo $! > {pidfile}; exit 0"])
    assert run_job(store, job_id).execute().state == "complete"
    assert wait_until(lambda: gone(int(pidfile.read_text())), 5, "the background process to die")


def test_stop_releases_the_job_for_somebody_else(store: FileStore, side_log: Path) -> None:
    job_id = submit(store, job_argv("sleep", 30), side_log)
    run = run_job(store, job_id)
    when_checkpointed(store, job_id, lambda: run.stop("interrupted"))
    outcome = run.execute()
    assert (outcome.state, outcome.reason, outcome.exit_code) == ("pending", "stop", -15)
    rec = store.load(job_id)
    assert rec.state == "pending" and rec.want == "run" and is_orphan(rec, store.now())


def test_the_lease_is_renewed_while_the_child_runs(store: FileStore) -> None:
    job_id = submit(store, ["sleep", "1.5"])
    outcome = run_job(store, job_id, ttl=0.6).execute()  # four times longer than the lease
    assert outcome.state == "complete" and outcome.verdict is None


def test_an_explicit_command_overrides_the_kind(store: FileStore, tmp_path: Path) -> None:
    marker = tmp_path / "m"
    job_id = store.submit(Record(kind="anything", spec={}))
    claimed = store.claim(job_id, "tester", 5)
    outcome = Run(store, claimed, Command(["touch", str(marker)]), log=False).execute()
    assert outcome.state == "complete" and outcome.log is None and marker.exists()


#: What a child reports of how it was started: its ids, its ignored signals, its open descriptors, its cwd.
_SELF = (
    "import json, os, sys\n"
    "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
    "json.dump({'pid': os.getpid(), 'pgid': os.getpgid(0), 'ppid': os.getppid(),\n"
    "  'fds': fds, 'cwd': os.getcwd(), 'stdin': os.read(0, 100).decode()}, open(sys.argv[1], 'w'))\n"
)


def test_the_guardian_starts_the_child_in_its_own_group_with_nothing_of_its_own(
    store: FileStore, tmp_path: Path
) -> None:
    """The guardian's child: its own group leader, every signal at its default, only its three descriptors.

    The guardian ignores terminal signals and holds its socket, pipes and
    record reads open: none of it reaches the job. The same path on every
    Python (no ``process_group`` needed: ``posix_spawn`` sets the group).
    """
    out = tmp_path / "self.json"
    job_id = store.submit(Record(kind="shell", spec={"argv": [sys.executable, "-c", _SELF, str(out)], "cwd": "."}))
    run = run_job(store, job_id)
    assert run.execute().state == "complete"
    seen = json.loads(out.read_text())
    assert seen["pid"] == seen["pgid"] == run.pid  # its own process group, so a stop reaches all it starts
    assert seen["ppid"] != os.getpid()  # the guardian's child: the one process that reaps it
    assert seen["fds"][:3] == [0, 1, 2] and len(seen["fds"]) == 4  # 0-2 and the listing's own
    assert seen["cwd"] == os.getcwd() and seen["stdin"] == ""  # its cwd (relative to the worker's); stdin /dev/null
    # No signal ignored: the shell execs cat, which reads what it inherited (Python itself would ignore some).
    status = tmp_path / "status"
    job_id = submit(store, ["sh", "-c", 'exec cat /proc/self/status > "$1"', "sh", str(status)])
    assert run_job(store, job_id).execute().state == "complete"
    ignored = int(next(line for line in status.read_text().splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    # SIGINT, SIGTERM, SIGPIPE, ... at their defaults. Signals 32 and 33 are the C library's own (its
    # thread cancellation and set*id broadcast, which no program sends): glibc's posix_spawn leaves them
    # ignored, and a glibc program installs its handlers for them as it starts.
    assert ignored & ~(1 << 31 | 1 << 32) == 0, hex(ignored)


def test_a_log_cut_short_is_closed_on_adoption_with_a_line(store: FileStore) -> None:
    """A worker killed mid-attempt leaves its log open; the adopter says so before its own start line."""
    job_id = submit(store, ["sh", "-c", "echo second"])
    dead = store.claim(job_id, "dead-worker", 30)
    path = Path(log_path(store, job_id, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"--- jobctl: attempt 1, epoch 1, owner dead-worker, started x ---\npartial outp")
    store.release(job_id, dead.lease.epoch)  # as the lapse of its lease would, sooner
    assert run_job(store, job_id).execute().state == "complete"
    lines = path.read_text().splitlines()
    assert lines[1:4] == [
        "partial outp",
        "--- jobctl: cut short: its holder stopped without closing this log (its worker was killed?); "
        "adopted at epoch 2 by tester ---",
        lines[3],
    ]
    assert lines[3].startswith("--- jobctl: attempt 1, epoch 2, owner tester")
    assert lines[-2:] == ["second", "--- jobctl: exit status 0 ---"]


def test_a_closed_log_gets_no_cut_short_line(store: FileStore) -> None:
    job_id = submit(store, ["sh", "-c", "echo again"])
    path = Path(log_path(store, job_id, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"--- jobctl: attempt 1, epoch 1, owner w, started x ---\nout\n--- jobctl: released (pause) ---\n")
    assert run_job(store, job_id).execute().state == "complete"
    assert "cut short" not in path.read_text()


def test_a_guardian_killed_mid_run_leaves_no_child_running_and_fails_the_attempt(
    store: FileStore, tmp_path: Path, side_log: Path
) -> None:
    """The guardian is the child's parent: killed, it cannot kill the group, so the run does, and fails."""
    marker = tmp_path / "grandchild"
    # The job leaves a process of its group behind too: the whole group goes, not the leader alone.
    script = f'sleep 60 & echo $! > {marker}; exec "$@"'
    job_id = submit(store, ["sh", "-c", script, "sh", *job_argv("sleep", 60)], side_log)
    guardian = runner.Guardian()
    try:
        run = run_job(store, job_id, ttl=30.0, guardian=guardian)
        done: list[object] = []
        thread = threading.Thread(target=lambda: done.append(run.execute()), daemon=True)
        thread.start()
        started = wait_until(lambda: [e for e in read_log(side_log) if e["event"] == "start"], what="the child")
        wait_until(lambda: marker.exists() and marker.read_text().strip(), what="the grandchild's pid")
        assert guardian.proc is not None
        guardian.proc.kill()  # the guardian dies; the run (not stopped) sees its channel end
        thread.join(20)
        [outcome] = done
        assert outcome.error.endswith("killed: its guardian process ended")  # type: ignore[attr-defined]
        assert store.load(job_id).state in ("pending", "failed")  # under its retry policy, as a failed attempt
        assert wait_until(lambda: gone(started[0]["pid"]), 10, "the child to be killed")
        assert wait_until(lambda: gone(int(marker.read_text())), 10, "the rest of its group to be killed")
        # The next start has a new guardian: the worker goes on.
        first = guardian.proc.pid
        assert run_job(store, submit(store, ["true"]), guardian=guardian).execute().state == "complete"
        assert guardian.proc.pid != first
    finally:
        guardian.close()


def test_a_guardian_killed_after_it_started_a_command_but_before_it_said_so_leaves_it_not_running(
    tmp_path: Path,
) -> None:
    """The window a guardian as parent opens: it started the command, and died before its pid was told.

    The start's channel is filled up before the guardian gets it, so the
    guardian, having started the command, blocks telling its pid; it is
    killed there. The supervisor never learns the pid, yet the command must
    not run on (an attempt refused as not started is retried: it would run
    twice): finding the guardian gone, the supervisor kills its session.
    """
    import socket
    import time

    from jobctl.guardian import Unguarded, start_message

    marker = tmp_path / "pid"
    guardian = runner.Guardian()
    try:
        # A first start brings the guardian process up.
        until = time.monotonic() + 60
        first = guardian.start(["true"], "/bin/true", {}, cwd=None, stdout=1, stderr=2, stdin=None, kill_at=until)
        first.close()
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        try:
            while True:
                theirs.send(b"x" * 65536)
        except BlockingIOError:
            pass
        theirs.setblocking(True)
        script = f"echo $$ > {marker}.tmp && mv {marker}.tmp {marker} && exec sleep 60"
        message = start_message(
            ["sh", "-c", script], "/bin/sh", {"PATH": os.environ["PATH"]}, None, time.monotonic() + 60, None, "c"
        )
        with guardian._lock:
            assert guardian._send(message, [theirs.fileno()], False)
            generation = guardian.generation
        theirs.close()
        pid = int(wait_until(lambda: marker.exists() and marker.read_text().strip(), what="the command to start"))
        assert guardian.proc is not None
        guardian.proc.kill()  # blocked telling the pid: it dies before the supervisor learns it
        with pytest.raises(Unguarded, match="all it started was killed"):
            try:
                guardian._started(ours, time.monotonic() + 60, generation)
            finally:
                ours.close()
        assert wait_until(lambda: gone(pid), 10, "the command the guardian started unsaid to be killed")
    finally:
        guardian.close()
