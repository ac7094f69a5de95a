"""``jobctl worker`` processes race for 1,000 jobs on a real server, SIGKILLed at random, through a server restart.

Several worker processes (each its own owner, standing in for several hosts)
run ``shell`` jobs from one PostgreSQL store. Each job appends to a side-effect
log, holding an exclusive ``flock`` on a file of its own while it runs, and
writes ``DOUBLE`` if it finds another run of itself inside::

    ID EPOCH start
    ID EPOCH checkpointed            (its `jobctl checkpoint '{"by":EPOCH}'` went through)
    ID EPOCH resume {"by":E}         ($JOB_CHECKPOINT was a predecessor's)
    ID EPOCH end
    ID EPOCH DOUBLE

Every ``CHECKPOINT_EVERY``-th job checkpoints and then works a while; the
others are quick. As the jobs end, the test SIGKILLs a worker -- one holding a
checkpointed job when there is one, so adoption with a checkpoint happens for
sure, else one at random -- and starts a replacement; half-way it restarts the
server. Afterwards:

* every job is ``complete``; its last run (the highest epoch) is the one that
  ended it, and no run started after it;
* no two runs of one job overlap (no ``DOUBLE``; per job, runs follow one
  another epoch by epoch in the log);
* a run that found a checkpoint resumed from its predecessor's, and once a job
  has checkpointed, every later run of it resumed from that checkpoint;
* the races happened: workers were killed, jobs were adopted (a run of a
  higher epoch after one that did not end), some of them resumed from a
  checkpoint; a worker connected before the restart ran jobs after it (its
  connection could not survive, so it reconnected) and exited 0;
* a write from before the restart with a stale epoch is refused ``stale_epoch``.

Jobs are submitted as the work goes on, at most ``WINDOW`` not yet complete,
as producers do. ``JOBCTL_RACE_JOBS`` sets the number of jobs (default
1,000); ``JOBCTL_RACE_SEED`` fixes the choice of victims (the seed is
printed, so a failure shows it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobctl import Record
from jobctl.errors import StaleEpoch
from jobctl.store import postgres

JOBCTL = str(Path(sys.executable).parent / "jobctl")
JOBS = int(os.environ.get("JOBCTL_RACE_JOBS", "1000"))
WORKERS = 4
CONCURRENCY = 4
CHECKPOINT_EVERY = 25
TTL = 3
#: Workers SIGKILLed, spread evenly over the jobs' ends (the server restarts at the middle one).
KILL_POINTS = 8
#: Give up when no job has ended for this many seconds.
TIMEOUT = float(os.environ.get("JOBCTL_RACE_TIMEOUT", "120"))
#: Jobs submitted and not yet complete, at most: producers submit as work goes on. (A worker without
#: change notices rescans every open record each poll, so a backlog of 1,000 would measure that instead.)
WINDOW = 32
OPTIONS = ["--ttl", str(TTL), "--grace", "1", "--poll-interval", "0.5", "--shutdown-grace", "10"]

JOB_SCRIPT = """\
exec 9>>"{locks}/$JOB_ID"
if ! flock -n 9; then
    echo "$JOB_ID $JOB_EPOCH DOUBLE" >>"{log}"
    flock 9
fi
echo "$JOB_ID $JOB_EPOCH start" >>"{log}"
if [ "$JOB_CHECKPOINT" = null ]; then
    if [ "$CHECKPOINT" = 1 ]; then
        # A command started while the server is away cannot connect (exit 1): try again.
        tries=0
        until {jobctl} checkpoint "{{\\"by\\":$JOB_EPOCH}}" >/dev/null; do
            rc=$?
            tries=$((tries + 1))
            if [ "$rc" != 1 ] || [ "$tries" -ge 100 ]; then exit "$rc"; fi
            sleep 0.1
        done
        echo "$JOB_ID $JOB_EPOCH checkpointed" >>"{log}"
    fi
else
    echo "$JOB_ID $JOB_EPOCH resume $JOB_CHECKPOINT" >>"{log}"
