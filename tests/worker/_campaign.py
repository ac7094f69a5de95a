"""Kill campaigns against real workers, for test_double_run.py: ``python _campaign.py MODE STORE ROUNDS TTL DIR``.

STORE is a directory or a database URL; DIR is where the jobs' lock files and
runs file go (a directory of this machine either way).

MODE ``stop``: a pool of workers runs long jobs; each round SIGSTOPs some of
them, holds each stop until it has outlasted the TTL and another worker has
adopted one of the stopped worker's jobs, checks that none of the stopped
worker's children is still alive, and SIGCONTs it.

MODE ``kill``: each round starts fresh workers at ``--concurrency 8`` on a
store full of short jobs and SIGKILLs each during its first burst of starts
(after its first ``started`` event, while the other slots are claiming and
starting, once its guardian has spawned the first); then checks that every
child the guardian had started at the kill is gone once the guardian has
acted. It goes on past ROUNDS kills (up to four times as many)
until some kill has caught a child starting: spawned by the guardian, its
shell not yet at the job's first line (what a start in flight at the kill
leaves).

Every job is a shell command that takes an exclusive non-blocking ``flock``
on a per-job file and appends ``DOUBLE`` to the runs file when it finds the
lock taken: two runs of one job at the same time cannot both miss it. This
process is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so what a killed
worker's guardian leaves behind (it kills what runs and exits without reaping
it) becomes its child: its exit status tells a child the guardian killed
(SIGKILL) from one that ran on to its end after its worker died (``ran_on``:
what a guardian that did not kill would leave), and one still alive after the
guardian exited is a survivor. Prints one JSON object of figures.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from jobctl import FileStore, Record, open_store

HERE = Path(__file__).resolve().parent
DRIVER = str(HERE / "_driver.py")
#: The names (``comm``) of a job's leader, the guardian's child: its shell, then the sleep it becomes. (Not its
#: flock: one that ended before its shell was killed is left a zombie, handed on here, and ran on to nothing.)
JOB_LEADERS = ("sh", "sleep")

JOB = r"""
exec 9>>"$LOCKS/$JOB_ID"
if flock -n 9; then
  echo "start $JOB_ID $JOB_EPOCH $$ $PPID" >> "$RUNS"
  exec sleep "$HOLD"
fi
echo "DOUBLE $JOB_ID $JOB_EPOCH $$ $PPID" >> "$RUNS"
"""


class Reaper:
    """Reaps every child of this process (its workers, and the orphans reparented to it), with each one's name."""

    def __init__(self) -> None:
        self.status: dict[int, int] = {}
        self.comm: dict[int, str] = {}  # what it ran last (a zombie keeps its name, not its command line)
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                time.sleep(0.005)
                continue
            assert info is not None
            name = comm(info.si_pid)
            pid, status = os.waitpid(info.si_pid, 0)
            with self.lock:
                self.status[pid] = status
                self.comm[pid] = name

    def exited(self, pid: int) -> bool:
        with self.lock:
            return pid in self.status


