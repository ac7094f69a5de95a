"""Commands over a whole store with the summary cache warm: the same output, fewer records decoded."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from oddfiles import bind_socket

from jobctl import Record, summary
from jobctl.store import file as file_store
from jobctl.store import file_listing

from .support.clitools import Jobctl


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scans believe they start 10 s from now: nothing written by the test looks racy."""
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + 10 * 10**9)


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = file_store.record.decode

    def counting(data: bytes, job_id: str = "", *, named: bool = False) -> Record:
        seen.append(job_id)
        return real(data, job_id, named=named)

    # The store's own reads, and its listings': both call jobctl.record's decode through the package.
    monkeypatch.setattr(file_store.record, "decode", counting)
    return seen


def populate(jobctl: Jobctl) -> tuple[list[str], str]:
    store = jobctl.store()
    finished = []
    for n, state in enumerate(["complete", "failed", "cancelled", "complete"]):
        job_id = jobctl.submit("--kind", "backup" if n % 2 else "test")
        rec = store.claim(job_id, f"w{n}", 30)
        store.progress(job_id, rec.lease.epoch, n, checkpoint={"at": n})
        store.finish(job_id, rec.lease.epoch, state, error="boom" if state == "failed" else None)
        finished.append(job_id)
    waiting = jobctl.submit("--after", finished[0])
    jobctl.submit("--kind", "backup")
    return finished, waiting


