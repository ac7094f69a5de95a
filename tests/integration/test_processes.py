"""Real processes fighting over the same record: the lock and the lease across process boundaries.

Each test drives actors from ``_actors.py`` (see the ``spawn`` fixture) and
judges only what ends up on disk and what the store answered: no durations
are asserted. [JOB-L1] [JOB-L2] [JOB-L3] [JOB-L4] [JOB-L5] [JOB-O1]
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from jobctl import FileStore, Record
from jobctl.record import decode, encode, parse_time


def answer(proc: subprocess.Popen[str]) -> str:
    """The next line an actor prints; fail (not hang) when it died instead."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"actor {proc.args[2:]} exited {proc.wait()} without answering")
    return line.rstrip("\n")


def tell(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def finished(proc: subprocess.Popen[str]) -> None:
    assert proc.wait() == 0, f"actor {proc.args[2:]} exited {proc.returncode}"


@pytest.mark.timeout(60)
def test_four_processes_lose_no_increment(tmp_path: Path, spawn) -> None:
    """4 x 250 increments, each under its own claim, counted back exactly.

    The incrementers write the counter blind (the value read at claim time,
    plus one), so only the lease keeps them apart: two holders at once would
    lose an increment, and a claim that did not raise the epoch would show
    as an epoch won twice.
    """
    store = FileStore(tmp_path)
    job_id = store.submit(Record(kind="counter", spec={}, checkpoint={"counter": 0}))
    procs = [spawn("incrementer", tmp_path, job_id, f"inc-{n}", 250, n) for n in range(4)]
    assert [answer(p) for p in procs] == ["ready"] * 4  # all started, so all four really overlap
    for p in procs:
        tell(p, "go")
    reports = [json.loads(answer(p)) for p in procs]
    for p in procs:
        finished(p)

    rec = store.load(job_id)
    claims = sorted(epoch for r in reports for epoch in r["claims"])
    written = sorted(value for r in reports for _, value in r["writes"])
    assert rec.checkpoint["counter"] == 1000
    assert written == list(range(1, 1001)), "some counter value was written twice or never"
    assert rec.lease.epoch == len(claims)
    assert claims == list(range(1, len(claims) + 1)), "an epoch was won twice or skipped"
    # A 30 s lease nobody may take over: losing it means a second owner.
    assert [r["lost_leases"] for r in reports] == [[], [], [], []]
    assert (rec.state, rec.lease.owner) == ("pending", "")
    # The race this test exists for happened: writers found the record lock held
    # by another process and waited for it, and claims met a live lease.
    assert sum(r["contended"] for r in reports) > 0, "no writer ever waited for the record lock"
    assert sum(r["refused"] for r in reports) > 0, "no claim was ever refused"


def blocked_on(path: Path) -> int:
    """How many processes wait in ``flock`` on ``path`` now (the ``->`` lines of /proc/locks)."""
    inode = os.stat(path).st_ino
    with open("/proc/locks", encoding="ascii") as fh:
        return sum(1 for line in fh if "->" in line and " FLOCK " in line and f":{inode} " in line)


@pytest.mark.timeout(60)
def test_racing_claims_have_one_winner_per_epoch(tmp_path: Path, spawn) -> None:
    """8 processes released together by a kernel gate claim one pending record, 25 rounds.

    The gate opens only once the kernel shows all 8 racers blocked on it
    (/proc/locks), so every round is a race of all of them.
    """
    if not os.path.exists("/proc/locks"):
        pytest.skip("needs /proc/locks to see the racers waiting at the gate")
    racers, rounds = 8, 25
    store = FileStore(tmp_path)
    job_id = store.submit(Record(kind="race", spec={}))
    gate_path = tmp_path / "gate"
    gate_path.touch()
    gate = os.open(gate_path, os.O_RDWR)
    try:
        procs = [spawn("racer", tmp_path, job_id, f"racer-{n}", gate_path) for n in range(racers)]
        wins: dict[int, list[tuple[str, int]]] = {}
        for rnd in range(1, rounds + 1):
            # Shut the gate (waits for every racer to have left it last round) ...
            fcntl.flock(gate, fcntl.LOCK_EX)
            for p in procs:
                tell(p, f"round {rnd}")
            assert [answer(p) for p in procs] == ["ready"] * racers
            while blocked_on(gate_path) < racers:  # the barrier: every racer waits in flock(LOCK_SH)
                time.sleep(0.001)
            assert blocked_on(gate_path) == racers
            # ... and open it: the kernel wakes every blocked racer at once.
            fcntl.flock(gate, fcntl.LOCK_UN)
            outcomes = [json.loads(answer(p)) for p in procs]
            assert {o["round"] for o in outcomes} == {rnd}
            losers = [o["verdict"] for o in outcomes if not o["won"]]
            assert losers == ["lease_held"] * len(losers)
            for n, o in enumerate(outcomes):
                if o["won"]:
                    assert o["held_by"] == o["owner"]
                    wins.setdefault(o["epoch"], []).append((o["owner"], n))
            winners = [o for o in outcomes if o["won"]]
            assert len(winners) == 1, f"round {rnd}: {len(winners)} winners: {winners}"
            epoch = winners[0]["epoch"]
            winner = procs[wins[epoch][-1][1]]
            tell(winner, f"release {epoch}")
            assert answer(winner) == "released"
        for p in procs:
            tell(p, "quit")
        for p in procs:
            finished(p)
    finally:
        os.close(gate)

    twice = {epoch: owners for epoch, owners in wins.items() if len(owners) > 1}
    assert not twice, f"epochs won more than once: {twice}"
    assert sorted(wins) == list(range(1, rounds + 1))
    rec = store.load(job_id)
    assert (rec.lease.epoch, rec.lease.owner, rec.state) == (rounds, "", "pending")


@pytest.mark.timeout(60)
def test_sigkilled_writer_leaves_a_whole_committed_record(tmp_path: Path, spawn) -> None:
    """SIGKILL a looping writer until 5 kills landed inside a write; the record is always whole and committed.

    A kill inside the write window (after the temporary is created, before the
    rename) leaves that temporary behind: each one found is a kill that landed
    there. The test goes on (at least 30 kills, at most 300) until 5 have, and
    fails if they never do -- a test whose kills all miss the window proves nothing.
    """
    # 8 KB of checkpoint: a staging window (write, fsync) worth hitting. Much larger
    # records spend their time in the codec instead and the kills miss the window.
    least, most, wanted, pad = 30, 300, 5, 8 * 1024
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    store = FileStore(tmp_path)
    job_id = store.submit(Record(kind="writer", spec={}, checkpoint={"counter": 0, "pad": "x" * pad}))
    path = Path(store.path(job_id))
    lock_inode = os.stat(str(path) + ".lock").st_ino
    log = tmp_path / "committed.log"
    temp = re.compile(re.escape(path.name) + r"\.[A-Za-z0-9_]+\.tmp\Z")
    leftovers = inside = kills = 0

    while kills < least or (inside < wanted and kills < most):
        kill = kills
        kills += 1
        p = spawn("writer", tmp_path, job_id, log, pad)
        assert answer(p) == "go"
        time.sleep(rng.uniform(0, 0.05))
        p.send_signal(signal.SIGKILL)
        assert p.wait() == -signal.SIGKILL
        where = f"kill {kill} (seed {seed})"

        data = path.read_bytes()
        rec = decode(data, job_id)  # a torn file would not decode
        assert encode(rec, rederive=False) == data, f"{where}: the record is not canonical bytes"
        assert rec.checkpoint["pad"] == "x" * pad, f"{where}: checkpoint torn"
        last = int(log.read_text().splitlines()[-1].removeprefix("base "))
        on_disk = rec.checkpoint["counter"]
        assert on_disk in (last, last + 1), f"{where}: on disk {on_disk}, last committed {last}"
        assert sorted(f.name for f in path.parent.glob("*.json")) == [path.name]

        temps = [name for name in os.listdir(path.parent) if temp.match(name)]
        leftovers += len(temps)
        inside += bool(temps)
        assert store.sweep(job_id) == len(temps), where
        assert not [name for name in os.listdir(path.parent) if temp.match(name)], where
        assert os.stat(str(path) + ".lock").st_ino == lock_inode, f"{where}: the lock file was replaced"

    # The dead writers' flock went with them: the next claim (the same owner may
    # re-claim its live lease [JOB-O2]) and write go through.
    rec = store.claim(job_id, "writer", 30)
    store.progress(job_id, rec.lease.epoch, 1)
    print(f"{kills} kills, {inside} inside a write, {leftovers} temporaries swept, counter {rec.checkpoint['counter']}")
    assert inside >= wanted, f"only {inside} of {kills} kills landed inside a write (seed {seed})"


@pytest.mark.timeout(60)
def test_killed_lease_holder_is_fenced_out(tmp_path: Path, spawn) -> None:
    """A holder dies with a 1 s lease: refused until it lapses, then epoch+1; its epoch is stale."""
    store = FileStore(tmp_path)
    job_id = store.submit(Record(kind="lease", spec={}, checkpoint={"step": 1}))
    b = spawn("claimer", tmp_path, job_id, "B")
    assert answer(b) == "ready"  # imported and waiting, so it claims the moment it is told
    a = spawn("holder", tmp_path, job_id, "A", 1)
    held = json.loads(answer(a))
    a.send_signal(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    expires = parse_time(held["expires_at"], "expires_at")
    assert expires is not None

    rec = store.load(job_id)  # a dead process releases nothing: the lease stands until it lapses
    assert (rec.lease.owner, rec.lease.epoch, rec.state) == ("A", held["epoch"], "running")

    tell(b, "go")
    report = json.loads(answer(b))
    finished(b)
    attempts = report["attempts"]
    # B waited ready while A claimed, so its first try falls inside A's 1 s lease.
    assert attempts[0]["verdict"] == "lease_held"
    for att in attempts[:-1]:
        assert att["verdict"] == "lease_held"
        assert parse_time(att["before"], "before") < expires, f"refused after the lease lapsed: {att}"
    assert attempts[-1]["verdict"] == "ok"
    assert parse_time(attempts[-1]["after"], "after") >= expires, "claimed while A's lease was live"
    assert (report["owner"], report["epoch"]) == ("B", held["epoch"] + 1)

    data = Path(store.path(job_id)).read_bytes()
    c = spawn("stale", tmp_path, job_id, held["epoch"])
    verdicts = json.loads(answer(c))
    finished(c)
    assert verdicts == dict.fromkeys(("update", "progress", "finish", "renew", "release"), "stale_epoch")
    assert Path(store.path(job_id)).read_bytes() == data, "a refused write changed the record"
    rec = store.load(job_id)
    assert (rec.lease.owner, rec.lease.epoch, rec.checkpoint) == ("B", held["epoch"] + 1, {"step": 1})