def children(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.update(int(p) for p in fh.read().split())
        except (FileNotFoundError, ProcessLookupError):  # the task ended meanwhile
            pass
    return out


def alive(pid: int) -> bool:
    """Not exited (a zombie has exited: only its reaper is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between it and the read
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return ""
    return stat[stat.index("(") + 1 : stat.rindex(")")]


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between it and the read (ESRCH)
        return b""


class Worker:
    """A worker process (``_driver.py``); with ``kill_in_burst`` it is SIGKILLed just after its first start."""

    def __init__(self, root: str, reaper: Reaper, kill_in_burst: bool = False, **options: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, DRIVER, str(root), "loop", json.dumps(options)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.pid = self.proc.pid
        self.reaper = reaper
        self.kill_in_burst = kill_in_burst
        self.started = 0
        self.started_at_kill = -1
        self.guardian_pid: int | None = None
        #: The guardian's children when the kill was sent: the starts in flight, and the jobs running.
        self.in_flight: set[int] = set()
        self.ready = threading.Event()
        self.killed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if event["what"] == "ready":
                self.ready.set()
            elif event["what"] == "started":
                self.started += 1
                if self.kill_in_burst and not self.killed.is_set():
                    # A moment into the burst: the first start is out (its guardian is up: it starts with the
                    # first child), the other slots are claiming and starting.
                    # (The worker says "started" as it sends the start: wait until the guardian has spawned it.)
                    wait(lambda: bool((g := self.guardian()) is not None and children(g)), 5.0)
                    time.sleep(random.uniform(0.0, 0.01))
                    self.guardian_pid = self.guardian()
                    self.started_at_kill = self.started
                    if self.guardian_pid is not None:
                        self.in_flight = children(self.guardian_pid)
                    send(self.pid, signal.SIGKILL)
                    self.killed.set()

    def guardian(self) -> int | None:
        for pid in children(self.pid):
            if b"\0-I\0-S\0-c\0" in cmdline(pid):
                return pid
        return None

    def end(self) -> None:
        send(self.pid, signal.SIGKILL)
        wait(lambda: self.reaper.exited(self.pid), 10)
        self.proc.returncode = -9  # reaped by the Reaper, not by Popen


def send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def read_runs(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def wait(check: Any, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def submit(store: FileStore, n: int, locks: Path, runs: Path, hold: float) -> list[str]:
    env = {"LOCKS": str(locks), "RUNS": str(runs), "HOLD": str(hold)}
    return [store.submit(Record(kind="shell", spec={"argv": ["sh", "-c", JOB], "env": env})) for _ in range(n)]


def stop_campaign(root: str, place: Path, rounds: int, ttl: float, at_once: int = 2) -> dict[str, Any]:
    """SIGSTOP workers running jobs until another adopts one of theirs; their children must be dead by then."""
    store: FileStore = open_store(root)  # type: ignore[assignment]  # a directory or a database: the same protocol
    locks, runs = place / "locks", place / "runs"
    locks.mkdir()
    hold = 3 * ttl + 1.0  # a child left running would still run when its job is adopted
    jobs = submit(store, 10, locks, runs, hold)
    reaper = Reaper()
    pool = [Worker(root, reaper, concurrency=4, ttl=ttl, grace=0.2, poll_interval=0.05) for _ in range(2 * at_once)]
    for w in pool:
        w.ready.wait(60)
    figures: dict[str, Any] = {"kills": 0, "adopted": 0, "survivors": 0, "shortest_stop_s": 1e9}
    # A stop counts toward ``rounds`` once another worker adopted one of the stopped worker's jobs.
    while figures["adopted"] < rounds:
        jobs += submit(store, 2 * at_once, locks, runs, hold)  # a steady supply, leaving free slots for adopters
        lines = read_runs(runs)
        victims: dict[Worker, dict[str, int]] = {}
        for victim in random.sample(pool, len(pool)):
            parent = victim.guardian()  # a job's child is its worker's guardian's
            held = {j: int(e) for kind, j, e, pid, ppid in lines if kind == "start" and int(ppid) == parent}
            held = {j: e for j, e in held.items() if store.load(j).lease.epoch == e and not store.load(j).terminal}
            if held and len(victims) < at_once:
                victims[victim] = held
        if not victims:
            time.sleep(0.05)
            continue
        guardians = {v: v.guardian() for v in victims}
        for victim in victims:
            send(victim.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        figures["kills"] += len(victims)

        def adopted(held: dict[str, int]) -> bool:
            return any(store.load(j).lease.epoch > e for j, e in held.items())

        for held in victims.values():
            figures["adopted"] += wait(lambda held=held: adopted(held), 15.0)
        wait(lambda at=stopped_at: time.monotonic() - at > ttl, ttl + 1)  # the stop outlasts the lease, whatever else
        figures["shortest_stop_s"] = min(figures["shortest_stop_s"], time.monotonic() - stopped_at)
        for victim in victims:
            # The job's children are its guardian's (and none is the stopped worker's own).
            started = set(children(victim.pid)) - {guardians[victim]}
            started |= set(children(guardians[victim] or 0))
            figures["survivors"] += sum(1 for pid in started if alive(pid))
        for victim in victims:
            send(victim.pid, signal.SIGCONT)
    guardians = [g for g in (w.guardian() for w in pool) if g is not None]
    for w in pool:
        w.end()
    # The workers' children are killed by their guardians once the workers are gone: wait for those to act.
    for g in guardians:
        wait(lambda g=g: reaper.exited(g), 10)
    return finish(figures, jobs, locks, runs)


def kill_campaign(root: str, place: Path, rounds: int, ttl: float, at_once: int = 4) -> dict[str, Any]:
    """SIGKILL workers at --concurrency 8 in their first burst of starts; nothing they started may live on."""
    store: FileStore = open_store(root)  # type: ignore[assignment]  # a directory or a database: the same protocol
    locks, runs = place / "locks", place / "runs"
    locks.mkdir()
    jobs = submit(store, 40 + 8 * rounds, locks, runs, hold=0.3)
    reaper = Reaper()
    figures: dict[str, Any] = {"kills": 0, "survivors": 0, "in_burst": 0}
    workers: set[int] = set()
    guardians: set[int] = set()
    in_flight: set[int] = set()  # what each killed worker's guardian had started, at the kill
    stopped: set[int] = set()  # of those, the ones gone once their guardian had acted

    def left_behind() -> dict[str, int]:
        """The job processes left behind so far (reaped here, not by a guardian), by how they ended."""
        with reaper.lock:
            ended = [(pid, status) for pid, status in reaper.status.items() if reaper.comm[pid] in JOB_LEADERS]
            shells = {pid for pid, _ in ended if reaper.comm[pid] == "sh"}
        lined = {int(line[3]) for line in read_runs(runs)}
        killed = [pid for pid, status in ended if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL]
        return {
            "killed": len(killed),
            "ran_on": len(ended) - len(killed),
            # A shell killed before the job's first line: the kill caught it starting. Seen here when the
            # guardian left it to this subreaper, or, when the guardian reaped it itself, as one of its
            # children at the kill that never wrote its first line.
            "caught_starting": len({pid for pid in killed if pid in shells and pid not in lined} | (in_flight - lined)),
            "in_flight": len(in_flight),
            "stopped": len(stopped),
        }

    # A kill proves the race only when it lands while some child is starting. Where it lands is chance
    # (claims are slower on PostgreSQL): the campaign goes on past ROUNDS kills, up to four times as many,
    # until that has happened at least once.
    while figures["kills"] < rounds or (left_behind()["caught_starting"] == 0 and figures["kills"] < 4 * rounds):
        batch = [
            Worker(root, reaper, kill_in_burst=True, concurrency=8, ttl=ttl, grace=0.2, poll_interval=0.05)
            for _ in range(max(1, min(at_once, rounds - figures["kills"])))
        ]
        for w in batch:
            workers.add(w.pid)
            if not w.killed.wait(60):
                raise SystemExit(f"worker {w.pid} started nothing")
            wait(lambda w=w: reaper.exited(w.pid), 10)
            w.proc.returncode = -9  # reaped by the Reaper, not by Popen
            figures["kills"] += 1
            figures["in_burst"] += w.started_at_kill < 8
            if w.guardian_pid is not None:
                guardians.add(w.guardian_pid)
        # Their children are this process's now. Once every guardian has acted, none may be left.
        for g in guardians:
            wait(lambda g=g: reaper.exited(g), 10)
        for w in batch:
            in_flight.update(w.in_flight)
            stopped.update(pid for pid in w.in_flight if not alive(pid))
        wait(lambda: not any(alive(p) for p in children(os.getpid())), 1.0)
        left = [p for p in children(os.getpid()) if alive(p)]
        figures["survivors"] += len(left)
        for pid in left:
            send(pid, signal.SIGKILL)
    figures.update(left_behind())
    return finish(figures, jobs, locks, runs)


def finish(figures: dict[str, Any], jobs: list[str], locks: Path, runs: Path) -> dict[str, Any]:
    lines = read_runs(runs)
    figures["jobs"] = len(jobs)
    figures["runs"] = sum(1 for line in lines if line[0] == "start")
    figures["doubles"] = [" ".join(line) for line in lines if line[0] == "DOUBLE"]
    # Every worker is gone: a lock still held is a process of some run still alive.
    held = 0
    for name in os.listdir(locks):
        fd = os.open(locks / name, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held += 1
        finally:
            os.close(fd)
    figures["locks_held_at_end"] = held
    return figures


def main() -> None:
    mode, root, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ttl, place = float(sys.argv[4]), Path(sys.argv[5])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise SystemExit("cannot become a child subreaper")
    run = stop_campaign if mode == "stop" else kill_campaign
    figures = run(root, place, rounds, ttl)
    sys.stdout.write(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
