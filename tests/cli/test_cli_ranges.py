"""Every numeric option has a documented range: at its bound it is taken, beyond it refused cleanly.

Option parsing refuses as a usage error (exit 2, click's message naming the
option and the range); what only the library or the settings can judge
(max_ttl, retry intervals, --not-before delays, values from the environment)
is ``invalid`` (exit 9). Never a traceback, never an OverflowError.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
from clitools import Jobctl

from jobctl import FileStore, Invalid, Record, limits, schedule

YEAR = "31536000"
INT64 = str(2**63 - 1)
INT64_PLUS = str(2**63)

# (command words, option, a value at the bound, a value beyond it). The command is
# given everything else it needs; "@ID" is replaced by a fresh job's id.
CASES = [
    (["claim", "@ID", "--owner", "a"], "--ttl", "0", "-1"),
    (["claim", "@ID", "--owner", "a"], "--ttl", "60", "1e12"),
    (["claim", "@ID", "--owner", "a"], "--ttl", "60", "1e20"),
    (["claim", "@ID", "--owner", "a"], "--ttl", "60", "inf"),
    (["renew", "@ID", "--epoch", "1"], "--ttl", "60", "1e12"),
    (["renew", "@ID"], "--epoch", INT64, INT64_PLUS),
    (["progress", "@ID", "--epoch", "1"], "--done", INT64, INT64_PLUS),
    (["checkpoint", "@ID", "{}", "--epoch", "1"], "--done", INT64, INT64_PLUS),
    (["finish", "@ID", "--epoch", "1", "--state", "complete"], "--done", INT64, INT64_PLUS),
    (["submit", "--kind", "k"], "--total", INT64, INT64_PLUS),
    (["submit", "--kind", "k"], "--retries", "1000", "1001"),
    (["recall", "@ID", "--reason", "r"], "--grace", YEAR, "31536001"),
    (["recall", "@ID", "--reason", "r"], "--epoch", INT64, INT64_PLUS),
    (["wait", "@ID"], "--timeout", "0", "1e20"),
    (["watch", "--exit-on-quiet"], "--quiet-after", "0", "1e20"),
    (["run", "@ID", "--", "true"], "--ttl", "1", "0"),
    (["run", "@ID", "--", "true"], "--ttl", "60", "1e12"),
    (["run", "@ID", "--", "true"], "--grace", "86400", "86401"),
    (["worker", "--once"], "--concurrency", "1024", "1025"),
    (["worker", "--once"], "--concurrency", "1", "0"),
    (["worker", "--once"], "--poll-interval", "3600", "3601"),
    (["worker", "--once"], "--poll-interval", "0.01", "0"),
    (["worker", "--once"], "--ttl", "60", "1e20"),
    (["worker", "--once"], "--grace", "86400", "1e20"),
    (["worker", "--once"], "--shutdown-grace", "86400", "86401"),
    (["logs", "@ID"], "--attempt", "1", "0"),
    (["logs", "@ID"], "--attempt", INT64, INT64_PLUS),
]


def _args(jobctl: Jobctl, words: list[str], option: str, value: str) -> list[str]:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a", "--ttl", "300")
    filled = [job if word == "@ID" else word for word in words]
    return [filled[0], f"{option}={value}", *filled[1:]]  # before any "--"


def _clean(ran_err: str) -> None:
    assert "Traceback" not in ran_err and "OverflowError" not in ran_err, ran_err


@pytest.mark.parametrize(("words", "option", "at", "beyond"), CASES, ids=lambda v: str(v)[:24])
def test_beyond_the_range_is_a_usage_error(jobctl: Jobctl, words: list[str], option: str, at: str, beyond: str) -> None:
    ran = jobctl(*_args(jobctl, words, option, beyond))
    _clean(ran.err)
    assert ran.code == 2, ran.err
    assert option in ran.err and ("out of range" in ran.err or "not a" in ran.err), ran.err
    assert ran.out == b""


@pytest.mark.parametrize(("words", "option", "at", "beyond"), CASES, ids=lambda v: str(v)[:24])
def test_at_the_bound_the_option_is_taken(jobctl: Jobctl, words: list[str], option: str, at: str, beyond: str) -> None:
    if words[0] == "watch":
        jobctl.submit()
    ran = jobctl(*_args(jobctl, words, option, at))
    _clean(ran.err)
    # The option parsed; what the command then does may be refused for its own reasons
    # (a stale epoch, a job that has no log), but never as a usage error.
    assert ran.code != 2, ran.err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--retry-intervals", "10,31536001"], "out of range"),
        (["--retry-intervals", "1e20"], "out of range"),
        (["--retry-intervals", ",".join(["1"] * 1001)], "more than 1000"),
        (["--not-before", "99999999999999d"], "out of range"),
        (["--not-before", "3651d"], "out of range"),
    ],
)
def test_library_parsed_numbers_are_invalid(jobctl: Jobctl, args: list[str], needle: str) -> None:
    ran = jobctl("submit", "--kind", "k", *args)
    _clean(ran.err)
    assert ran.code == Invalid.exit_code, ran.err
    assert ran.err.startswith("jobctl: invalid: ") and needle in ran.err, ran.err
    assert list((jobctl.root / "jobs").glob("*.json")) == []  # nothing submitted


@pytest.mark.parametrize(
    ("words", "option", "bounds"),
    [
        (["progress", "@ID", "--epoch", "1"], "--done", limits.DONE),
        (["checkpoint", "@ID", "{}", "--epoch", "1"], "--done", limits.DONE),
        (["finish", "@ID", "--epoch", "1", "--state", "complete"], "--done", limits.DONE),
        (["submit", "--kind", "k"], "--total", limits.TOTAL),
    ],
)
@pytest.mark.parametrize("beyond", ["-5", INT64_PLUS])
def test_a_count_out_of_range_names_its_own_range(
    jobctl: Jobctl, words: list[str], option: str, bounds: limits.Range, beyond: str
) -> None:
    ran = jobctl(*_args(jobctl, words, option, beyond))
    assert ran.code == 2, ran.err
    assert f"({bounds.text()})" in ran.err, ran.err  # not the epoch's
    assert "epoch <=" not in ran.err, ran.err


@pytest.mark.parametrize("span", ["1000000d", "999999999d", "99999999999999999999d", "3651d", "9" * 400])
def test_gc_older_than_out_of_range_is_invalid(jobctl: Jobctl, span: str) -> None:
    job = jobctl.submit()
    jobctl("cancel", job)
    ran = jobctl("gc", "--older-than", span)
    _clean(ran.err)
    assert ran.code == Invalid.exit_code, ran.err
    assert ran.err.startswith(f"jobctl: invalid: --older-than: {span!r} is out of range ("), ran.err
    assert ran.out == b"" and (jobctl.root / "jobs" / f"{job}.json").exists()
    assert jobctl("gc", "--older-than", "3650d").code == 0


def test_collect_refuses_a_span_before_year_1(tmp_path: object) -> None:
    from jobctl.lifecycle import collect

    store = FileStore(str(tmp_path))
    with pytest.raises(Invalid, match="reaches back before the first time"):
        collect(store, timedelta.max)


def test_at_the_library_bounds_submit_takes_them(jobctl: Jobctl) -> None:
    assert jobctl("submit", "--kind", "k", "--retry-intervals", ",".join([YEAR] * 1000)).code == 0
    assert jobctl("submit", "--kind", "k", "--not-before", "3650d").code == 0


def test_a_ttl_over_max_ttl_is_invalid_and_max_ttl_is_a_setting(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    ran = jobctl("claim", job, "--owner", "a", "--ttl", "86401")
    assert ran.code == Invalid.exit_code and "max_ttl" in ran.err and job in ran.err, ran.err
    assert jobctl("claim", job, "--owner", "a", "--ttl", "86400").code == 0
    assert jobctl("renew", job, "--epoch", "1", "--ttl", "86401").code == Invalid.exit_code
    raised = {"JOBCTL_MAX_TTL": "172800"}
    assert jobctl("renew", job, "--epoch", "1", "--ttl", "172800", env=raised).code == 0
    bad = jobctl("claim", job, "--owner", "a", "--ttl", "61", env={"JOBCTL_MAX_TTL": "1e20"})
    assert bad.code == Invalid.exit_code and "JOBCTL_MAX_TTL" in bad.err, bad.err


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MAX_CONCURRENT_JOBS", "1025"),
        ("JOB_PROCESSOR_POLL_INTERVAL", "1e20"),
        ("JOBCTL_TTL", "1e12"),
        ("JOBCTL_TTL", "90000"),  # within the hard range, over max_ttl
        ("JOBCTL_GRACE", "86401"),
        ("JOBCTL_SHUTDOWN_GRACE", "-1"),
        ("JOBCTL_MAX_TTL", "59"),
    ],
)
def test_settings_out_of_range_are_invalid(jobctl: Jobctl, variable: str, value: str) -> None:
    ran = jobctl("worker", "--once", env={variable: value})
    _clean(ran.err)
    assert ran.code == Invalid.exit_code, ran.err
    assert variable in ran.err, ran.err


# -- the library: never an OverflowError -------------------------------------------------


def test_the_store_refuses_an_expiry_past_year_9999(tmp_path: object) -> None:
    store = FileStore(str(tmp_path), max_ttl=math.inf)  # a library caller that lifts the ceiling
    job = store.submit(Record(kind="k", spec={}))
    for ttl in (1e12, 1e20, 2.0**1000):
        with pytest.raises(Invalid, match="past the last time"):
            store.claim(job, "a", ttl)
    rec = store.claim(job, "a", 60)
    with pytest.raises(Invalid, match="past the last time"):
        store.renew(job, rec.lease.epoch, 1e20)
    with pytest.raises(Invalid, match="past the last time"):
        store.recall(job, rec.lease.epoch, "r", grace=1e20)
    assert store.load(job).lease == rec.lease  # nothing was written by a refusal


def test_the_store_refuses_a_ttl_over_its_max_ttl(tmp_path: object) -> None:
    store = FileStore(str(tmp_path))
    assert store.max_ttl == limits.DEFAULT_MAX_TTL
    job = store.submit(Record(kind="k", spec={}))
    with pytest.raises(Invalid, match="max_ttl"):
        store.claim(job, "a", limits.DEFAULT_MAX_TTL + 1)
    with pytest.raises(Invalid, match="done must be a whole number"):
        store.progress(job, store.claim(job, "a", 60).lease.epoch, 2**63)


def test_a_planted_retry_interval_past_year_9999_ends_the_retries() -> None:
    """No retry time can be set past year 9999: the failure is counted and no retry made (the job fails),
    never an OverflowError, nor a refused write that would leave the job running."""
    rec = Record(id="j", kind="k", spec={})
    rec.extensions[schedule.RETRY] = {"intervals": [1e300], "failures": 0}
    assert schedule.record_failure(rec, 1, datetime(2030, 1, 1, tzinfo=timezone.utc)) is False
    retry = schedule.retry_of(rec)
    assert retry is not None and retry.failures == 1 and retry.not_before is None


def test_later_and_lease_too_long() -> None:
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert limits.later(now, 60, "ttl") == now + timedelta(seconds=60)
    day = limits.DEFAULT_MAX_TTL
    assert not limits.lease_too_long(now + timedelta(seconds=day + limits.LEASE_SLACK), now, day)
    assert limits.lease_too_long(now + timedelta(seconds=day + limits.LEASE_SLACK + 1), now, day)
    assert not limits.lease_too_long(None, now, day)


def test_the_exit_code_page_gives_the_ranges_the_program_enforces() -> None:
    from clitools import REPO

    page = (REPO / "docs" / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    table = [line for line in page.split("## Numbers out of range")[1].splitlines() if line.startswith("| `")]
    rows = {line.split("|")[1].strip() + line.split("|")[2].strip(): line for line in table}

    def row(option: str, commands: str) -> str:
        return next(line for key, line in rows.items() if key.startswith(option) and commands in key)

    pinned = [
        (row("`--ttl`", "`claim`"), limits.TTL),
        (row("`--ttl`", "`run`"), limits.RUN_TTL),
        (row("`max_ttl`", "setting"), limits.MAX_TTL),
        (row("`--grace`", "`run`"), limits.GRACE),
        (row("`--shutdown-grace`", ""), limits.SHUTDOWN_GRACE),
        (row("`--grace`", "`recall`"), limits.RECALL_GRACE),
        (row("`--poll-interval`", ""), limits.POLL_INTERVAL),
        (row("`--concurrency`", ""), limits.CONCURRENCY),
        (row("`--timeout`", "`wait`"), limits.TIMEOUT),
        (row("`--timeout`", "`submit`"), limits.JOB_TIMEOUT),
        (row("`--priority`", "`submit`"), limits.PRIORITY),
        (row("`--quiet-after`", ""), limits.QUIET_AFTER),
        (row("`--epoch`", ""), limits.EPOCH),
        (row("`--done`", ""), limits.DONE),
        (row("`--retries`", ""), limits.RETRIES),
        (row("`--attempt`", ""), limits.ATTEMPT),
    ]
    for line, bounds in pinned:
        low, high = bounds.text().split(f" {bounds.name} ")
        assert f"{low.split()[0]} {'<' if bounds.open_low else '≤'} " in line, (line, bounds)
        assert f"≤ {high.split()[-1]}" in line, (line, bounds)
    assert f"each 0 ≤ seconds ≤ {int(limits.RETRY_INTERVAL.high)}" in row("`--retry-intervals`", "")
    assert f"at most {limits.RETRY_INTERVALS_MAX} intervals" in row("`--retry-intervals`", "")
    assert f"at most {int(limits.NOT_BEFORE_DELAY.high // limits.DAY)} days" in row("`--not-before`", "")
    assert f"at most {int(limits.OLDER_THAN.high // limits.DAY)} days" in row("`--older-than`", "`gc`")
