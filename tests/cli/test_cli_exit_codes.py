"""Every exit code, pinned: each verdict class its own, usage 2, other failures 1, and wait's own.

A refusal prints one line on stderr (`jobctl: <verdict>: <what>; <next step>`),
nothing on stdout, and leaves the record's bytes exactly as they were.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from clitools import JOBCTL, Jobctl, Ran

import jobctl.cli.main as cli_main
from jobctl import errors
from jobctl.record import encode


def refused(ran: Ran, cls: type[errors.JobError], job: str | None = None) -> str:
    assert ran.code == cls.exit_code, (ran.code, ran.err)
    assert ran.out == b""
    lines = ran.err.splitlines()
    assert len(lines) == 1, ran.err
    assert lines[0].startswith(f"jobctl: {cls.verdict}: "), lines[0]
    assert "Traceback" not in ran.err
    if job is not None:
        assert job in lines[0]
    return lines[0]


def test_the_codes_are_distinct_and_match_the_library() -> None:
    codes = {cls.verdict: cls.exit_code for cls in set(errors.VERDICTS.values())}
    assert codes == {
        "not_found": 3,
        "lease_held": 4,
        "stale_epoch": 5,
        "lease_expired": 6,
        "terminal": 7,
        "unknown_schema": 8,
        "invalid": 9,
        "refused": 10,
        "exists": 15,
    }
    others = [
        cli_main.EXIT_OK,
        errors.EXIT_FAILURE,
        errors.EXIT_USAGE,
        cli_main.EXIT_FAILED,
        cli_main.EXIT_CANCELLED,
        cli_main.EXIT_ENDED_OTHERWISE,
        cli_main.EXIT_TIMEOUT,
        cli_main.EXIT_INTERRUPTED,
        cli_main.EXIT_BROKEN_PIPE,
        errors.EXIT_WRITE_FAILED,
    ]
    assert others == [0, 1, 2, 11, 12, 13, 124, 130, 141, 14]
    assert errors.WriteFailed.exit_code == 14 and errors.WriteFailed.verdict == "refused"
    assert len(set(others) | set(codes.values())) == len(others) + len(codes)


def test_not_found_exits_3(jobctl: Jobctl) -> None:
    line = refused(jobctl("show", "1787202430967-a752f9a9c2c77b123ffd"), errors.NotFound)
    assert "1787202430967-a752f9a9c2c77b123ffd" in line and "jobctl list" in line
    assert refused(jobctl("claim", "nope", "--owner", "a"), errors.NotFound, "nope")


def test_claim_next_with_nothing_runnable_exits_3(jobctl: Jobctl) -> None:
    line = refused(jobctl("claim", "--next", "--kind", "backup"), errors.NotFound)
    assert line == (
        "jobctl: not_found: no runnable job of kind backup; nothing to do now; submit a job, or try again later"
    )


def test_lease_held_exits_4_and_leaves_the_record(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a", "--ttl", "300")
    before = jobctl.record(job)
    line = refused(jobctl("claim", job, "--owner", "b"), errors.LeaseHeld, job)
    assert "held by a" in line
    assert jobctl.record(job) == before


def test_stale_epoch_exits_5_and_leaves_the_record(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a", "--ttl", "0")  # lapses at once
    jobctl("claim", job, "--owner", "b", "--ttl", "300")
    before = jobctl.record(job)
    for args in (
        ("progress", job, "--epoch", "1", "--done", "5"),
        ("checkpoint", job, "{}", "--epoch", "1"),
        ("finish", job, "--epoch", "1", "--state", "complete"),
        ("release", job, "--epoch", "1"),
        ("renew", job, "--epoch", "1"),
    ):
        line = refused(jobctl(*args), errors.StaleEpoch, job)
        assert f"jobctl show {job}" in line
    assert jobctl.record(job) == before


def test_lease_expired_exits_6(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a", "--ttl", "0")
    before = jobctl.record(job)
    line = refused(jobctl("progress", job, "--epoch", "1", "--done", "1"), errors.LeaseExpired, job)
    assert f"jobctl claim {job}" in line
    assert jobctl.record(job) == before


def test_terminal_exits_7(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a")
    jobctl("finish", job, "--epoch", "1", "--state", "complete")
    before = jobctl.record(job)
    refused(jobctl("progress", job, "--epoch", "1"), errors.Terminal, job)
    refused(jobctl("claim", job, "--owner", "a"), errors.Terminal, job)
    refused(jobctl("intent", job, "pause"), errors.Terminal, job)
    refused(jobctl("recall", job, "--epoch", "1", "--reason", "x"), errors.Terminal, job)
    assert jobctl.record(job) == before


def _plant_unknown_model(jobctl: Jobctl) -> str:
    job = jobctl.submit()
    record = json.loads(jobctl.record(job))
    future = "x.example.future/thing@1"
    record["content"].append(future)
    record["critical"].append(future)
    path = jobctl.root / "jobs" / f"{job}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return job


def test_unknown_schema_exits_8(jobctl: Jobctl) -> None:
    job = _plant_unknown_model(jobctl)
    before = jobctl.record(job)
    line = refused(jobctl("claim", job, "--owner", "a"), errors.UnknownSchema, job)
    assert "leave it" in line
    assert jobctl.record(job) == before


def test_invalid_exits_9(jobctl: Jobctl) -> None:
    line = refused(jobctl("submit", "--kind", "k", "--spec", '{"a": 1,}'), errors.Invalid)
    assert "--spec is not JSON" in line
    assert line.endswith("(jobctl submit --help shows what each command takes)")  # the command's real name
    line = refused(jobctl("submit", "--kind", "k", "--spec", "[1, 2]"), errors.Invalid)
    assert line.startswith("jobctl: invalid: spec must be a JSON object;"), line  # no id that was never created
    job = jobctl.submit("--id", "fixed")
    before = jobctl.record(job)
    assert jobctl.record(job) == before
    line = refused(jobctl("submit", "--kind", "k", "--id", "fixed", "--spec", "[1]"), errors.Invalid, "fixed")
    assert jobctl.record(job) == before
    jobctl("claim", job, "--owner", "a")
    before = jobctl.record(job)
    refused(jobctl("checkpoint", job, "{nope", "--epoch", "1"), errors.Invalid)
    refused(jobctl("show", "../escape"), errors.Invalid)
    assert jobctl.record(job) == before
    assert list((jobctl.root / "jobs").glob("*.json")) == [jobctl.root / "jobs" / "fixed.json"]


def test_an_existing_id_exits_15_unless_exists_ok(jobctl: Jobctl) -> None:
    job = jobctl.submit("--id", "nightly-2030-01-02", "--spec", '{"n": 1}')
    before = jobctl.record(job)
    line = refused(jobctl("submit", "--kind", "k", "--id", job), errors.Exists, job)
    assert line.startswith(f"jobctl: exists: job {job} is already in the store;"), line
    assert issubclass(errors.Exists, errors.Invalid)  # a library caller catching Invalid still catches it
    ran = jobctl("submit", "--kind", "other", "--spec", '{"n": 2}', "--id", job, "--exists-ok")
    assert (ran.code, ran.out, ran.err) == (0, f"{job}\n".encode(), "")
    assert jobctl.record(job) == before  # not compared, not touched
    assert jobctl("submit", "--kind", "k", "--exists-ok").code == 2  # --exists-ok needs --id
    assert [p.name for p in (jobctl.root / "jobs").glob("*.json")] == [f"{job}.json"]


def test_refused_exits_10(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    before = jobctl.record(job)
    line = refused(jobctl("claim", job, "--owner", "   "), errors.Refused)
    assert "owner" in line
    assert jobctl.record(job) == before


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("frobnicate",),
        ("submit",),  # --kind is required
        ("submit", "--kind", "k", "--colour"),
        ("submit", "--kind", ""),
        ("claim",),
        ("claim", "a", "b"),
        ("claim", ""),
        ("claim", "a", "--ttl", "-1"),
        ("claim", "a", "--ttl", "nan"),
        ("claim", "a", "--owner"),
        ("claim", "--next", "a"),
        ("claim", "a", "--kind", "k"),
        ("intent", "a", "stop"),
        ("intent", "a", "pause", "extra"),
        ("intent", "a", "pause", "--by", ""),
        ("progress", "a", "--epoch", "-1"),
        ("progress", "a", "--epoch", "x"),
        ("finish", "a", "--state", "done"),
        ("checkpoint",),
        ("checkpoint", "a", "{}", "more"),
        ("orphans", "a"),
        ("show", "a", "b"),
        ("watch", "--exit-on-quiet"),
        ("submit", "--kind", "k", "--stage", "s"),
        ("wait",),
    ],
)
def test_usage_errors_exit_2_and_touch_nothing(jobctl: Jobctl, args: tuple[str, ...]) -> None:
    ran = jobctl(*args)
    assert ran.code == errors.EXIT_USAGE, (args, ran.code, ran.err)
    assert ran.out == b""
    assert "Traceback" not in ran.err
    assert not (jobctl.root / "jobs").exists() or not list((jobctl.root / "jobs").iterdir())


def test_a_store_that_cannot_be_opened_exits_1_naming_root_and_rung(jobctl: Jobctl) -> None:
    blocker = jobctl.home / "not-a-dir"
    blocker.write_text("a file where the store should be")
    # submit creates the store, and creating it under a file fails (a reader says no_store instead).
    ran = jobctl("submit", "--kind", "k", env={"JOB_STORE": None, "ABSTRACTION_STORE": str(blocker / "sub")})
    assert ran.code == errors.EXIT_FAILURE
    assert ran.out == b""
    lines = ran.err.splitlines()
    assert lines[0].startswith(f"jobctl: {blocker / 'sub'}: ")
    assert lines[1] == "  that root came from ABSTRACTION_STORE"
    assert any("ABSTRACTION_STORE=" in line for line in lines[2:])


def test_an_unreadable_record_is_named_after_the_others_and_exits_1(jobctl: Jobctl) -> None:
    good = jobctl.submit()
    bad = _plant_unknown_model(jobctl)
    (jobctl.root / "jobs" / "broken.json").write_text("{ not json")
    for command, line in (("list", f"{good} kind=test state=pending done=0 checkpoint=none\n"), ("orphans", None)):
        ran = jobctl(command)
        assert ran.code == errors.EXIT_FAILURE
        if line is not None:
            assert ran.out == line.encode()
        assert ran.err.startswith(f"jobctl: job: 2 record(s) could not be read ({bad}, broken): ")
        assert len(ran.err.splitlines()) == 1


def _settle(jobctl: Jobctl, state: str) -> str:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a")
    jobctl("finish", job, "--epoch", "1", "--state", state, "--error", "boom")
    return job


def test_wait_exit_codes_say_how_the_jobs_ended(jobctl: Jobctl) -> None:
    ok = _settle(jobctl, "complete")
    failed = _settle(jobctl, "failed")
    cancelled = _settle(jobctl, "cancelled")
    assert jobctl("wait", ok).code == 0
    ran = jobctl("wait", ok, failed, cancelled)
    assert ran.code == cli_main.EXIT_FAILED
    assert ran.out == f"{ok} complete\n{failed} failed\n{cancelled} cancelled\n".encode()
    assert ran.err.startswith("jobctl: 2 job(s) ended without reaching complete: ")
    assert jobctl("wait", ok, cancelled).code == cli_main.EXIT_CANCELLED
    assert jobctl("wait", ok, "--state", "transferred").code == cli_main.EXIT_ENDED_OTHERWISE
    assert jobctl("wait", failed, "--state", "failed").code == 0
    refused(jobctl("wait", ok, "missing-job"), errors.NotFound, "missing-job")


def test_wait_timeout_exits_124(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    ran = jobctl("wait", job, "--timeout", "0")
    assert ran.code == cli_main.EXIT_TIMEOUT
    assert ran.out == b""
    assert ran.err == f"jobctl: timeout: 1 of 1 job(s) not settled after 0s: {job} (pending)\n"
    jobctl("claim", job, "--owner", "a")
    assert jobctl("wait", job, "--state", "running", "--timeout", "0").code == 0


class _Interrupting:
    """A store whose every read is interrupted, as by Ctrl-C."""

    def now(self) -> Any:
        raise KeyboardInterrupt

    def list(self) -> Any:
        raise KeyboardInterrupt


def test_an_interrupt_exits_130_without_a_traceback(jobctl: Jobctl) -> None:
    ran = jobctl("list", store=_Interrupting())  # type: ignore[arg-type]
    assert ran.code == cli_main.EXIT_INTERRUPTED
    assert "Traceback" not in ran.err


def test_debug_shows_the_traceback(jobctl: Jobctl) -> None:
    ran = jobctl("--debug", "show", "nope")
    assert ran.code == errors.NotFound.exit_code
    assert "Traceback" in ran.err
    assert ran.err.splitlines()[-1].startswith("jobctl: not_found: ")


def test_a_closed_stdout_exits_141_quietly(jobctl: Jobctl) -> None:
    for _ in range(3):
        jobctl.submit()
    proc = subprocess.Popen(
        [JOBCTL, "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=jobctl.subprocess_env()
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child has even started: its first write meets a closed pipe
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait() == cli_main.EXIT_BROKEN_PIPE
    assert err == b""


def test_a_refusal_line_names_the_verdict_the_job_and_the_next_step() -> None:
    exc = errors.StaleEpoch("job j1 is at epoch 4, not 3: b claimed it since", "j1")
    assert cli_main.refusal_line(exc) == (
        "jobctl: stale_epoch: job j1 is at epoch 4, not 3: b claimed it since; "
        "stop working on it and read it again (jobctl show j1)"
    )
    assert set(cli_main.HINTS) == {cls.verdict for cls in set(errors.VERDICTS.values())}


def test_records_left_unchanged_byte_for_byte_by_a_refused_cancel(jobctl: Jobctl) -> None:
    job = _settle(jobctl, "complete")
    before = jobctl.record(job)
    refused(jobctl("cancel", job), errors.Terminal, job)
    assert jobctl.record(job) == before
    assert encode(jobctl.store().load(job)) == before


def test_a_cancel_reason_of_two_lines_is_refused_and_nothing_is_written(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    before = jobctl.record(job)
    refused(jobctl("cancel", job, "--reason", "one\ntwo"), errors.Invalid, job)
    assert jobctl.record(job) == before


def test_a_stdout_closed_from_the_start_exits_141(jobctl: Jobctl) -> None:
    # exec ... >&-: sys.stdout is None, where click.echo writes nothing and says nothing.
    job = jobctl.submit()
    for args in (("submit", "--kind", "k"), ("list",), ("show", job)):
        proc = subprocess.run(
            ["sh", "-c", 'exec "$@" >&-', "sh", JOBCTL, *args],
            capture_output=True,
            env=jobctl.subprocess_env(),
            timeout=60,
        )
        assert proc.returncode == cli_main.EXIT_BROKEN_PIPE, (args, proc.stderr)
        assert proc.stderr == b"", (args, proc.stderr)


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("claim", "--help"), ("help",)])
def test_help_and_version_into_a_closed_pipe_exit_141(jobctl: Jobctl, args: tuple[str, ...]) -> None:
    proc = subprocess.Popen(
        [JOBCTL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=jobctl.subprocess_env()
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -0`: the first write meets a closed pipe
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait() == cli_main.EXIT_BROKEN_PIPE, err
    assert err == b""


@pytest.mark.parametrize("how", ["closed pipe", "closed stdout"])
@pytest.mark.parametrize("args", [("claim", "--next"), ("claim", "ID")], ids=["next", "named"])
def test_a_claim_whose_output_nobody_reads_is_given_back(jobctl: Jobctl, how: str, args: tuple[str, ...]) -> None:
    """``claim --next | head -0``: nobody has the epoch, so nobody can work under the lease; it is released, 141."""
    job = jobctl.submit()
    argv = [JOBCTL, *(job if a == "ID" else a for a in args), "--owner", "cron", "--ttl", "3600"]
    if how == "closed stdout":
        proc = subprocess.run(
            ["sh", "-c", 'exec "$@" >&-', "sh", *argv], capture_output=True, env=jobctl.subprocess_env(), timeout=60
        )
        code, err = proc.returncode, proc.stderr
    else:
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=jobctl.subprocess_env()
        ) as running:
            assert running.stdout is not None and running.stderr is not None
            running.stdout.close()  # as `| head -0`
            err = running.stderr.read()
            code = running.wait()
    assert code == cli_main.EXIT_BROKEN_PIPE, err
    rec = jobctl.store().load(job)
    assert rec.lease.epoch == 1 and rec.lease.owner == "" and rec.state == "pending"


@pytest.mark.parametrize("json", [False, True], ids=["plain", "json"])
def test_exists_ok_on_a_damaged_record_is_invalid(jobctl: Jobctl, json: bool) -> None:
    """The id is taken but its record cannot be read: nothing is enqueued, so exit 0 would hide it."""
    path = jobctl.root / "jobs" / "bad.json"
    path.write_bytes(b"{not json")
    path.chmod(0o600)
    ran = jobctl(*(["--json"] if json else []), "submit", "--kind", "k", "--id", "bad", "--exists-ok")
    assert ran.code == errors.Invalid.exit_code and ran.out == b"", ran.err
    assert ran.err.startswith("jobctl: invalid: ") and "bad" in ran.err and ran.err.count("\n") == 1
    assert path.read_bytes() == b"{not json"


def test_run_of_a_spec_its_kind_cannot_run_exits_1_as_documented(jobctl: Jobctl) -> None:
    """``cannot run: ...``: the job ends failed before any command starts; exit-codes.md's `run` table says 1."""
    from pathlib import Path

    from jobctl.record import Record

    job_id = jobctl.store().submit(Record(kind="shell", spec={"argv": 5}))  # another writer's spec
    ran = jobctl("run", job_id)
    assert ran.code == 1 and "cannot run: " in ran.err and ran.err.count("\n") == 1, ran.err
    assert json.loads(jobctl("show", job_id, "--json").out)["state"] == "failed"
    doc = (Path(__file__).parents[2] / "docs" / "reference" / "exit-codes.md").read_text()
    table = doc.split("## `run`: the command's status, or jobctl's", 1)[1].split("\n## ", 1)[0]
    assert "\n| 1 | The job's spec cannot be run by its kind" in table
