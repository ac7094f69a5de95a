"""A supervisor stopped (SIGSTOP, Ctrl-Z) mid-job while a third party recalls the job, or while its lease lapses.

The job is the kill campaigns' (``_campaign.py``): it takes an exclusive
non-blocking ``flock`` on a per-job file and records ``DOUBLE`` when it finds
it taken, so two runs of one job at the same time cannot both miss it. The
supervisor (a worker, or ``jobctl run``) is stopped while the job runs; while
it stays stopped, ``jobctl recall`` shortens the lease (or the lease just
lapses), and a second claimant claims the job as soon as the store lets it and
runs the job's flock check. The first child must be dead before that claim
succeeds, which only the guardian can have done: its supervisor was stopped
from before the recall until after the second run.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _campaign import JOB as FLOCK_JOB
from _campaign import read_runs
from workertools import Guarded, WorkerProcess, gone, no_config, wait_until

from jobctl import FileStore, LeaseHeld, Record, StaleEpoch, schedule
from jobctl.keeper import Lookout
from jobctl.runner import Guardian, LeaseRecord, Run, shell_command
from jobctl.runner.start import guard_margin
from jobctl.store.base import Store

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("flock") is None, reason="the flock-checked job needs flock(1) (util-linux)"),
]

JOBCTL = str(Path(sys.executable).parent / "jobctl")

#: Renewals every 3 s: the lease a stopped supervisor leaves behind runs at least 6 s past the stop,
#: far past a recall's ``until`` (RECALL_GRACE after it): without the record, the guardian would be late.
TTL = 9.0
RECALL_GRACE = 2.0


def process_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_", "MAX_CONCURRENT"))}
    return {**env, "JOB_STORE": str(root), "JOBCTL_CONFIG": no_config()}


def flock_job(store: FileStore, tmp_path: Path) -> tuple[str, Path]:
    """Submit the flock-checked job (it holds its lock for a minute); returns its id and the runs file."""
    locks, runs = tmp_path / "locks", tmp_path / "runs"
    locks.mkdir()
    env = {"LOCKS": str(locks), "RUNS": str(runs), "HOLD": "60"}
    return store.submit(Record(kind="shell", spec={"argv": ["sh", "-c", FLOCK_JOB], "env": env})), runs


def first_start(runs: Path) -> tuple[int, int, int]:
    """(epoch, child pid, supervisor pid) of the first run, once it holds the job's flock.

    The child's parent is the supervisor's guardian, which started it: the supervisor is the guardian's parent.
    """
    starts = wait_until(lambda: [line for line in read_runs(runs) if line[0] == "start"], what="the first run")
    _, _, epoch, pid, ppid = starts[0]
    with open(f"/proc/{ppid}/stat") as fh:
        supervisor = int(fh.read().rsplit(")", 1)[1].split()[1])
    return int(epoch), int(pid), supervisor


@pytest.fixture
def supervise(root: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``jobctl run`` processes; whatever is left of them (stopped or not) is ended after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([JOBCTL, "run", *args], env=process_env(root), stdout=subprocess.DEVNULL)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()  # SIGKILL ends a stopped process too; its guardian then kills its child
        proc.wait(30)


@pytest.fixture
def resume() -> Iterator[list[int]]:
    """Pids stopped by a test: each gets SIGCONT after it, so a failed test leaves nothing frozen."""
    stopped: list[int] = []
    yield stopped
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read()
    return stat[stat.rindex(")") + 2]


def stop(pid: int, resume: list[int]) -> None:
    resume.append(pid)
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: proc_state(pid) == "T", 10, "the supervisor to be stopped")


def recall(store: FileStore, root: Path, job: str, epoch: int) -> Record:
    """A third party's ``jobctl recall``, in its own process."""
    subprocess.run(
        [JOBCTL, "recall", job, "--epoch", str(epoch), "--reason", "maintenance", "--grace", str(RECALL_GRACE)],
        env=process_env(root),
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=30,
    )
    return store.load(job)


def claim_when_allowed(store: FileStore, job: str, child: int) -> tuple[Record, bool]:
    """Claim as ``second`` as soon as the store allows; also whether ``child`` was dead just before that claim."""
    deadline = time.monotonic() + 3 * TTL
    while True:
        dead = gone(child)
        try:
            return store.claim(job, "second", 60), dead
        except LeaseHeld:
            if time.monotonic() > deadline:
                pytest.fail("the lease never ended")
            time.sleep(0.01)