fi
if [ "$CHECKPOINT" = 1 ]; then sleep 1; fi
echo "$JOB_ID $JOB_EPOCH end" >>"{log}"
"""


class Workers:
    """The worker processes: started, killed, replaced, stopped; each one's output in a file of its own."""

    def __init__(self, url: str, home: Path, out_dir: Path) -> None:
        self.url = url
        self.out_dir = out_dir
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_", "ABSTRACTION_"))}
        self.env.update({"HOME": str(home), "JOBCTL_CONFIG": str(home / "no-config.ini")})
        self.live: dict[int, subprocess.Popen[bytes]] = {}
        self.all: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.killed: list[int] = []

    def start(self) -> subprocess.Popen[bytes]:
        name = f"host-{len(self.all)}"
        out = self.out_dir / f"{name}.out"
        with open(out, "wb") as sink:
            proc = subprocess.Popen(
                [JOBCTL, "worker", "--store", self.url, "--name", name, "--concurrency", str(CONCURRENCY), *OPTIONS],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.live[proc.pid] = proc
        self.all.append((name, proc, out))
        # Its first line comes just before it takes SIGTERM over: wait for it, so stop() finds it listening.
        deadline = time.monotonic() + 60
        while b"jobctl worker: " + name.encode() not in out.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")
            time.sleep(0.05)
        return proc

    def kill(self, pid: int) -> None:
        proc = self.live.pop(pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.killed.append(pid)

    def stop(self) -> None:
        for proc in self.live.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.live.values():
            proc.wait(timeout=60)

    def tails(self) -> str:
        """The last lines of every worker's output, for a failure message."""
        parts = []
        for name, proc, out in self.all:
            tail = out.read_text(errors="replace").splitlines()[-8:]
            parts.append(f"-- {name} (pid {proc.pid}, exit {proc.poll()}):\n" + "\n".join(tail))
        return "\n".join(parts)

    def reap(self) -> None:
        for _, proc, _ in self.all:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def states(url: str) -> dict[str, int]:
    """How many rows are in each state (a new connection each time: the server may have restarted since)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute("SELECT state, count(*) FROM jobctl_jobs GROUP BY state").fetchall())


def victim(store: postgres.PostgresStore, workers: Workers, spare: int, rng: random.Random) -> int:
    """A worker to kill (never ``spare``): one holding a job that has checkpointed, if one shows within 5 s.

    Else any, at random. Aiming makes sure that adoption with a checkpoint
    happens; the moment within the job's run is still the race's.
    """
    pids = sorted(p for p in workers.live if p != spare)
    deadline = time.monotonic() + 5
    while True:
        holders = set()
        for rec in store.list_open():
            if rec.state == "running" and rec.checkpoint is not None and rec.lease.owner:
                holders.add(int(rec.lease.owner.rsplit(":", 1)[1]))
        aimed = sorted(holders.intersection(pids))
        if aimed or time.monotonic() > deadline:
            return rng.choice(aimed or pids)
        time.sleep(0.1)


@pytest.mark.timeout(1200)  # the hang guard is TIMEOUT: no job ending for that long
def test_workers_race_for_jobs_through_kills_and_a_server_restart(pg_server: Any, pg_url: str, tmp_path: Path) -> None:
    if not pg_server.restartable:
        pytest.skip("JOBCTL_TEST_PG_URL names a server these tests did not start; they do not restart it")
    postgres.init(pg_url)
    store = postgres.PostgresStore(pg_url)
    old_holder = postgres.PostgresStore(pg_url)
    try:
        race(pg_server, pg_url, tmp_path, store, old_holder)
    finally:  # a connection left open would warn in whichever test the collector runs in
        store.close()
        old_holder.close()


def race(
    pg_server: Any, pg_url: str, tmp_path: Path, store: postgres.PostgresStore, old_holder: postgres.PostgresStore
) -> None:
    seed = int(os.environ.get("JOBCTL_RACE_SEED", str(time.time_ns())))
    print(f"race: JOBCTL_RACE_SEED={seed}")
    rng = random.Random(seed)
    log, locks, home = tmp_path / "effects.log", tmp_path / "locks", tmp_path / "home"
    locks.mkdir()
    home.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(JOB_SCRIPT.format(locks=locks, log=log, jobctl=JOBCTL))
    ids: list[str] = []

    def submit(n: int) -> None:
        env = {"CHECKPOINT": "1" if n % CHECKPOINT_EVERY == 0 else "0"}
        ids.append(store.submit(Record(kind="shell", spec={"argv": ["/bin/sh", str(script)], "env": env})))

    # A job no worker runs (no handler for its kind): the fencing probe across the restart.
    probe = store.submit(Record(kind="probe", spec={}))
    stale = old_holder.claim(probe, "old-host", 0.2)

    workers = Workers(pg_url, home, tmp_path)
    try:
        spare = workers.start().pid  # never killed: it must live through the restart
        for _ in range(WORKERS - 1):
            workers.start()
        step = max(1, JOBS // (KILL_POINTS + 1))
        restart_point = KILL_POINTS // 2
        mark: dict[str, int] = {}  # each worker's output size at the restart
        point, done, progress_at = 1, -1, time.monotonic()
        while done < JOBS or point <= KILL_POINTS:
            complete = states(pg_url).get("complete", 0)
            if complete != done:
                done, progress_at = complete, time.monotonic()
            elif time.monotonic() - progress_at > TIMEOUT:
                raise AssertionError(f"no job ended for {TIMEOUT:g} s: {states(pg_url)}\n{workers.tails()}")
            while len(ids) < JOBS and len(ids) - done < WINDOW:
                submit(len(ids))
            if point <= KILL_POINTS and done >= point * step:
                if point == restart_point:
                    current = store.claim(probe, "new-host", 60)  # old-host's lease lapsed long ago
                    assert current.lease.epoch > stale.lease.epoch
                    pg_server.restart()
                    mark = {out.name: out.stat().st_size for _, proc, out in workers.all if proc.poll() is None}
                workers.kill(victim(store, workers, spare, rng))
                workers.start()
                point += 1
            time.sleep(0.1)
        workers.stop()
    finally:
        workers.reap()

    # -- a write from before the restart with a stale epoch is refused after it
    with pytest.raises(StaleEpoch):
        old_holder.progress(probe, stale.lease.epoch, 1, checkpoint={"by": "old-host"})
    assert store.load(probe).lease.owner == "new-host" and store.load(probe).checkpoint is None
    assert old_holder.reconnects == 1

    # -- every job complete, nothing else in the store moved
    records = {r.id: r for r in store.list()}
    assert sorted(records) == sorted([*ids, probe])
    assert all(records[i].state == "complete" for i in ids), states(pg_url)

    runs: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    order: dict[str, list[int]] = defaultdict(list)
    lines = [line.split(" ", 2) for line in log.read_text().splitlines()]
    for job_id, epoch_text, what in lines:
        epoch = int(epoch_text)
        runs[job_id][epoch].append(what)
        order[job_id].append(epoch)
    assert sorted(runs) == sorted(ids)

    # -- no two runs of one job overlap
    assert not [line for line in lines if line[2] == "DOUBLE"]
    for job_id, epochs in order.items():
        assert epochs == sorted(epochs), f"job {job_id}: runs interleave in the log: {epochs}"

    adopted = resumed = 0
    for job_id, by_epoch in runs.items():
        final = records[job_id].lease.epoch
        # -- the run that completed the job is its last one, and it ran to its end
        assert max(by_epoch) == final, f"job {job_id}: a run of epoch {max(by_epoch)} after the complete one"
        assert by_epoch[final][-1] == "end", f"job {job_id}: {dict(by_epoch)}"
        if len(by_epoch) > 1:
            adopted += 1
        # -- an adopted job resumes from its checkpoint. The run that wrote it may
        # have died before its "checkpointed" line, so the checkpoint's own
        # "by", as the record and the resumed runs give it, names that run too.
        found = [json.loads(w.split(" ", 1)[1])["by"] for seen in by_epoch.values() for w in seen if " " in w]
        logged = [e for e, seen in by_epoch.items() if "checkpointed" in seen]
        kept = records[job_id].checkpoint
        sources = {*found, *logged, *([kept["by"]] if kept is not None else [])}
        assert len(sources) <= 1, f"job {job_id} checkpointed fresh twice: {dict(by_epoch)}"
        for source in sources:
            assert kept == {"by": source}, f"job {job_id}: the record's checkpoint is {kept}: {dict(by_epoch)}"
            assert "start" in by_epoch[source] and not any(w.startswith("resume") for w in by_epoch[source])
            for epoch, seen in by_epoch.items():
                if epoch > source:
                    assert [w for w in seen if w.startswith("resume")] == [f'resume {{"by":{source}}}'], (
                        f"job {job_id} epoch {epoch} did not resume from epoch {source}: {dict(by_epoch)}"
                    )
                    resumed += 1

    # -- the races happened
    assert len(workers.killed) == KILL_POINTS
    assert adopted > 0 and resumed > 0, (adopted, resumed)
    outputs = {out.name: (proc, out.read_bytes()) for _, proc, out in workers.all}
    for name, (proc, text) in outputs.items():
        assert b"Traceback" not in text, f"{name}:\n{text.decode(errors='replace')}"
        if proc.pid not in workers.killed:
            assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{text.decode(errors='replace')}"
    # Connected before the restart, and ran jobs after it: it reconnected.
    survivors = [name for name, size in mark.items() if outputs[name][0].pid not in workers.killed]
    reconnected = [name for name in survivors if b"started" in outputs[name][1][mark[name] :]]
    assert reconnected, {name: outputs[name][1][mark[name] :].decode(errors="replace") for name in survivors}
    print(f"race: {JOBS} jobs, {len(workers.killed)} workers killed, {adopted} jobs adopted, {resumed} runs resumed")
