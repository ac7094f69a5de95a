"""Processes that fight over one record, driven by tests/integration/test_processes.py.

Run as ``python _actors.py <role> <args...>``. Each role talks to its parent
through stdin/stdout, one line at a time (JSON where there is data), and
flushes after every line so the parent can react. Nothing here asserts: the
actors report what the store answered and the parent judges.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import sys
import time

from jobctl import FileStore, JobError, LeaseExpired, LeaseHeld, StaleEpoch
from jobctl.record import format_time


def say(obj: object) -> None:
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()


class _ContendedFlock:
    """Stands in for ``fcntl`` in ``jobctl.lock``: counts the lock waits a writer met.

    Each ``flock(LOCK_EX)`` is first tried with ``LOCK_NB``; when that is
    refused the record lock was held by another process at that moment (a
    contended lock), and the blocking call follows as before.
    """

    LOCK_EX = fcntl.LOCK_EX
    LOCK_NB = fcntl.LOCK_NB

    def __init__(self) -> None:
        self.contended = 0

    def flock(self, fd: int, op: int) -> None:
        if op == fcntl.LOCK_EX:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                self.contended += 1
        fcntl.flock(fd, op)


def incrementer(root: str, job_id: str, owner: str, count: str, seed: str) -> None:
    """Report ``ready``, wait for ``go``, then make ``count`` increments, each under its own claim.

    Each increment is claim, update, release. The counter is read from the
    record the claim returns and written back blind: only the lease keeps two
    holders from overwriting each other, so a second holder of one epoch shows
    up as a lost increment. The report says how often a claim was refused and
    how often the record lock was found held by another writer.
    """
    import jobctl.lock

    spy = _ContendedFlock()
    jobctl.lock.fcntl = spy  # type: ignore[assignment]  # only this process's lock module
    store = FileStore(root)
    say("ready")
    sys.stdin.readline()
    rng = random.Random(int(seed))
    claims: list[int] = []  # every epoch this process won
    writes: list[list[int]] = []  # [epoch, counter written]
    refused = 0
    lost_leases: list[str] = []
    done = 0
    while done < int(count):
        try:
            rec = store.claim(job_id, owner, 30)
        except LeaseHeld:
            refused += 1
            time.sleep(rng.uniform(0.0002, 0.002))
            continue
        epoch = rec.lease.epoch
        claims.append(epoch)
        value = rec.checkpoint["counter"] + 1

        def bump(r, value=value):
            r.checkpoint = {"counter": value}

        try:
            store.update(job_id, epoch, bump)
        except (StaleEpoch, LeaseExpired) as exc:
            # Somebody claimed (or the lease lapsed) under us: the increment did
            # not land; take a fresh claim and try again.
            lost_leases.append(exc.verdict)
            continue
        writes.append([epoch, value])
        done += 1
        try:
            store.release(job_id, epoch)
        except (StaleEpoch, LeaseExpired) as exc:
            lost_leases.append(exc.verdict)
    say(
        {
            "owner": owner,
            "claims": claims,
            "writes": writes,
            "refused": refused,
            "lost_leases": lost_leases,
            "contended": spy.contended,
        }
    )


def racer(root: str, job_id: str, owner: str, gate: str) -> None:
    """Claim once per round, all racers released at once by the parent's gate.

    Commands on stdin: ``round N`` (report ``ready``, wait at the gate, claim,
    report the outcome), ``release E`` (release epoch E), ``quit``.
    The gate is a file the parent holds ``LOCK_EX`` on; every racer blocks on
    ``LOCK_SH`` and the kernel wakes them together when the parent unlocks.
    """
    store = FileStore(root)
    gate_fd = os.open(gate, os.O_RDWR)
    for line in sys.stdin:
        word, _, arg = line.strip().partition(" ")
        if word == "round":
            say("ready")
            fcntl.flock(gate_fd, fcntl.LOCK_SH)
            fcntl.flock(gate_fd, fcntl.LOCK_UN)
            try:
                rec = store.claim(job_id, owner, 30)
            except JobError as exc:
                say({"round": int(arg), "owner": owner, "won": False, "verdict": exc.verdict})
            else:
                say(
                    {
                        "round": int(arg),
                        "owner": owner,
                        "won": True,
                        "epoch": rec.lease.epoch,
                        "held_by": rec.lease.owner,
                    }
                )
        elif word == "release":
            store.release(job_id, int(arg))
            say("released")
        elif word == "quit":
            break
    os.close(gate_fd)


def writer(root: str, job_id: str, log: str, pad: str) -> None:
    """Update the record's counter in a loop until killed, logging each commit.

    The log gets ``base N`` (the counter as found under the claim's lock) and
    then every value after ``update`` returned. ``O_APPEND`` writes reach the
    page cache before the next update starts, so a SIGKILL loses none of them.
    """
    store = FileStore(root)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    rec = store.claim(job_id, "writer", 300)  # the same owner re-claims its own live lease [JOB-O2]
    epoch = rec.lease.epoch
    counter = rec.checkpoint["counter"]
    os.write(fd, f"base {counter}\n".encode())
    filler = "x" * int(pad)
    say("go")
    while True:
        value = counter + 1

        def bump(r, value=value):
            r.checkpoint = {"counter": value, "pad": filler}

        store.update(job_id, epoch, bump)
        os.write(fd, f"{value}\n".encode())
        counter = value


def holder(root: str, job_id: str, owner: str, ttl: str) -> None:
    """Claim with a short ttl, report the lease, then wait to be killed."""
    store = FileStore(root)
    rec = store.claim(job_id, owner, float(ttl))
    say({"epoch": rec.lease.epoch, "owner": rec.lease.owner, "expires_at": format_time(rec.lease.expires_at)})
    time.sleep(3600)


def claimer(root: str, job_id: str, owner: str) -> None:
    """Report ``ready``; on ``go``, claim until it succeeds, reporting every attempt with store-clock bounds."""
    store = FileStore(root)
    say("ready")
    sys.stdin.readline()
    attempts = []
    while True:
        before = store.now()
        try:
            rec = store.claim(job_id, owner, 30)
        except JobError as exc:
            attempts.append({"verdict": exc.verdict, "before": format_time(before), "after": format_time(store.now())})
            time.sleep(0.05)
            continue
        after = store.now()
        attempts.append({"verdict": "ok", "before": format_time(before), "after": format_time(after)})
        say({"attempts": attempts, "epoch": rec.lease.epoch, "owner": rec.lease.owner})
        return


def stale(root: str, job_id: str, epoch: str) -> None:
    """Present an old epoch to every holder write; report each verdict."""
    store = FileStore(root)
    e = int(epoch)

    def touch(r):
        r.checkpoint = {"from": "the dead holder"}

    calls = {
        "update": lambda: store.update(job_id, e, touch),
        "progress": lambda: store.progress(job_id, e, 99, {"from": "the dead holder"}),
        "finish": lambda: store.finish(job_id, e, "complete"),
        "renew": lambda: store.renew(job_id, e, 30),
        "release": lambda: store.release(job_id, e),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
        except JobError as exc:
            out[name] = exc.verdict
        else:
            out[name] = "ok"
    say(out)


ROLES = {
    "incrementer": incrementer,
    "racer": racer,
    "writer": writer,
    "holder": holder,
    "claimer": claimer,
    "stale": stale,
}

if __name__ == "__main__":
    ROLES[sys.argv[1]](*sys.argv[2:])
