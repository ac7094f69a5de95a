"""Input the command line must refuse whole: bytes that are not UTF-8, an empty spec, a closed stdin, a misplaced ID.

Each is one line on stderr and a documented exit code (usage 2 for an
option's text, invalid 9 for JSON text), never a traceback, and nothing is
written: no record, no claim.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from clitools import JOBCTL, Jobctl

from jobctl import errors

#: argv as Python hands it over: the byte 0xff escaped as a lone surrogate.
BAD = "id\udcff"


def _nothing_written(jobctl: Jobctl) -> None:
    assert list((jobctl.root / "jobs").glob("*.json")) == []


@pytest.mark.parametrize(
    "args",
    [
        ("submit", "--kind", "k", "--id", BAD),
        ("submit", "--kind", BAD),
        ("submit", "--kind", "k", "--requires", BAD),
        ("submit", "--", "echo", BAD),
        ("claim", BAD, "--owner", "a"),
        ("claim", "--next", "--owner", BAD),
        ("recall", "j", "--epoch", "1", "--reason", BAD),
        ("finish", "j", "--epoch", "1", "--state", "failed", "--error", BAD),
    ],
)
def test_an_option_that_is_not_utf8_is_a_usage_error(jobctl: Jobctl, args: tuple[str, ...]) -> None:
    ran = jobctl(*args)
    assert ran.code == errors.EXIT_USAGE, ran.err
    assert "is not UTF-8 (byte 2)" in ran.err, ran.err
    assert "Traceback" not in ran.err and ran.out == b""
    _nothing_written(jobctl)


def test_the_option_not_utf8_is_named(jobctl: Jobctl) -> None:
    ran = jobctl("submit", "--kind", "k", "--id", BAD)
    assert "Invalid value for '--id': is not UTF-8 (byte 2)" in ran.err, ran.err


def test_json_text_that_is_not_utf8_is_invalid(jobctl: Jobctl, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xff"}')
    for args, kwargs, needle in (
        (("--spec", '{"a": "\udcff"}'), {}, "--spec is not UTF-8 (byte 7)"),
        (("--spec", f"@{bad}"), {}, f"--spec ({bad}) is not UTF-8 (byte 7)"),
        (("--spec", "-"), {"input": b'{"a": "\xff"}'}, "--spec (stdin) is not UTF-8 (byte 7)"),
    ):
        ran = jobctl("submit", "--kind", "k", *args, **kwargs)  # type: ignore[arg-type]
        assert ran.code == errors.Invalid.exit_code, ran.err
        assert ran.err.startswith(f"jobctl: invalid: {needle}; "), ran.err
        assert len(ran.err.splitlines()) == 1
    _nothing_written(jobctl)
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a")
    before = jobctl.record(job)
    ran = jobctl("checkpoint", job, f"@{bad}", "--epoch", "1")
    assert ran.code == errors.Invalid.exit_code and f"CHECKPOINT ({bad}) is not UTF-8" in ran.err, ran.err
    ran = jobctl("progress", job, "--epoch", "1", "--checkpoint", '"\udcff"')
    assert ran.code == errors.Invalid.exit_code and "--checkpoint is not UTF-8" in ran.err, ran.err
    assert jobctl.record(job) == before


def test_a_path_may_be_any_bytes(jobctl: Jobctl, tmp_path: Path) -> None:
    odd = tmp_path / "st\udcffre"  # a store root is a path: any bytes the file system takes
    ran = jobctl("--store", str(odd), "submit", "--kind", "k")
    assert ran.code == 0, ran.err
    assert len(list((odd / "jobs").glob("*.json"))) == 1


def test_an_empty_spec_file_or_stdin_is_invalid_not_an_empty_object(jobctl: Jobctl, tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    for args, kwargs in ((("--spec", "-"), {"input": b""}), (("--spec", f"@{empty}"), {})):
        ran = jobctl("submit", "--kind", "k", *args, **kwargs)  # type: ignore[arg-type]
        assert ran.code == errors.Invalid.exit_code, ran.err
        assert ran.err.startswith("jobctl: invalid: --spec is not JSON: "), ran.err
    _nothing_written(jobctl)
    assert jobctl("submit", "--kind", "k", "--spec", "-", input=b"{}").code == 0  # given, it is taken


def _closed_stdin(jobctl: Jobctl, *args: str) -> subprocess.CompletedProcess[bytes]:
    # exec ... <&-: the process starts with fd 0 closed, so sys.stdin is None
    script = 'exec "$@" <&-'
    return subprocess.run(
        ["sh", "-c", script, "sh", JOBCTL, *args], capture_output=True, env=jobctl.subprocess_env(), timeout=60
    )


def test_json_from_a_closed_stdin_is_refused(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a")
    before = jobctl.record(job)
    for args, what in (
        (("submit", "--kind", "k", "--spec", "-"), "--spec -"),
        (("checkpoint", job, "-", "--epoch", "1"), "CHECKPOINT -"),
        (("progress", job, "--epoch", "1", "--checkpoint", "-"), "--checkpoint -"),
    ):
        proc = _closed_stdin(jobctl, *args)
        err = proc.stderr.decode()
        assert proc.returncode == errors.Invalid.exit_code, err
        assert err == (
            f"jobctl: invalid: {what}: stdin is closed, there is nothing to read; "
            "give the JSON inline or as @FILE, or run it with stdin open\n"
        )
    assert jobctl.record(job) == before
    assert len(list((jobctl.root / "jobs").glob("*.json"))) == 1


def test_run_next_with_an_id_is_a_usage_error_and_claims_nothing(jobctl: Jobctl) -> None:
    other = jobctl.submit()
    before = jobctl.record(other)
    for args in (("run", "some-id", "--next", "--", "true"), ("run", "--next", "some-id")):
        ran = jobctl(*args)
        assert ran.code == errors.EXIT_USAGE, ran.err
        assert "--next chooses the job itself; name no ID with it" in ran.err
        assert jobctl.record(other) == before  # not claimed, not failed


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--kind", "a\nb"), "--kind 'a\\nb' holds a character that is not printable"),
        (("--kind", "red\x1b[31m"), "--kind 'red\\x1b[31m' holds a character that is not printable"),
        (("--kind", "k", "--requires", ","), "--requires ',' names an empty capability"),
        (("--kind", "k", "--requires", "gpu,,disk"), "--requires 'gpu,,disk' names an empty capability"),
        (("--kind", "k", "--requires", "gpu, "), "--requires 'gpu, ' names an empty capability"),
        (("--kind", "k", "--after", "../x"), "dependency job id '../x' starts with a dot"),
        (("--kind", "k", "--after", "a/b"), "dependency job id 'a/b'"),
        (("--kind", "k", "--id", "self", "--after", "self"), "job self cannot wait for itself"),
        (("--kind", "k", "--requires", "gpu,a\x00"), "--requires 'a\\x00' holds a character that is not printable"),
        (("--kind", "k", "--requires", "a\nb"), "--requires 'a\\nb' holds a character that is not printable"),
        (("--kind", "k", "--pipeline", "a\x01"), "--pipeline 'a\\x01' holds a character that is not printable"),
        (("--kind", "k", "--pipeline", "p", "--stage", "s\n"), "--stage 's\\n' holds a character"),
        (("--kind", "k", "--not-before", "2024-01-01T00:00:00+25:00"), "+25:00' is not a valid instant"),
        (("--kind", "k", "--not-before", "2024-01-01T00:00:00+23:60"), "+23:60' is not a valid instant"),
    ],
)
def test_submit_refuses_values_no_record_should_hold(jobctl: Jobctl, args: tuple[str, ...], says: str) -> None:
    """A kind that would split or colour a plain line, an empty capability, a dependency no job can be.

    Each is invalid, one line, and nothing is written.
    """
    ran = jobctl("submit", *args)
    assert ran.code == errors.Invalid.exit_code, ran.err
    assert ran.out == b""
    assert ran.err.count("\n") == 1 and says in ran.err, ran.err
    _nothing_written(jobctl)


def test_submit_takes_printable_kinds_capabilities_and_dependencies(jobctl: Jobctl) -> None:
    """What the refusals above leave alone: a kind with a space or non-ASCII letters, capabilities, a dependency."""
    first = jobctl.submit()
    for args in (("--kind", "nightly backup"), ("--kind", "café"), ("--kind", "k", "--requires", "gpu,disk")):
        ran = jobctl("submit", *args, "--after", first)
        assert ran.code == 0, ran.err


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ('{"argv": [""]}', '"argv" names no command: its first word is empty'),
        ('{"argv": ["echo", "a\\u0000b"]}', '"argv" word 2 holds a NUL character'),
        ('{"argv": ["true"], "cwd": "/tmp\\u0000x"}', '"cwd" holds a NUL character'),
        ('{"argv": ["true"], "env": {"A=B": "1"}}', "\"env\" name 'A=B' is not a variable name"),
        ('{"argv": ["true"], "env": {"": "1"}}', "\"env\" name '' is not a variable name"),
        ('{"argv": ["true"], "env": {"A": "x\\u0000"}}', '"env" value of A holds a NUL character'),
    ],
)
def test_a_shell_spec_no_process_can_start_with_is_refused_at_submit(jobctl: Jobctl, spec: str, says: str) -> None:
    """execve takes C strings: a NUL, an empty command or a variable name with '=' could only fail every attempt."""
    ran = jobctl("submit", "--kind", "shell", "--spec", spec)
    assert ran.code == errors.Invalid.exit_code, ran.err
    assert ran.out == b"" and ran.err.count("\n") == 1 and says in ran.err, ran.err
    _nothing_written(jobctl)
    added = jobctl("schedule", "add", "s", "--every", "1h", "--kind", "shell", "--spec", spec)
    assert added.code == errors.Invalid.exit_code and says in added.err, added.err


#: Deeper than the interpreter recurses: json.loads raises RecursionError, not ValueError.
DEEP = "[" * 100000 + "]" * 100000


def test_import_of_a_line_nested_too_deep_is_invalid_not_a_traceback(jobctl: Jobctl) -> None:
    ran = jobctl("import", input=DEEP.encode() + b"\n")
    assert ran.code == errors.Invalid.exit_code, ran.err
    assert ran.err.count("\n") == 1 and ran.err.startswith("jobctl: invalid: line 1 is not JSON"), ran.err
    _nothing_written(jobctl)


def test_schedule_add_of_a_spec_nested_too_deep_is_invalid_not_a_traceback(jobctl: Jobctl) -> None:
    ran = jobctl("schedule", "add", "deep", "--every", "1h", "--kind", "k", "--spec", "-", input=DEEP.encode())
    assert ran.code == errors.Invalid.exit_code, ran.err
    assert ran.err.count("\n") == 1 and "schedule deep: spec is not JSON: nesting deeper than" in ran.err, ran.err
    assert jobctl("schedule", "list").text == ""


@pytest.mark.parametrize("command", ["approve", "intent-pause", "cancel", "recall", "retry"])
@pytest.mark.parametrize("by", ["x\ny", "a\tb", "red\x1b[31m", " ", "x" * 201])
def test_a_by_that_is_no_name_is_refused_and_nothing_changes(jobctl: Jobctl, command: str, by: str) -> None:
    """``--by`` lands in the intent, the recall, the lease and a cancel's error: one line, as HTTP's ``by``."""
    job_id = jobctl.submit("--hold")
    if command == "recall":
        jobctl("claim", job_id, "--owner", "w")
    if command == "retry":
        jobctl("cancel", job_id)
    before = (jobctl.root / "jobs" / f"{job_id}.json").read_bytes()
    args = {"intent-pause": ("intent", job_id, "pause"), "recall": ("recall", job_id, "--reason", "r")}
    ran = jobctl(*args.get(command, (command, job_id)), "--by", by)
    assert ran.code == errors.Invalid.exit_code, ran.err
    assert ran.out == b"" and ran.err.count("\n") == 1 and job_id in ran.err, ran.err
    assert (jobctl.root / "jobs" / f"{job_id}.json").read_bytes() == before
    assert len(list((jobctl.root / "jobs").glob("*.json"))) == 1  # no retry made


def test_a_recall_reason_that_would_break_a_line_is_refused(jobctl: Jobctl) -> None:
    job_id = jobctl.submit()
    jobctl("claim", job_id, "--owner", "w")
    ran = jobctl("recall", job_id, "--reason", "disk\nfull")
    assert ran.code == errors.Invalid.exit_code and "not printable" in ran.err, ran.err


def test_a_record_an_other_writer_left_with_an_odd_by_is_still_read(jobctl: Jobctl) -> None:
    """Only new input is checked: an intent's ``by`` with a newline, written by another implementation, reads."""
    job_id = jobctl.submit("--hold")
    path = jobctl.root / "jobs" / f"{job_id}.json"
    text = path.read_text()
    path.write_text(text.replace('"by": "', '"by": "x\\ny', 1))
    shown = jobctl("show", job_id, "--json")
    assert shown.code == 0, shown.err
    assert jobctl("approve", job_id, "--by", "alice").code == 0


def test_a_store_root_that_is_a_file_is_not_a_directory(jobctl: Jobctl, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    for args in (("init", str(plain)), ("--store", str(plain), "submit", "--", "true")):
        ran = jobctl(*args)
        assert ran.code == 1, ran.err
        assert ran.err.splitlines()[0] == f"jobctl: {plain}: Not a directory", ran.err
