"""Rejecting jobs held for approval while workers run: none starts, and each says who rejected it and why.

Real processes fight here: two workers polling the store, and one ``jobctl
cancel`` process a job, all at once. A held job's cancel claims it before it
sets the intent, so no worker can adopt it in between; were it the other way
round a worker could take it, and its ending would lack the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from workertools import job_argv, no_config, submit, wait_until

from jobctl import FileStore

pytestmark = pytest.mark.timeout(120)

JOBCTL = str(Path(sys.executable).parent / "jobctl")


def test_rejected_gates_never_start_and_name_who_rejected_them_and_why(
    store: FileStore, root: Any, side_log: Path, workers: Any
) -> None:
    script = 'echo "$JOB_ID" >> "$SIDE_LOG"'
    gates = [submit(store, ["sh", "-c", script], side_log, hold=True, by="gatekeeper") for _ in range(12)]
    running = [workers("loop") for _ in range(2)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_"))}
    env.update({"JOB_STORE": str(root), "JOBCTL_CONFIG": no_config()})
    cancels = [
        subprocess.Popen(
            [JOBCTL, "cancel", job, "--by", "alice", "--reason", "not this week"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job in gates
    ]
    for proc in cancels:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.endswith(" cancelled\n"), out
    for job in gates:
        rec = store.load(job)
        assert (rec.state, rec.error) == ("cancelled", "cancelled at the request of alice: not this week")
        assert rec.intent is not None and rec.intent.by == "alice"
    assert not side_log.exists()  # no gate's command ran
    for proc in running:
        proc.stop()
        assert all(event["what"] != "started" for event in events_of(proc)), proc.seen  # none logged as started


def test_a_running_jobs_holder_ends_it_naming_who_asked_and_why(store: FileStore, side_log: Path, workers: Any) -> None:
    job = submit(store, job_argv("sleep", 60), side_log)
    worker = workers(concurrency=1)
    worker.next_event(lambda e: e["what"] == "started" and e["id"] == job)
    asked = store.cancel(job, "alice", reason="the voice is wrong")  # held: the intent, for its holder to honour
    assert asked.want == "cancel"  # (the holder may have ended it already: a notice wakes it at once)
    worker.next_event(lambda e: e["what"] == "cancelled" and e["id"] == job)
    rec = wait_until(lambda: (r := store.load(job)).terminal and r, what="the holder's ending")
    assert (rec.state, rec.error) == ("cancelled", "cancelled at the request of alice: the voice is wrong")
    assert rec.lease.owner.startswith(worker.owner)  # ended by its holder, not by the cancel's own claim


def events_of(proc: Any) -> list[dict[str, Any]]:
    """Every event a stopped worker process wrote: those a test waited for, and the rest of its output."""
    proc._reader.join(10)
    while not proc.events.empty():
        proc.seen.append(proc.events.get_nowait())
    return list(proc.seen)
