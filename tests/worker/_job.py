"""A job command for tests/worker: logs what it does, checkpoints through the store, resumes.

``python _job.py MODE ARGS...``, run by a worker with the ``JOB_*``
environment. Every line it logs goes to ``$SIDE_LOG`` (O_APPEND, one JSON
object a line): job id, epoch, attempt, pid, event, and ``time.time_ns()``.

Modes:

``steps N DELAY [--escape MARKER OUT] [--hold FILE]``
    Resume after the checkpoint ``{"i": k}`` (0 when none); for i = k+1..N:
    sleep DELAY, write the checkpoint ``{"i": i}`` with the job's own epoch,
    log ``step``. ``--escape`` (first run only) starts a grandchild in a new session (so
    neither the process-group kill nor a parent-death signal reaches it) that
    waits for MARKER, then tries a write with this run's epoch and records
    the verdict in OUT. ``--hold FILE``: on a resumed run, wait for FILE
    before the first step.
``late ROOT ID EPOCH MARKER OUT``
    The escaped grandchild.
``flaky PASS_AT``
    Exit 1 unless ``$JOB_ATTEMPT`` >= PASS_AT.
``exit CODE``
    Exit with CODE.
``sleep SECONDS [--ignore-term]``
    Sleep, checkpointing ``{"slept": n}`` every 0.1 s; with ``--ignore-term``
    SIGTERM is ignored (the runner must SIGKILL after its grace).
``barrier MINE OTHER``
    Touch MINE, then wait (at most 20 s) until OTHER exists: two such jobs
    can only both finish if they run at the same time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from jobctl import FileStore, JobError, open_store


def log(event: str, **extra: object) -> None:
    path = os.environ.get("SIDE_LOG")
    if not path:
        return
    line = {
        "id": os.environ.get("JOB_ID", ""),
        "epoch": int(os.environ.get("JOB_EPOCH", "0")),
        "attempt": int(os.environ.get("JOB_ATTEMPT", "0")),
        "pid": os.getpid(),
        "event": event,
        "t": time.time_ns(),
        **extra,
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def wait_for(path: str, limit: float = 20.0) -> bool:
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def store() -> FileStore:
    return open_store(os.environ["JOB_STORE"])  # type: ignore[return-value]  # a directory or a database: the same protocol


def steps(args: list[str]) -> int:
    total, delay = int(args[0]), float(args[1])
    rest = args[2:]
    checkpoint = json.loads(os.environ.get("JOB_CHECKPOINT", "null") or "null")
    start = checkpoint["i"] if isinstance(checkpoint, dict) else 0
    log("start", resumed_from=start, checkpoint_env=os.environ.get("JOB_CHECKPOINT"))
    if "--escape" in rest and start == 0:
        at = rest.index("--escape")
        marker, out = rest[at + 1], rest[at + 2]
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "late",
                os.environ["JOB_STORE"],
                os.environ["JOB_ID"],
                os.environ["JOB_EPOCH"],
                marker,
                out,
            ],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    if "--hold" in rest and start > 0:
        wait_for(rest[rest.index("--hold") + 1])
    s = store()
    job_id, epoch = os.environ["JOB_ID"], int(os.environ["JOB_EPOCH"])
    for i in range(start + 1, total + 1):
        time.sleep(delay)
        s.progress(job_id, epoch, i, checkpoint={"i": i})
        log("step", i=i)
    log("end")
    return 0


def late(args: list[str]) -> int:
    root, job_id, epoch, marker, out = args
    if not wait_for(marker, 30.0):
        verdict = "no marker"
    else:
        try:
            open_store(root).progress(job_id, int(epoch), 999, checkpoint={"i": 999})
            verdict = "ok"
        except JobError as exc:
            verdict = exc.verdict
    with open(out, "w") as fh:
        json.dump({"verdict": verdict, "epoch": int(epoch)}, fh)
    return 0


def flaky(args: list[str]) -> int:
    log("start")
    ok = int(os.environ["JOB_ATTEMPT"]) >= int(args[0])
    log("end", ok=ok)
    return 0 if ok else 1


def sleeper(args: list[str]) -> int:
    if "--ignore-term" in args:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log("start", checkpoint_env=os.environ.get("JOB_CHECKPOINT"))
    s = store()
    job_id, epoch = os.environ["JOB_ID"], int(os.environ["JOB_EPOCH"])
    deadline = time.monotonic() + float(args[0])
    n = 0
    while time.monotonic() < deadline:
        time.sleep(0.1)
        n += 1
        try:
            s.progress(job_id, epoch, n, checkpoint={"slept": n})
        except JobError as exc:
            log("refused", verdict=exc.verdict)
    log("end")
    return 0


def barrier(args: list[str]) -> int:
    log("start")
    with open(args[0], "w"):
        pass
    met = wait_for(args[1])
    log("end", met=met)
    return 0 if met else 1


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "steps":
        return steps(args)
    if mode == "late":
        return late(args)
    if mode == "flaky":
        return flaky(args)
    if mode == "exit":
        log("start")
        log("end")
        return int(args[0])
    if mode == "sleep":
        return sleeper(args)
    if mode == "barrier":
        return barrier(args)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
