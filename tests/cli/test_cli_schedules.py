"""``jobctl schedule``: plain lines, JSON, a table on a terminal, and every refusal's one line and code."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clitools import Jobctl, Ran

from jobctl import errors


def refused(ran: Ran, code: int, *words: str) -> str:
    assert ran.code == code, (ran.code, ran.err)
    assert ran.out == b""
    assert "Traceback" not in ran.err
    line = ran.err.strip().splitlines()[-1]
    for word in words:
        assert word in line, line
    return line


def test_add_list_remove_in_plain_lines_json_and_a_table(jobctl: Jobctl) -> None:
    ran = jobctl("schedule", "add", "nightly", "--cron", "30 2 * * *", "--", "echo", "hi")
    assert ran.code == 0, ran.err
    name, when, nxt, fired, kind = ran.text.rstrip("\n").split("\t")
    assert (name, when, fired, kind) == ("nightly", "cron 30 2 * * *", "-", "shell")
    assert nxt.endswith("T02:30:00.000000Z")
    ran = jobctl("schedule", "add", "beat", "--every", "15m", "--kind", "ping", "--spec", '{"n": 1.50}', "--by", "ops")
    assert ran.code == 0, ran.err
    assert [line.split("\t")[0] for line in jobctl("schedule", "list").lines] == ["beat", "nightly"]
    got = [json.loads(line) for line in jobctl("--json", "schedule", "list").lines]
    assert got[0]["v"] == 1 and got[0]["every"] == 900 and got[0]["cron"] is None and got[0]["by"] == "ops"
    assert got[0]["next"].endswith(("00:00.000000Z", "15:00.000000Z", "30:00.000000Z", "45:00.000000Z"))
    assert '"spec":{"n":1.50}' in jobctl("--json", "schedule", "list").text  # kept token for token
    assert got[1]["spec"]["argv"] == ["echo", "hi"] and got[1]["fired"] is None
    table = jobctl("schedule", "list", terminal=True, env={"COLUMNS": "140"})
    assert table.code == 0 and "NAME" in table.text and "nightly" in table.text and "every 15m" in table.text
    ran = jobctl("schedule", "remove", "beat")
    assert (ran.code, ran.text) == (0, "beat\n")
    assert json.loads(jobctl("--json", "schedule", "remove", "nightly").text)["removed"] is True
    assert jobctl("schedule", "list").out == b""
    assert "no schedules" in jobctl("schedule", "list", terminal=True).text


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--cron", "61 * * * *", "--", "true"], errors.Invalid.exit_code, ["invalid", "field 1 (minute) '61'"]),
        (["--cron", "* * * *", "--", "true"], errors.Invalid.exit_code, ["has 4 field(s)"]),
        (["--cron", "0 0 * * funday", "--", "true"], errors.Invalid.exit_code, ["field 5 (day-of-week)"]),
        (["--every", "0", "--", "true"], errors.Invalid.exit_code, ["every: 0 is out of range"]),
        (["--every", "-5s", "--", "true"], errors.Invalid.exit_code, ["is not a duration"]),
        (["--every", "99999999999d", "--", "true"], errors.Invalid.exit_code, ["out of range"]),
        (["--every", "1m", "--kind", "k", "--spec", "[1]"], errors.Invalid.exit_code, ["spec must be a JSON object"]),
        (["--every", "1m", "--cron", "* * * * *", "--", "true"], errors.EXIT_USAGE, ["--every", "--cron"]),
        (["--", "true"], errors.EXIT_USAGE, ["--every", "--cron"]),
        (["--every", "1m"], errors.EXIT_USAGE, ["--kind"]),
    ],
)
def test_add_refusals(jobctl: Jobctl, args: list[str], code: int, words: list[str]) -> None:
    refused(jobctl("schedule", "add", "bad", *args), code, *words)
    assert jobctl("schedule", "list").out == b""


@pytest.mark.parametrize("name", ["a/b", ".dot", "new\nline", "x" * 101, " "])
def test_names_refused(jobctl: Jobctl, name: str) -> None:
    line = refused(jobctl("schedule", "add", name, "--every", "1m", "--", "true"), errors.Invalid.exit_code)
    assert line.startswith("jobctl: invalid: schedule name")


def test_exists_and_not_found(jobctl: Jobctl) -> None:
    assert jobctl("schedule", "add", "one", "--every", "1m", "--", "true").code == 0
    before = jobctl("--json", "schedule", "list").text
    refused(jobctl("schedule", "add", "one", "--every", "2m", "--", "false"), 15, "exists", "schedule remove one")
    assert jobctl("--json", "schedule", "list").text == before
    refused(jobctl("schedule", "remove", "none"), 3, "not_found", "no schedule none")


def test_an_unreadable_schedule_is_named_and_exits_1(jobctl: Jobctl, tmp_path: Any) -> None:
    from jobctl.store.schedules import SCHEDULES

    assert jobctl("schedule", "add", "good", "--every", "1m", "--", "true").code == 0
    where = tmp_path.joinpath("store", *SCHEDULES)
    (where / "sgarbage.json").write_text("{")
    ran = jobctl("schedule", "list")
    assert ran.code == 1 and ran.text.startswith("good\t")
    assert "1 schedule(s) could not be read" in ran.err and "sgarbage.json" in ran.err
