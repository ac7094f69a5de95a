"""``submit --priority`` and ``--timeout`` on the command line: what they write, what they refuse, what shows them.

A priority out of its range, or not a whole number, is a usage error (exit
2) as every number option's; a timeout of 0, a negative one or one that is
no duration is ``invalid`` (exit 9) in one line, as ``--not-before``'s delay.
Neither writes anything.
"""

from __future__ import annotations

import json
import re

import pytest
from clitools import Jobctl

from jobctl.priority import PRIORITY
from jobctl.timeout import TIMEOUT


def test_priority_and_timeout_are_written_as_jobctl_keys(jobctl: Jobctl) -> None:
    job = jobctl.submit("--priority", "-12", "--timeout", "1.5h")
    rec = jobctl.store().load(job)
    assert (rec.extensions[PRIORITY], rec.extensions[TIMEOUT]) == (-12, 5400)
    assert b'"jobctl.run/priority@1": -12' in jobctl.record(job)
    shown = json.loads(jobctl("show", job, "--json").text)
    assert (shown["priority"], shown["timeout"]) == (-12, 5400)
    listed = [json.loads(line) for line in jobctl("list", "--json").lines]
    assert [(j["priority"], j["timeout"]) for j in listed] == [(-12, 5400)]
    plain = jobctl.submit("--priority", "0")
    assert PRIORITY not in jobctl.store().load(plain).extensions and b"priority" not in jobctl.record(plain)


def test_show_on_a_terminal_says_the_priority_and_the_timeout(jobctl: Jobctl) -> None:
    job = jobctl.submit("--priority", "3", "--timeout", "90")
    lines = _plain(jobctl("show", job, terminal=True, env={"COLUMNS": "100"}).text)
    assert ["priority", "3"] in lines and ["timeout", "1m30s", "an", "attempt"] in lines
    store = jobctl.store()
    epoch = store.claim(job, "me", 60).lease.epoch
    store.update(job, epoch, lambda r: r.extensions.update({PRIORITY: "high"}))  # another writer's value
    lines = _plain(jobctl("show", job, terminal=True, env={"COLUMNS": "120"}).text)
    assert ["priority", "0", "(the", "record", "holds", '"high":', "not", "a", "priority)"] in lines


def _plain(text: str) -> list[list[str]]:
    """A terminal's lines as words, without their colours."""
    return [re.sub(r"\x1b\[[0-9;]*m", "", line).split() for line in text.splitlines()]


def test_a_retry_keeps_the_priority_and_the_timeout(jobctl: Jobctl) -> None:
    job = jobctl.submit("--priority", "4", "--timeout", "2m")
    store = jobctl.store()
    store.finish(job, store.claim(job, "me", 60).lease.epoch, "failed", error="boom")
    ran = jobctl("retry", job)
    assert ran.code == 0, ran.err
    again = store.load(ran.text.split()[0])
    assert (again.extensions[PRIORITY], again.extensions[TIMEOUT]) == (4, 120)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("1001", "'1001' is out of range (-1000 <= priority <= 1000)"),
        ("-1001", "'-1001' is out of range (-1000 <= priority <= 1000)"),
        ("2.5", "'2.5' is not a whole number (-1000 <= priority <= 1000)"),
        ("high", "'high' is not a whole number (-1000 <= priority <= 1000)"),
        ("99999999999999999999999", "'99999999999999999999999' is out of range"),
    ],
)
def test_a_priority_that_is_none_is_a_usage_error(jobctl: Jobctl, value: str, says: str) -> None:
    ran = jobctl("submit", "--priority", value, "--", "true")
    assert ran.code == 2 and ran.out == b""
    assert f"Error: Invalid value for '--priority': {says}" in ran.err
    assert jobctl.store().ids() == []


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "--timeout: '0' is out of range (0 < timeout <= 31536000 seconds: at most 365d)"),
        ("0s", "--timeout: '0s' is out of range"),
        ("-5s", "--timeout: '-5s' is not a duration (90s, 15m, 2h, 7d)"),
        ("soon", "--timeout: 'soon' is not a duration (90s, 15m, 2h, 7d)"),
        ("366d", "--timeout: '366d' is out of range"),
        ("99999999999999999999d", "--timeout: '99999999999999999999d' is out of range"),
    ],
)
def test_a_timeout_that_is_none_is_invalid_in_one_line(jobctl: Jobctl, value: str, says: str) -> None:
    ran = jobctl("submit", "--timeout", value, "--", "true")
    assert ran.code == 9 and ran.out == b""
    assert ran.err.startswith(f"jobctl: invalid: {says}") and ran.err.count("\n") == 1, ran.err
    assert jobctl.store().ids() == []