def second_run(runs: Path, job: str, epoch: int) -> list[list[str]]:
    """The second claimant runs the job's flock check (it lets go at once); every line of the runs file."""
    env = {**os.environ, "LOCKS": str(runs.parent / "locks"), "RUNS": str(runs), "HOLD": "0"}
    env.update(JOB_ID=job, JOB_EPOCH=str(epoch))
    subprocess.run(["sh", "-c", FLOCK_JOB], env=env, check=True, timeout=30)
    return read_runs(runs)


def assert_no_double_run(lines: list[list[str]], job: str, first: tuple[int, int], second: int) -> None:
    assert [line for line in lines if line[0] == "DOUBLE"] == []
    runs = [(int(line[2]), int(line[3])) for line in lines if line[0] == "start" and line[1] == job]
    assert runs[0] == first and [epoch for epoch, _ in runs] == [first[0], second]


@pytest.mark.parametrize("supervisor", ["worker", "run"])
def test_a_recall_made_while_the_supervisor_is_stopped_kills_the_child_before_until(
    store: FileStore,
    root: Path,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    supervise: Callable[..., subprocess.Popen[bytes]],
    resume: list[int],
    supervisor: str,
) -> None:
    job, runs = flock_job(store, tmp_path)
    if supervisor == "worker":
        worker = workers(ttl=TTL, grace=0.5)
        pid = worker.proc.pid
    else:
        run = supervise(job, "--ttl", str(TTL))
        pid = run.pid
    epoch, child, parent = first_start(runs)
    assert parent == pid
    stop(pid, resume)
    assert not gone(child)  # it runs on under a stopped supervisor
    before = store.load(job)
    rec = recall(store, root, job, epoch)
    assert rec.lease.recall is not None and rec.lease.recall.until is not None
    until = rec.lease.recall.until
    # The race: the guardian's time from the last renewal it was told of comes after ``until``, when
    # the job may already be claimed again. Only the recall in the record can make it act in time.
    assert before.lease.expires_at is not None
    assert before.lease.expires_at - timedelta(seconds=guard_margin(TTL)) > until

    second, dead_first = claim_when_allowed(store, job, child)
    assert second.lease.epoch == epoch + 1
    assert second.lease.expires_at is not None
    assert second.lease.expires_at - timedelta(seconds=60) >= until  # claimed once the recall's grace was over
    assert dead_first, "the first child was still alive when the second claim was made"
    lines = second_run(runs, job, second.lease.epoch)
    assert proc_state(pid) == "T"  # the supervisor was stopped from before the recall until now
    assert_no_double_run(lines, job, (epoch, child), second.lease.epoch)

    os.kill(pid, signal.SIGCONT)
    if supervisor == "worker":
        fenced = worker.next_event(lambda e: e["what"] == "fenced" and e["id"] == job)
        assert "stale_epoch" in fenced["detail"]
    else:
        assert run.wait(30) == StaleEpoch.exit_code
    # The resumed supervisor wrote nothing: the job is the second claimant's.
    rec = store.load(job)
    assert (rec.state, rec.lease.epoch, rec.lease.owner, rec.error) == ("running", epoch + 1, "second", "")


def test_jobctl_run_stopped_past_its_lease_has_its_child_killed_before_the_lease_lapses(
    store: FileStore, tmp_path: Path, supervise: Callable[..., subprocess.Popen[bytes]], resume: list[int]
) -> None:
    """Issue 11 item 3: ``jobctl run`` under SIGSTOP, nobody recalling: the lease lapses, the child goes first."""
    job, runs = flock_job(store, tmp_path)
    ttl = 3.0
    run = supervise(job, "--ttl", str(ttl))
    epoch, child, parent = first_start(runs)
    assert parent == run.pid
    stop(run.pid, resume)
    assert not gone(child)
    lease_end = store.load(job).lease.expires_at
    assert lease_end is not None

    second, dead_first = claim_when_allowed(store, job, child)
    assert second.lease.expires_at is not None
    # The race: the claim came once the stopped run's lease had lapsed (the claim's lease started then).
    assert second.lease.expires_at - timedelta(seconds=60) >= lease_end
    assert dead_first, "the first child was still alive when the second claim was made"
    lines = second_run(runs, job, second.lease.epoch)
    assert proc_state(run.pid) == "T"  # stopped from before the lapse until after the second run
    assert_no_double_run(lines, job, (epoch, child), second.lease.epoch)

    os.kill(run.pid, signal.SIGCONT)
    assert run.wait(30) == StaleEpoch.exit_code
    rec = store.load(job)
    assert (rec.state, rec.lease.epoch, rec.lease.owner, rec.error) == ("running", epoch + 1, "second", "")


