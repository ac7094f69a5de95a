"""The holder's commands answer the first refusal in the contract's order (DIGEST §5), on both stores.

``progress``, ``checkpoint`` and ``finish`` given a malformed checkpoint:
a job that ended is ``terminal`` (exit 7), an epoch somebody claimed past is
``stale_epoch`` (5), a lapsed lease is ``lease_expired`` (6), and only a
live holder is told ``invalid`` (9). Usage errors still come first (exit
2), and so do the checks the contract makes before reading (recall's blank
reason, intent's word). Every refusal leaves the record's bytes as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from clitools import Jobctl, Ran

from jobctl.store.location import open_store

#: Each malformed write, as arguments after the command's name, given the job, its epoch and a bad file.
WRITES: dict[str, Callable[[str, str, Path], tuple[str, ...]]] = {
    "progress NaN": lambda j, e, _: ("progress", j, "--epoch", e, "--done", "3", "--checkpoint", '{"a":NaN}'),
    "progress @FILE not UTF-8": lambda j, e, bad: ("progress", j, "--epoch", e, "--checkpoint", f"@{bad}"),
    "progress - empty": lambda j, e, _: ("progress", j, "--epoch", e, "--checkpoint", "-"),
    "checkpoint NaN": lambda j, e, _: ("checkpoint", j, '{"a":NaN}', "--epoch", e),
    "checkpoint --done, not UTF-8": lambda j, e, bad: ("checkpoint", j, f"@{bad}", "--epoch", e, "--done", "3"),
    "finish NaN": lambda j, e, _: ("finish", j, "--epoch", e, "--state", "complete", "--checkpoint", '{"a":NaN}'),
    "finish not JSON": lambda j, e, _: (
        "finish",
        j,
        "--epoch",
        e,
        "--state",
        "failed",
        "--error",
        "x",
        "--checkpoint",
        "[1,]",
    ),
}

#: Each situation of the job: how to reach it (and the epoch the writer presents), and the verdict it gets.
SITUATIONS = {
    "ended": ("terminal", 7),
    "claimed since": ("stale_epoch", 5),
    "lapsed": ("lease_expired", 6),
    "live": ("invalid", 9),
}


class On:
    """One store the commands run against: a directory, or a PostgreSQL schema."""

    def __init__(self, jobctl: Jobctl, target: str) -> None:
        self.jobctl, self.target = jobctl, target

    def __call__(self, *args: str, input: bytes | None = None) -> Ran:
        return self.jobctl(*args, input=input, env={"JOB_STORE": self.target})

    def ok(self, *args: str) -> str:
        ran = self(*args)
        assert ran.code == 0, ran.err
        return ran.text

    def record(self, job_id: str) -> bytes:
        store = open_store(self.target)
        try:
            return store.load_bytes(job_id)
        finally:
            close = getattr(store, "close", None)
            if close is not None:
                close()

    def job(self, situation: str) -> str:
        """A job in ``situation``, where the writer holds (or held) epoch 1."""
        job_id = self.ok("submit", "--kind", "k", "--spec", "{}").strip()
        if situation == "ended":
            self.ok("claim", job_id, "--owner", "w1", "--ttl", "60")
            self.ok("finish", job_id, "--epoch", "1", "--state", "complete")
        elif situation == "claimed since":
            self.ok("claim", job_id, "--owner", "w1", "--ttl", "0")
            self.ok("claim", job_id, "--owner", "w2", "--ttl", "60")
        elif situation == "lapsed":
            self.ok("claim", job_id, "--owner", "w1", "--ttl", "0")
        else:
            self.ok("claim", job_id, "--owner", "w1", "--ttl", "60")
        return job_id


@pytest.fixture(params=["file", "postgres"])
def on(request: pytest.FixtureRequest, jobctl: Jobctl) -> On:
    if request.param == "file":
        return On(jobctl, str(jobctl.root))
    from jobctl.store import postgres

    url = request.getfixturevalue("pg_url")
    postgres.init(url)
    return On(jobctl, url)


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"a": "\xff"}')
    return path


def refused(on: On, job_id: str, args: tuple[str, ...], verdict: str, code: int, input: bytes | None = None) -> Ran:
    """``jobctl ARGS`` exits ``code`` with one line naming ``verdict``, the record byte for byte as it was."""
    before = on.record(job_id)
    ran = on(*args, input=input)
    assert ran.code == code, f"{' '.join(args)}: exit {ran.code}, wanted {code}: {ran.err}"
    if verdict:
        assert ran.err.startswith(f"jobctl: {verdict}: "), ran.err
        assert len(ran.err.splitlines()) == 1, ran.err
    assert ran.out == b""
    assert on.record(job_id) == before, f"{' '.join(args)} changed the record"
    return ran


@pytest.mark.parametrize("situation", list(SITUATIONS))
@pytest.mark.parametrize("write", list(WRITES))
def test_a_malformed_checkpoint_gets_the_first_verdict_in_the_contracts_order(
    on: On, bad: Path, write: str, situation: str
) -> None:
    job_id = on.job(situation)
    verdict, code = SITUATIONS[situation]
    ran = refused(on, job_id, WRITES[write](job_id, "1", bad), verdict, code, input=b"")
    if situation == "live":  # judged once the record's verdicts passed: the content named, and the job
        assert job_id in ran.err and ("CHECKPOINT" in ran.err or "--checkpoint" in ran.err), ran.err


def test_the_issues_example(on: On) -> None:
    """A lapsed lease, then a job that ended: each its own verdict, never invalid."""
    job_id = on.job("lapsed")
    refused(on, job_id, ("progress", job_id, "--epoch", "1", "--checkpoint", '{"a":NaN}'), "lease_expired", 6)
    on.ok("claim", job_id, "--owner", "w2", "--ttl", "60")
    on.ok("finish", job_id, "--epoch", "2", "--state", "complete")
    refused(on, job_id, ("progress", job_id, "--epoch", "2", "--checkpoint", '{"a":NaN}'), "terminal", 7)


# -- what comes before the record is read ---------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("progress", "{job}", "--checkpoint", '{"a":NaN}'),  # no --epoch, no JOB_EPOCH
        ("progress", "{job}", "--epoch", "1", "--done", "-1", "--checkpoint", '{"a":NaN}'),
        ("finish", "{job}", "--epoch", "1", "--state", "bogus", "--checkpoint", '{"a":NaN}'),
        ("finish", "{job}", "--epoch", "1", "--checkpoint", '{"a":NaN}'),  # no --state
        ("checkpoint", "{job}", '{"a":NaN}', "--epoch", "1", "--nope"),
        ("intent", "{job}", "maybe"),
    ],
    ids=["no epoch", "done out of range", "no such state", "no state", "unknown flag", "intent word"],
)
def test_usage_errors_stay_first(on: On, args: tuple[str, ...]) -> None:
    job_id = on.job("ended")
    refused(on, job_id, tuple(a.replace("{job}", job_id) for a in args), "", 2)


def test_a_recall_with_a_blank_reason_is_invalid_before_the_record_is_read(on: On) -> None:
    job_id = on.job("ended")
    refused(on, job_id, ("recall", job_id, "--epoch", "1", "--reason", "   "), "invalid", 9)


def test_a_checkpoint_file_that_cannot_be_read_is_refused_before_the_record(on: On, tmp_path: Path) -> None:
    """No content to judge: the request cannot be made (invalid), whatever the job's state."""
    job_id = on.job("ended")
    missing = tmp_path / "missing.json"
    ran = refused(on, job_id, ("progress", job_id, "--epoch", "1", "--checkpoint", f"@{missing}"), "invalid", 9)
    assert f"cannot read {missing}" in ran.err, ran.err
