"""``list``'s filters on each store: a comma list of states, and who submitted (docs/reference/cli.md)."""

from __future__ import annotations

import json

import pytest
from clitools import Jobctl

from jobctl import filters
from jobctl.errors import Invalid


@pytest.fixture(params=["file", "postgres"])
def env(request: pytest.FixtureRequest, jobctl: Jobctl) -> dict[str, str]:
    """The environment that points ``jobctl`` at a fresh store of each kind."""
    if request.param == "file":
        assert jobctl("init", str(jobctl.root)).code == 0
        return {"JOB_STORE": str(jobctl.root)}
    url = request.getfixturevalue("pg_url")
    assert jobctl("db", "init", env={"JOB_STORE": url}).code == 0
    return {"JOB_STORE": url}


def submit(jobctl: Jobctl, env: dict[str, str], *args: str) -> str:
    ran = jobctl("submit", "--kind", "k", *args, env=env)
    assert ran.code == 0, ran.err
    return ran.text.strip()


def listed(jobctl: Jobctl, env: dict[str, str], *args: str) -> list[str]:
    ran = jobctl("list", "--json", *args, env=env)
    assert ran.code == 0, ran.err
    return sorted(json.loads(line)["id"] for line in ran.text.splitlines())


def test_state_takes_a_comma_list_and_repeats(jobctl: Jobctl, env: dict[str, str]) -> None:
    pending = submit(jobctl, env)
    running = submit(jobctl, env)
    cancelled = submit(jobctl, env)
    assert jobctl("claim", running, "--owner", "w", env=env).code == 0
    assert jobctl("cancel", cancelled, env=env).code == 0
    assert listed(jobctl, env, "--state", "running,pending") == sorted([pending, running])
    assert listed(jobctl, env, "--state", "running, cancelled") == sorted([running, cancelled])
    assert listed(jobctl, env, "--state", "running", "--state", "pending,cancelled") == sorted(
        [pending, running, cancelled]
    )
    plain = jobctl("list", "--state", "cancelled,pending", env=env)  # piped lines: the summaries' path
    assert sorted(line.split()[0] for line in plain.text.splitlines()) == sorted([pending, cancelled])


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("running,done", "'done' is not one of pending, running"),
        ("running,,pending", "an empty name is not one of"),
        (",", "names no state"),
    ],
)
def test_a_state_list_with_a_stranger_is_a_usage_error(jobctl: Jobctl, given: str, message: str) -> None:
    ran = jobctl("list", "--state", given)
    assert ran.code == 2 and message in ran.err, ran.err
    assert ran.out == b""


def test_the_parser_is_the_one_the_api_uses() -> None:
    assert filters.parse_states(" running ,pending") == {"running", "pending"}
    with pytest.raises(Invalid, match="'Running' is not one of"):
        filters.parse_states("Running")


def test_who_submitted_is_kept_shown_and_chosen_by(jobctl: Jobctl, env: dict[str, str]) -> None:
    by_env = {**env, "USER": "bob"}
    alice = submit(jobctl, env, "--by", "alice")
    held = submit(jobctl, env, "--by", "carol", "--hold")  # an old script's --hold --by: the hold's name
    bob = submit(jobctl, by_env)
    host = jobctl("submit", "--kind", "k", env=by_env).text.strip()
    shown = json.loads(jobctl("show", "--json", alice, env=env).text)
    assert shown["submitted_by"] == "alice"
    record = json.loads(jobctl("show", held, env=env).text)  # the record's own bytes
    assert record["extensions"]["jobctl.run/submitted-by@1"] == {"by": "carol"}
    assert record["intent"]["want"] == "pause" and record["intent"]["by"] == "carol"
    default = json.loads(jobctl("show", "--json", bob, env=env).text)["submitted_by"]
    assert default.startswith("bob@") and len(default) > len("bob@")
    assert listed(jobctl, env, "--by", "alice") == [alice]
    assert listed(jobctl, env, "--by", default) == sorted([bob, host])
    assert jobctl("cancel", alice, env=env).code == 0  # an ended job: a summary would not know its submitter
    plain = jobctl("list", "--by", "alice", env=env)
    assert [line.split()[0] for line in plain.text.splitlines()] == [alice]
    assert listed(jobctl, env, "--by", "nobody") == []


@pytest.mark.parametrize(
    ("given", "code", "message"),
    [("a\nb", 9, "--by 'a\\nb' holds a character that is not printable"), ("x" * 201, 9, "longer than 200")],
)
def test_a_submitter_that_is_no_name_is_refused(
    jobctl: Jobctl, env: dict[str, str], given: str, code: int, message: str
) -> None:
    ran = jobctl("submit", "--kind", "k", "--by", given, env=env)
    assert ran.code == code and message in ran.err, ran.err
    assert listed(jobctl, env) == []