# -- the guardian's own reading of the record ----------------------------------------------------------

FAR = 3600.0  # a reported time that never comes during a test: only the record can make the guardian act


def guarded(guardian: Guardian, store: Store, job: str, epoch: int) -> Guarded:
    """A sleeper the guardian started, following ``job``'s lease at ``epoch`` where the store keeps it."""
    source = store.lease_source(job)
    assert source is not None
    return Guarded(guardian, time.monotonic() + FAR, LeaseRecord(source, epoch, 0.5, 0.05))


@pytest.fixture
def guardian() -> Iterator[Guardian]:
    guard = Guardian()
    yield guard
    guard.close()  # kills whatever it still guards


def test_the_guardian_kills_at_once_when_the_record_shows_another_epoch(store: FileStore, guardian: Guardian) -> None:
    job = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    held = store.claim(job, "me", 60)
    child = guarded(guardian, store, job, held.lease.epoch)
    store.claim(job, "me", 60)  # the same owner may claim again [JOB-O2]: the epoch moves on
    assert child.wait(10) == -signal.SIGKILL


def test_the_guardian_follows_a_recall_in_the_record(store: FileStore, guardian: Guardian) -> None:
    job = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    held = store.claim(job, "me", 60)
    child = guarded(guardian, store, job, held.lease.epoch)
    store.recall(job, held.lease.epoch, "maintenance", "ops", 1.0)
    assert child.wait(10) == -signal.SIGKILL
    # Renewals capped at the recall's until [JOB-R4] cannot move it on again; the record stays the holder's.
    assert store.load(job).lease.epoch == held.lease.epoch


class Opens:
    """Counts the opens of one file in a directory (inotify ``IN_OPEN``): how often the guardian read the record."""

    IN_OPEN = 0x20
    IN_CLOSE_NOWRITE = 0x10  # watched too: inotify folds repeated events unread in a row into one

    def __init__(self, path: str) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self.name = os.fsencode(os.path.basename(path))
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0
        mask = self.IN_OPEN | self.IN_CLOSE_NOWRITE
        assert libc.inotify_add_watch(self.fd, os.fsencode(os.path.dirname(path)), mask) >= 0

    def count(self) -> int:
        """Opens since the last count."""
        n = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                buf = os.read(self.fd, 1 << 16)
                off = 0
                while off < len(buf):
                    _wd, mask, _cookie, length = struct.unpack_from("iIII", buf, off)
                    name = buf[off + 16 : off + 16 + length].rstrip(b"\0")
                    off += 16 + length
                    n += bool(mask & self.IN_OPEN and name == self.name)
        return n

    def close(self) -> None:
        os.close(self.fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts opens with inotify")
@pytest.mark.file_only("counts the guardian's opens of the record file; a row has no file")
def test_the_guardian_reads_the_record_again_only_when_its_file_changed(store: FileStore, guardian: Guardian) -> None:
    job = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    held = store.claim(job, "me", 60)
    changed = time.monotonic()
    path = store.path(job)
    opens = Opens(path)
    child = Guarded(guardian, time.monotonic() + FAR, LeaseRecord(path, held.lease.epoch, 0.5, 0.02))
    try:
        time.sleep(0.3)
        # Just written: a second write within the file system's clock tick could leave its times as they were.
        assert opens.count() > 3
        time.sleep(max(0.0, changed + 2.0 - time.monotonic()))  # past the second, and a slow look
        opens.count()
        time.sleep(0.5)  # 25 looks: each a stat of an unchanged file, none a read
        assert opens.count() == 0
        assert child.poll() is None
        store.claim(job, "me", 60)  # a new inode with another epoch: the next look reads it, and kills
        assert child.wait(10) == -signal.SIGKILL
        assert opens.count() >= 1
    finally:
        opens.close()
        child.kill()


@pytest.mark.file_only("links and FIFOs in place of the record file; a row has neither")
def test_the_guardian_follows_no_link_and_never_blocks_on_what_is_not_a_record(
    store: FileStore, guardian: Guardian, tmp_path: Path
) -> None:
    job = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    held = store.claim(job, "me", 60)
    store.claim(job, "me", 60)  # the record now says another epoch: whoever reads it kills at once
    link, fifo = tmp_path / "link.json", tmp_path / "fifo.json"
    link.symlink_to(store.path(job))
    os.mkfifo(fifo)
    far = time.monotonic() + FAR
    linked = Guarded(guardian, far, LeaseRecord(str(link), held.lease.epoch, 0.5, 0.05))
    piped = Guarded(guardian, far, LeaseRecord(str(fifo), held.lease.epoch, 0.5, 0.05))
    # Read after the other two in each pass: its kill shows the guardian got past both, blocking on neither.
    control = Guarded(guardian, far, LeaseRecord(store.path(job), held.lease.epoch, 0.5, 0.05))
    assert control.wait(10) == -signal.SIGKILL
    for proc in (linked, piped):
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.5)  # had the guardian followed the link, it would have killed this one first
    for proc in (linked, piped):
        proc.kill()


