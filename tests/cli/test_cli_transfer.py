"""`export` and `import` over a directory store: what is refused is named, and nothing of it is written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from clitools import JOBCTL, Jobctl

from jobctl import FileStore, errors


def _lines(jobctl: Jobctl, count: int) -> list[str]:
    for _ in range(count):
        jobctl.submit()
    ran = jobctl("export")
    assert ran.code == 0, ran.err
    return ran.lines


def _target(tmp_path: Path) -> Path:
    FileStore(tmp_path / "target")
    return tmp_path / "target"


def _records(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "jobs").glob("*.json"))


def test_an_import_line_naming_another_id_is_refused_and_writes_nothing(jobctl: Jobctl, tmp_path: Path) -> None:
    (line,) = _lines(jobctl, 1)
    item = json.loads(line)
    real = item["id"]
    item["id"] = "someone-else"
    target = _target(tmp_path)
    ran = jobctl("import", input=json.dumps(item) + "\n", env={"JOB_STORE": str(target)})
    assert ran.code == errors.Invalid.exit_code
    assert ran.out == b"imported=0 refused=1\n"
    assert ran.err.startswith(f"jobctl: invalid: line 1 names id 'someone-else' but its record is {real}; ")
    assert _records(target) == []  # nothing created for a refused line


def test_import_refusal_lines_carry_the_line_number_and_the_command(jobctl: Jobctl, tmp_path: Path) -> None:
    good = _lines(jobctl, 1)[0]
    broken = json.dumps({"record": "{}"})  # a record that does not decode: its error names no line, no job
    target = _target(tmp_path)
    ran = jobctl("import", input=f"{good}\n{broken}\n", env={"JOB_STORE": str(target)})
    assert ran.code == errors.Invalid.exit_code
    assert ran.out == b"imported=1 refused=1\n"
    (line,) = ran.err.splitlines()
    assert line.startswith("jobctl: invalid: line 2: "), line
    assert line.endswith("(jobctl import --help shows what each command takes)"), line


def test_an_import_line_that_is_not_utf8_is_refused_and_the_rest_imported(jobctl: Jobctl, tmp_path: Path) -> None:
    first, second = _lines(jobctl, 2)
    source = tmp_path / "in.jsonl"
    escaped = json.dumps({"record": "\udcff"})  # JSON's own spelling of a lone surrogate: not UTF-8 either
    source.write_bytes(first.encode() + b"\n\xff\n" + escaped.encode() + b"\n" + second.encode() + b"\n")
    target = _target(tmp_path)
    ran = jobctl("import", str(source), env={"JOB_STORE": str(target)})
    assert ran.code == errors.Invalid.exit_code
    assert ran.out == b"imported=2 refused=2\n"
    assert ran.err.splitlines() == [
        "jobctl: invalid: line 2 is not UTF-8 (byte 0); fix the request (jobctl import --help shows what each "
        "command takes)",
        "jobctl: invalid: line 3: the record text is not UTF-8; fix the request (jobctl import --help shows what "
        "each command takes)",
    ]
    assert len(_records(target)) == 2


def test_import_with_stdin_closed_is_refused(jobctl: Jobctl) -> None:
    proc = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", JOBCTL, "import"],
        capture_output=True,
        env=jobctl.subprocess_env(),
        timeout=60,
    )
    err = proc.stderr.decode()
    assert proc.returncode == errors.EXIT_USAGE, err
    assert "stdin is closed, there is nothing to read" in err and "Traceback" not in err
    assert proc.stdout == b""


def test_export_names_a_record_that_is_not_utf8_after_the_rest(jobctl: Jobctl) -> None:
    lines = _lines(jobctl, 2)
    (jobctl.root / "jobs" / "t9.json").write_bytes(b"\xff\xfe{}")
    ran = jobctl("export")
    assert ran.code == errors.EXIT_FAILURE
    assert ran.lines == lines  # every readable record, in full
    assert ran.err == "jobctl: job: 1 record(s) could not be read (t9): t9: record is not UTF-8 (byte 0)\n"


def test_an_import_line_over_the_size_limit_is_refused_and_the_rest_imported(jobctl: Jobctl, tmp_path: Path) -> None:
    """A directory reads no record over the limit: an import of one would leave a record nobody can read."""
    small, big = _lines(jobctl, 2)
    item = json.loads(big)
    assert '"spec": {}' in item["record"]
    item["record"] = item["record"].replace('"spec": {}', '"spec": {"pad": "' + "x" * 4096 + '"}', 1)
    limit = len(json.loads(small)["record"].encode()) + 100
    target = _target(tmp_path)
    env = {"JOB_STORE": str(target), "JOBCTL_MAX_RECORD_BYTES": str(limit)}
    ran = jobctl("import", input=f"{json.dumps(item)}\n{small}\n", env=env)
    assert ran.code == errors.Invalid.exit_code
    assert ran.out == b"imported=1 refused=1\n"
    size = len(item["record"].encode())
    assert ran.err.startswith(f"jobctl: invalid: line 1: the record is {size} bytes, over the {limit}-byte limit "), (
        ran.err
    )
    assert _records(target) == [json.loads(small)["id"] + ".json"]
    listed = jobctl("list", env=env)
    assert listed.code == 0, listed.err


def test_an_import_refusal_names_the_line_even_when_the_record_names_a_line_of_its_own(
    jobctl: Jobctl, tmp_path: Path
) -> None:
    """The decoder says where in the record it broke ("line 12 column 4"): the export line is named all the same."""
    broken = "{\n" + "\n" * 10 + '  "id": ,\n}\n'  # bad JSON on the record's line 12
    target = _target(tmp_path)
    ran = jobctl("import", input=json.dumps({"id": "x", "record": broken}) + "\n", env={"JOB_STORE": str(target)})
    assert ran.code == errors.Invalid.exit_code
    assert ran.err.startswith("jobctl: invalid: line 1: ") and " at line 12 column " in ran.err, ran.err
    assert _records(target) == []
