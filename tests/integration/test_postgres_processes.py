"""Worker processes racing for jobs on a real PostgreSQL server, one killed, one frozen.

Several processes (each its own owner, standing in for several hosts) pick
jobs with ``claim_next`` (``FOR UPDATE SKIP LOCKED``), make one fenced write
each, and finish them. One process SIGKILLs itself holding a lease; another
stops (SIGSTOP) holding one and is continued after a successor took its job.
Every job must end complete exactly once, the dead one's job adopted with a
higher epoch, the frozen one's late writes refused, and no two runs of one job
may overlap: by the server's clock, every accepted write of epoch e comes
before every accepted write of a later epoch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from jobctl import Record

WORKER = Path(__file__).with_name("_pg_worker.py")
REPO = Path(__file__).resolve().parents[2]
JOBS = 200


def read_log(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.02)


@pytest.mark.timeout(180)
def test_workers_race_one_killed_one_frozen_every_job_once(pg_store: object, tmp_path: Path) -> None:
    store = pg_store
    url = store.url  # type: ignore[attr-defined]
    ids = [store.submit(Record(kind="k", spec={"n": n})) for n in range(JOBS)]  # type: ignore[attr-defined]
    log = tmp_path / "effects.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    roles = [
        ["--die-after", "5"],
        ["--freeze-after", "8"],
        [],
        [],
        [],
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), url, f"host-{n}", str(log), *role],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        for n, role in enumerate(roles)
    ]
    frozen = procs[1]
    try:
        # All of them connected before any claims: otherwise a slow start could leave
        # the dying or the freezing one fewer claims than it needs to die or freeze.
        wait_for(lambda: sum(w[0] == "ready" for w in read_log(log)) == len(procs), 60, "every worker to connect")
        Path(f"{log}.go").touch()
        # The frozen worker holds a lease while stopped; wait until a successor has
        # finished its job with a higher epoch, then let it go on with its stale epoch.
        wait_for(lambda: any(w[0] == "frozen" for w in read_log(log)), 60, "the frozen worker to stop")
        stuck = next(w for w in read_log(log) if w[0] == "frozen")
        stuck_id, stuck_epoch = stuck[1], int(stuck[2])

        def adopted() -> bool:
            return any(w[0] == "done" and w[1] == stuck_id and int(w[2]) > stuck_epoch for w in read_log(log))

        wait_for(adopted, 60, f"job {stuck_id} to be adopted and finished")
        os.kill(frozen.pid, signal.SIGCONT)
        for proc in procs:
            proc.wait(timeout=120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()

    assert procs[0].returncode == -signal.SIGKILL  # the dead one died holding a lease
    assert all(proc.returncode == 0 for proc in procs[1:]), [p.returncode for p in procs]
    lines = read_log(log)

    # Every job ended complete, exactly once.
    listing = store.list()  # type: ignore[attr-defined]
    assert sorted(r.id for r in listing) == sorted(ids)
    assert all(r.state == "complete" for r in listing)
    done = [w[1] for w in lines if w[0] == "done"]
    assert sorted(done) == sorted(ids), "a job was finished twice, or never"

    # The dead worker's job was adopted with a higher epoch.
    dead = [w for w in lines if w[3] == "host-0"]
    dead_id, dead_epoch = dead[-1][1], int(dead[-1][2])
    assert dead[-1][0] == "claim"
    finisher = next(w for w in lines if w[0] == "done" and w[1] == dead_id)
    assert int(finisher[2]) > dead_epoch and finisher[3] != "host-0"

    # The frozen worker's late write was refused: the race happened, and fencing held.
    late = [w for w in lines if w[0] == "refused" and w[1] == stuck_id and w[3] == "host-1"]
    assert late and late[0][4] in ("stale_epoch", "terminal"), late
    assert not any(w[0] == "effect" and w[1] == stuck_id and int(w[2]) == stuck_epoch for w in lines)

    # No two runs of one job overlap: by the server's clock, accepted writes go epoch by epoch.
    effects: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for w in lines:
        if w[0] == "effect":
            effects[w[1]].append((w[4], int(w[2])))
    for job_id, seen in effects.items():
        epochs = [epoch for _, epoch in sorted(seen)]
        assert epochs == sorted(epochs), f"job {job_id}: writes of two runs interleave: {seen}"
    # and several workers really did share the work
    assert len({w[3] for w in lines if w[0] == "done"}) >= 3