@pytest.mark.file_only("a file store given another clock; a database's lease is read by the server's clock")
def test_only_a_store_on_the_system_clock_offers_its_record(store: FileStore, root: Path) -> None:
    job = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
    assert store.lease_source(job) == store.path(job)
    assert FileStore(root, clock=store.now).lease_source(job) is None  # its times are not time.time()'s


def test_a_kill_by_the_guardian_is_not_counted_as_the_job_failing(store: FileStore, tmp_path: Path) -> None:
    """The guardian reads the record more often than a run checks it: a short recall is its to enforce."""
    job = store.submit(Record(kind="shell", spec={"argv": ["sleep", "60"]}))
    claimed = store.claim(job, "me", 30)
    # A run that reads the record only at its renewals (every 10 s) and hears no notices (a lookout
    # with no store), and a recall with a second's grace.
    run = Run(store, claimed, shell_command, ttl=30, grace=5.0, check_every=30, lookout=Lookout(None))
    threading.Timer(0.2, lambda: store.recall(job, claimed.lease.epoch, "maintenance", "ops", 1.0)).start()
    outcome = run.execute()
    assert outcome.exit_code == -signal.SIGKILL
    assert outcome.fenced and outcome.reason == "fenced"  # it wrote nothing: no failure counted
    rec = store.load(job)
    assert (rec.state, rec.error, rec.lease.epoch) == ("running", "", claimed.lease.epoch)
    assert rec.lease.recall is not None and schedule.attempt(rec) == 1


def test_the_guardian_keeps_the_last_lease_it_read_while_the_server_is_away(
    pg_server: Any, pg_url: str, guardian: Guardian
) -> None:
    """A row's lease is read apart from the loop that kills: a server gone away leaves the recall it read in force."""
    if not pg_server.restartable:
        pytest.skip("the server is somebody else's (JOBCTL_TEST_PG_URL): not the tests' to stop")
    from jobctl.store import postgres

    postgres.init(pg_url)
    store = postgres.PostgresStore(pg_url)
    try:
        job = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
        held = store.claim(job, "me", 60)
        called = store.recall(job, held.lease.epoch, "maintenance", "ops", 5.0).lease.recall
        assert called is not None and called.at is not None
        assert isinstance(store.lease_source(job), postgres.RowLease)
        child = guarded(guardian, store, job, held.lease.epoch)
        # The guardian's own session has read the recalled row (the server shows its last statement).
        assert guardian.proc is not None
        name = f"jobctl guardian {guardian.proc.pid}"  # not another test's guardian, still reading its rows
        wait_until(lambda: _read_since(pg_url, name, called.at), what="the guardian's read of the recalled row")
        seen: list[bool] = []

        def while_down() -> None:
            seen.append(child.poll() is None)  # still running when the server went away
            seen.append(child.wait(30) == -signal.SIGKILL)

        pg_server.restart(while_down)
        assert seen == [True, True]
        # The guardian outlived the outage: it reads rows again once the server is back.
        other = store.submit(Record(kind="shell", spec={"argv": ["true"]}))
        mine = store.claim(other, "me", 60)
        second = guarded(guardian, store, other, mine.lease.epoch)
        store.claim(other, "me", 60)  # another epoch: the guardian kills at once when it reads it
        assert second.wait(30) == -signal.SIGKILL
    finally:
        store.close()


def _read_since(url: str, name: str, since: datetime) -> bool:
    """Whether the session ``name`` ran the guardian's read of the leases (its statement_timestamp) after ``since``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND position('statement_timestamp' in query) > 0 AND query_start > %s",
            (name, since),
        ).fetchone()
    return bool(row and row[0])
