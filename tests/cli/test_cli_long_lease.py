"""A lease planted to run years ahead is flagged by list, show and doctor, and recall ends it."""

from __future__ import annotations

import json
import math
from typing import Any

from clitools import Jobctl

from jobctl import FileStore, Record, limits
from jobctl.cli import render
from jobctl.record import encode

TEN_YEARS = 10 * limits.YEAR


def planted(jobctl: Jobctl) -> tuple[str, str]:
    """A job held for ten years (written by a writer that ignores max_ttl) and an ordinary held one."""
    careless = FileStore(jobctl.root, max_ttl=math.inf)
    long = careless.submit(Record(kind="k", spec={}))
    careless.claim(long, "planter", TEN_YEARS)
    short = jobctl.submit()
    assert jobctl("claim", short, "--owner", "w", "--ttl", "300").code == 0
    return long, short


def test_plain_list_lines_are_unchanged_and_the_warning_goes_to_stderr(jobctl: Jobctl) -> None:
    long, short = planted(jobctl)
    ran = jobctl("list")
    assert ran.code == 0
    store = jobctl.store()
    assert ran.lines == [render.list_line(store.load(long)), render.list_line(store.load(short))]
    warnings = ran.err.splitlines()
    assert len(warnings) == 1, ran.err
    assert warnings[0].startswith(f"jobctl: warning: job {long}: its lease (planter, epoch 1)")
    assert f"jobctl recall {long}" in warnings[0] and "max_ttl (86400 s)" in warnings[0]


def test_json_says_lease_too_long(jobctl: Jobctl) -> None:
    long, short = planted(jobctl)
    rows = {row["id"]: row for row in map(json.loads, jobctl("list", "--json").lines)}
    assert (rows[long]["lease_too_long"], rows[short]["lease_too_long"]) == (True, False)
    assert json.loads(jobctl("show", long, "--json").text)["lease_too_long"] is True
    assert json.loads(jobctl("show", short, "--json").text)["lease_too_long"] is False


def test_show_keeps_the_record_bytes_and_warns(jobctl: Jobctl) -> None:
    long, _short = planted(jobctl)
    ran = jobctl("show", long)
    assert ran.out == encode(jobctl.store().load(long))
    assert f"job {long}: its lease" in ran.err


def test_the_table_marks_the_lease(jobctl: Jobctl) -> None:
    long, _short = planted(jobctl)
    ran = jobctl("list", terminal=True, env={"COLUMNS": "250"})
    assert "too long: jobctl recall" in ran.text
    assert "too long" in jobctl("show", long, terminal=True, env={"COLUMNS": "250"}).text


def test_doctor_fails_on_a_long_lease_until_it_is_recalled(jobctl: Jobctl) -> None:
    long, short = planted(jobctl)
    ran = jobctl("doctor", "--json")
    assert ran.code == 1
    report = json.loads(ran.text)
    assert report["healthy"] is False
    assert report["check_leases"].startswith("FAILED: 1 lease(s)") and long in report["check_leases"]
    assert short not in report["check_leases"]
    # The way out the docs give: recall it; once the grace is over nobody holds it.
    assert jobctl("recall", long, "--reason", "planted lease", "--grace", "0").code == 0
    assert json.loads(jobctl("doctor", "--json").text)["check_leases"] == "ok"
    assert jobctl("list").err == ""
    assert jobctl("claim", long, "--owner", "rescuer").code == 0


def test_max_ttl_decides_what_is_too_long(jobctl: Jobctl) -> None:
    long, _short = planted(jobctl)
    ceiling = {"JOBCTL_MAX_TTL": str(int(limits.YEAR))}
    assert json.loads(jobctl("show", long, "--json", env=ceiling).text)["lease_too_long"] is True
    two_days = FileStore(jobctl.root, max_ttl=math.inf)
    job = two_days.submit(Record(kind="k", spec={}))
    two_days.claim(job, "p", 2 * limits.DAY)
    assert json.loads(jobctl("show", job, "--json").text)["lease_too_long"] is True
    assert json.loads(jobctl("show", job, "--json", env=ceiling).text)["lease_too_long"] is False
    assert jobctl("show", job, env=ceiling).err == ""


def test_a_finished_job_s_long_lease_is_flagged_from_its_summary(jobctl: Jobctl) -> None:
    # A finished job's line is printed from its summary (read now, or kept by the summary cache): the
    # lease it kept, ten years ahead, is flagged all the same, and an ordinary finished one is not.
    careless = FileStore(jobctl.root, max_ttl=math.inf)
    long = careless.submit(Record(kind="k", spec={}))
    careless.finish(long, careless.claim(long, "planter", TEN_YEARS).lease.epoch, "complete")
    short = careless.submit(Record(kind="k", spec={}))
    careless.finish(short, careless.claim(short, "w", 300).lease.epoch, "complete")
    for _ in range(2):  # the second listing takes both from the summary cache
        ran = jobctl("list")
        assert ran.code == 0 and len(ran.lines) == 2
        warnings = ran.err.splitlines()
        assert len(warnings) == 1 and warnings[0].startswith(f"jobctl: warning: job {long}: its lease"), ran.err


def test_a_long_lease_among_a_shared_cold_listing_s_summaries_is_flagged(jobctl: Jobctl, monkeypatch: Any) -> None:
    # The summaries a shared cold scan's pieces made come to the listing a piece at a time, and their
    # latest expiry is noted as they come: the one lease planted ten years ahead is still flagged.
    from jobctl import fanout, summary
    from jobctl.store import file_listing

    monkeypatch.setattr(file_listing, "_SHARED_FROM", 2)
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.setattr(fanout, "STREAM_PIECE", 3)
    monkeypatch.setattr(summary.cachefile, "_BATCH", 2)
    monkeypatch.setenv(fanout.PROCESSES_ENV, "2")
    careless = FileStore(jobctl.root, max_ttl=math.inf, summaries=False)
    ids = [careless.submit(Record(kind="k", spec={"n": n})) for n in range(12)]
    for n, job_id in enumerate(ids):
        ttl = TEN_YEARS if n == 7 else 30  # the others' leases end before the cutoff (max_ttl's least and slack)
        careless.finish(job_id, careless.claim(job_id, "w", ttl).lease.epoch, "complete")
    forks: list[int] = []
    real = fanout._fork_streamed
    monkeypatch.setattr(fanout, "_fork_streamed", lambda *a: forks.append(1) or real(*a))
    ran = jobctl("list", env={"XDG_CACHE_HOME": str(jobctl.root / "cache-a")})
    assert forks, "the listing was not shared"
    assert ran.code == 0 and len(ran.lines) == 12
    warnings = ran.err.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"jobctl: warning: job {ids[7]}: its lease"), ran.err
    # None ahead: nothing flagged.
    other = FileStore(jobctl.root.parent / "other", summaries=False)
    for n in range(12):
        job_id = other.submit(Record(kind="k", spec={"n": n}))
        other.finish(job_id, other.claim(job_id, "w", 30).lease.epoch, "complete")
    env = {"XDG_CACHE_HOME": str(jobctl.root / "cache-b"), "JOB_STORE": str(jobctl.root.parent / "other")}
    ran = jobctl("list", env=env)
    assert ran.code == 0 and len(ran.lines) == 12 and ran.err == "", ran.err