COMMANDS = [
    ("list",),
    ("list", "--state", "complete"),
    ("list", "--kind", "backup"),
    ("list", "--owner", "w1"),
    ("list", "--orphans"),
    ("list", "--json"),
    ("orphans",),
    ("orphans", "--json"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_warm_output_is_the_cold_output(jobctl: Jobctl, later: None, decoded: list[str], args: tuple[str, ...]) -> None:
    finished, _ = populate(jobctl)
    cold = jobctl(*args)
    decoded.clear()
    warm = jobctl(*args)
    assert (warm.code, warm.out, warm.err) == (cold.code, cold.out, cold.err)
    assert cold.out  # every command here has something to say
    if "--json" not in args or args[0] == "orphans":
        assert not set(decoded) & set(finished), "a finished record was decoded again"


def test_list_json_carries_dependency_states_from_the_cache(jobctl: Jobctl, later: None) -> None:
    finished, waiting = populate(jobctl)
    jobctl("list")
    jobs = {obj["id"]: obj for obj in map(json.loads, jobctl("list", "--json").lines)}
    assert set(finished) <= set(jobs)
    assert jobs[waiting]["after"] == [finished[0]] and jobs[waiting]["blocked"] is None  # not "doomed"


def test_claim_next_with_a_warm_cache_takes_the_oldest_runnable(
    jobctl: Jobctl, later: None, decoded: list[str]
) -> None:
    finished, waiting = populate(jobctl)
    jobctl("orphans")
    decoded.clear()
    ran = jobctl("claim", "--next", "--owner", "me", "--format", "env")
    assert ran.code == 0, ran.err
    assert f"JOB_ID={waiting}" in ran.text  # its dependency is complete: known from the cache alone
    assert not set(decoded) & set(finished)


def test_list_prints_unreadable_records_last_and_exits_1(jobctl: Jobctl, later: None) -> None:
    populate(jobctl)
    (jobctl.root / "jobs" / "1-broken.json").write_bytes(b"{")
    jobctl("list")
    ran = jobctl("list")
    assert ran.code == 1 and "1-broken" in ran.err and "1-broken" not in ran.text


def test_a_scan_hands_out_each_record_as_it_reads_it(jobctl: Jobctl, decoded: list[str]) -> None:
    # A scan goes by id; two ids minted in one millisecond sort by their random part, not as submitted.
    ids = sorted(jobctl.submit() for _ in range(5))
    decoded.clear()
    scan = jobctl.store().scan([])
    first = next(scan)
    assert first.id == ids[0] and decoded == [ids[0]]  # the others not read yet
    assert [item.id for item in scan] == ids[1:]


def test_streamed_lines_show_the_first_at_once_and_the_rest_in_blocks(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    from jobctl.cli import render

    lines = render.Lines()
    lines.out("first")
    assert capsysbinary.readouterr().out == b"first\n"
    lines.out("second")
    lines.out_json({"id": "x"})
    assert capsysbinary.readouterr().out == b""
    lines.flush()
    assert capsysbinary.readouterr().out == b'second\n{"v":1,"id":"x"}\n'


def test_piped_list_keeps_the_view_order_with_the_cache_warm(jobctl: Jobctl, later: None, decoded: list[str]) -> None:
    """Active first, then ended; each group by creation, not by id: the cache changes nothing of that."""
    store = jobctl.store()
    ended = [jobctl.submit("--id", name) for name in ("z-first", "m-second", "a-third")]
    for job_id in ended:
        rec = store.claim(job_id, "w", 30)
        store.finish(job_id, rec.lease.epoch, "complete")
    pending = jobctl.submit("--id", "y-pending")
    running = jobctl.submit("--id", "b-running")
    jobctl("claim", running, "--owner", "w")
    cold = {args: jobctl(*args) for args in LIST_ORDERS}
    decoded.clear()
    for args, was in cold.items():
        warm = jobctl(*args)
        assert (warm.code, warm.out, warm.err) == (was.code, was.out, was.err), args
    assert not set(decoded) & set(ended), "a finished record was decoded again"
    ids = [line.split()[0] for line in jobctl("list").lines]
    assert ids == [running, pending, *ended]
    assert [line.split()[0] for line in jobctl("list", "--newest").lines] == [running, pending, *ended[::-1]]
    assert [line.split()[0] for line in jobctl("list", "--limit", "3").lines] == [running, pending, ended[0]]
    assert [line.split()[0] for line in jobctl("list", "--active").lines] == [running, pending]


LIST_ORDERS = [
    ("list",),
    ("list", "--newest"),
    ("list", "--limit", "3"),
    ("list", "--newest", "--limit", "4"),
    ("list", "--active"),
    ("list", "--state", "complete", "--newest"),
]


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("list", "--json"),
        ("list", "--newest", "--limit", "3"),
        ("list", "--state", "failed", "--json"),
        ("list", "--kind", "backup", "--owner", "w1"),
        ("list", "--pipeline", "nightly"),
    ],
    ids=" ".join,
)
def test_a_cold_listing_reads_each_finished_record_once(
    jobctl: Jobctl, later: None, decoded: list[str], args: tuple[str, ...]
) -> None:
    """With no cache, list_open decodes every record to learn its state; the listing keeps what it needs then."""
    finished, _ = populate(jobctl)
    decoded.clear()
    cold = jobctl(*args)
    assert cold.code == 0, cold.err
    assert {job_id: decoded.count(job_id) for job_id in finished} == dict.fromkeys(finished, 1)
    decoded.clear()
    again = jobctl(*args)  # the cache that cold pass wrote gives the same answer
    assert (again.code, again.out, again.err) == (cold.code, cold.out, cold.err)


def test_a_cold_listing_reads_the_store_once_and_leaves_the_list_part_for_the_next(
    jobctl: Jobctl, later: None, decoded: list[str]
) -> None:
    """list_open read every record: the ended jobs and the cache's .list part come from that one pass."""
    finished, _ = populate(jobctl)
    every = jobctl.store().ids()
    decoded.clear()
    cold = jobctl("list")
    assert cold.code == 0, cold.err
    assert sorted(decoded) == sorted(every), "a record was read twice (the open ones by a second pass)"
    decoded.clear()
    warm = jobctl("list")
    assert (warm.code, warm.out, warm.err) == (cold.code, cold.out, cold.err)
    assert not set(decoded) & set(finished), "the .list part did not vouch for the finished records"


@pytest.mark.parametrize("newest", [False, True], ids=["oldest", "newest"])
def test_a_cold_json_listing_with_a_limit_shows_the_first_of_the_order(
    jobctl: Jobctl, later: None, newest: bool
) -> None:
    """--json --limit N keeps only N ended records while it reads: they are still the first N of the order."""
    store = jobctl.store()
    names = ["m", "c", "x", "a", "q", "b", "z", "k"]  # made in this order: ids do not follow creation
    for name in names:
        job_id = jobctl.submit("--id", f"{name}-job")
        rec = store.claim(job_id, "w", 30)
        store.finish(job_id, rec.lease.epoch, "complete")
    order = ("--newest",) if newest else ()
    whole = jobctl("list", "--json", *order).lines
    assert [json.loads(line)["id"] for line in whole] == [f"{n}-job" for n in (names[::-1] if newest else names)]
    jobs = store.jobs_dir
    base = summary.Summaries.load(summary.default_dir(), jobs, os.stat(jobs), read=False).base
    assert Path(base + ".open").exists()  # the listing above wrote it: the name is this store's
    for limit in (1, 3, 8, 20):
        for part in (".open", ".stat", ".list"):  # cold: no summary of any record of this store
            Path(base + part).unlink(missing_ok=True)
        ran = jobctl("list", "--json", "--limit", str(limit), *order)
        assert ran.lines == whole[:limit], limit


def test_the_table_reads_each_record_once_and_active_ones_from_the_cache(
    jobctl: Jobctl, later: None, decoded: list[str]
) -> None:
    """On a terminal: one pass over the store; with --active (or --orphans) the finished ones by their states."""
    finished, waiting = populate(jobctl)
    decoded.clear()
    table = jobctl("list", "--limit", "2", terminal=True)  # the two active jobs
    assert table.code == 0, table.err
    assert {job_id: decoded.count(job_id) for job_id in finished} == dict.fromkeys(finished, 1)
    assert waiting in table.text and finished[0] not in table.text  # the active jobs come first
    jobctl("orphans")  # writes the cache
    decoded.clear()
    active = jobctl("list", "--active", terminal=True)
    assert active.code == 0, active.err
    assert waiting in active.text
    assert not set(decoded) & set(finished), "a finished record was decoded for --active"


@pytest.mark.parametrize("way", ["one batch", "streamed"])
@pytest.mark.parametrize("args", [*COMMANDS, ("claim", "--next", "--owner", "me", "--format", "env")], ids=" ".join)
def test_a_scan_shared_among_processes_prints_what_one_process_prints(
    jobctl: Jobctl,
    later: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    decoded: list[str],
    args: tuple[str, ...],
    way: str,
) -> None:
    """A cold scan's reads shared among three processes (as at thousands of records): the same output, byte for byte.

    The piped list takes the finished records' summaries from the children
    (list_open(briefly=True)); --json takes whole records, which are read here.
    The listing part of the cache is written aside (by a child, as at thousands
    of summaries), and the warm listing after it takes every summary from it.
    ``streamed``: the directory read three names at a time, the children
    started first and handed pieces of four as they are cut (as at 100,000).
    """
    from jobctl import fanout

    finished, _ = populate(jobctl)
    monkeypatch.setattr(summary.listed, "_ASIDE_FROM", 1)
    jobs = jobctl.root / "jobs"
    (jobs / "1-broken.json").write_bytes(b"{")
    os.symlink("/etc/passwd", jobs / "2-link.json")
    # Every odd file a shared piece hands back to be read again here (fsio.read_plain), and one over the limit.
    os.mkfifo(jobs / "3-fifo.json")
    (jobs / "4-directory.json").mkdir()
    bind_socket(jobs / "5-socket.json")
    (jobs / "6-large.json").write_bytes(b" " * 5000)
    limit = {"JOBCTL_MAX_RECORD_BYTES": "4000"}
    alone = jobctl(*args, env={"XDG_CACHE_HOME": str(tmp_path / "alone"), fanout.PROCESSES_ENV: "1", **limit})
    monkeypatch.setattr(file_listing, "_SHARED_FROM", 2)
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    forks: list[int] = []
    forking = "_fork" if way == "one batch" else "_fork_streamed"
    real_fork = getattr(fanout, forking)
    monkeypatch.setattr(fanout, forking, lambda *a: forks.append(1) or real_fork(*a))
    if way == "streamed":
        monkeypatch.setattr(summary.cachefile, "_BATCH", 3)
        monkeypatch.setattr(fanout, "STREAM_PIECE", 4)
    env = {"XDG_CACHE_HOME": str(tmp_path / "shared"), fanout.PROCESSES_ENV: "3", **limit}
    if args[0] == "claim":
        jobctl.store().release(alone.text.split("JOB_ID=")[1].split()[0], 1)
    shared = jobctl(*args, env=env)
    if args[0] == "claim":  # the same job, claimed a second time
        assert shared.code == alone.code == 0
        assert shared.out == alone.out.replace(b"JOB_EPOCH=1", b"JOB_EPOCH=2")
    else:
        assert (shared.code, shared.out, shared.err) == (alone.code, alone.out, alone.err)
    # list --json needs whole records, which are not sent between processes: its scan stays here
    assert bool(forks) == (args[:2] != ("list", "--json")), "the scan was not shared"
    if args[0] == "claim":
        return
    decoded.clear()
    warm = jobctl(*args, env=env)  # from the cache the shared scan wrote
    assert (warm.code, warm.out, warm.err) == (alone.code, alone.out, alone.err)
    if "--json" not in args:
        assert not set(decoded) & set(finished), "a finished record was decoded again"


def many_records(root: Path, n: int) -> None:
    """``n`` records, one in a hundred pending, the rest finished, written as encoded bytes (as a large store holds)."""
    from datetime import datetime, timedelta, timezone

    from jobctl import FileStore
    from jobctl.record import encode

    jobs = Path(FileStore(root, summaries=False).jobs_dir)
    created = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rec = Record(kind="backup", spec={"argv": ["true"]})
    for k in range(n):
        rec.id = f"{1767225600000 + k:013d}-{k:020x}"
        rec.created_at = rec.updated_at = rec.progress.updated_at = created + timedelta(seconds=k % 977)
        rec.state = "pending" if k % 100 == 99 else ("complete", "failed")[k % 2]
        if rec.state != "pending":
            rec.lease.owner, rec.lease.epoch, rec.lease.expires_at = "w", 1, created + timedelta(minutes=1)
        else:
            rec.lease.owner, rec.lease.epoch, rec.lease.expires_at = "", 0, None
        (jobs / f"{rec.id}.json").write_bytes(encode(rec))


def test_a_cold_listing_of_thousands_exits_before_its_listing_part_is_written(tmp_path: Path) -> None:
    """As a command: a shared cold scan prints what one process prints, with the same exit code, and ends.

    The listing part is written by a child the command does not wait for,
    and the listing's summaries are never freed; the part then appears
    whole, and the warm listing it serves prints the same again.
    """
    import subprocess
    import sys

    from jobctl import fanout

    root = tmp_path / "root"
    many_records(root, 3000)
    (root / "jobs" / "1-broken.json").write_bytes(b"{")  # named on stderr, exit 1, in every way

    def listing(cache: str, processes: str) -> tuple[int, bytes, bytes]:
        env = dict(os.environ, JOB_STORE=str(root), XDG_CACHE_HOME=str(tmp_path / cache))
        env[fanout.PROCESSES_ENV] = processes
        done = subprocess.run([sys.executable, "-m", "jobctl", "list"], env=env, capture_output=True, timeout=120)
        return done.returncode, done.stdout, done.stderr

    time.sleep(summary.RACY_NS / 1e9 + 0.1)  # old enough for the listing part to keep every summary
    alone = listing("alone", "1")
    assert alone[0] == 1 and alone[1].count(b"\n") == 3000 and b"1-broken" in alone[2]
    assert listing("shared", "2") == alone
    parts = tmp_path / "shared" / "jobctl" / "summaries"
    deadline = time.monotonic() + 30
    while not list(parts.glob("*.list")) and time.monotonic() < deadline:
        time.sleep(0.05)  # written by the child the command left working
    (part,) = parts.glob("*.list")
    assert listing("shared", "2") == alone  # warm: the summaries from the part
    assert part.stat().st_mtime_ns == next(parts.glob("*.list")).stat().st_mtime_ns  # nothing to rewrite


def test_a_listing_of_thousands_leaves_its_part_to_a_child_and_keeps_its_summaries(
    jobctl: Jobctl, later: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The listing part is written once the lines are out, by a child the process does not wait for at
    # exit (settle() still waits: a listing reads what this process wrote), and the listing's objects
    # are frozen in a cycle, never freed (the thresholds lowered to this small store).
    import gc

    from jobctl import fanout
    from jobctl.cli import view

    finished, _ = populate(jobctl)
    monkeypatch.setattr(summary.listed, "_ASIDE_FROM", 1)
    monkeypatch.setattr(file_listing, "_SHARED_FROM", 2)
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.setattr(view, "_KEEP_FROM", 1)
    calls: list[bool] = []
    real_aside = fanout.aside

    def aside(work: Any, *, at_exit: bool = True) -> bool:
        calls.append(at_exit)
        return real_aside(work, at_exit=at_exit)

    monkeypatch.setattr(fanout, "aside", aside)
    alone = jobctl("list", env={fanout.PROCESSES_ENV: "1", "XDG_CACHE_HOME": str(tmp_path / "alone")})
    gc.unfreeze()
    calls.clear()
    shared = jobctl("list", env={fanout.PROCESSES_ENV: "2", "XDG_CACHE_HOME": str(tmp_path / "shared")})
    try:
        assert gc.get_freeze_count() > 0, "the listing was let go of"
    finally:
        gc.unfreeze()
    assert calls == [False]
    assert (shared.code, shared.out, shared.err) == (alone.code, alone.out, alone.err)
    summary.settle()
    jobs = jobctl.store().jobs_dir
    cache = str(tmp_path / "shared" / "jobctl" / "summaries")
    part = summary.Listed.of(summary.Summaries.load(cache, jobs, os.stat(jobs), read=False))
    assert sorted(row[0] for row in part.rows) == sorted(finished)
