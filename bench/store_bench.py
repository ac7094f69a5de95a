"""What the file store's operations cost next to the raw file-system work they cannot avoid.

Run with ``make bench`` (``.venv/bin/python bench/store_bench.py``). Every
write line is compared with the *floor*: one bare atomic replace of a record
sized file (create temp, write, fsync, rename, fsync the directory), measured
in the same loop, sample for sample, so machine noise lands on both. The scan
lines are compared with a bare read of the same 10,000 files. Medians only.

The numbers are reported and checked against the targets, but the exit code
is 0 either way: timing is not a test. See bench/README.md.
"""

from __future__ import annotations

import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the working tree, even without an editable install

from jobctl import FileStore, Intent, Lease, Record  # noqa: E402 -- after the path fix above
from jobctl.record import encode  # noqa: E402

WRITE_RUNS = 300  # interleaved iterations of the write loop
SCAN_RECORDS = 10_000
SCAN_RUNS = 7  # interleaved iterations of the scan loop
WRITE_TARGET = 1.3  # each write within 1.3x the floor
SCAN_TARGET = 0.5  # list/orphans over 10,000 records, seconds

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def spec() -> dict[str, object]:
    """A plausible job spec; with the envelope the store writes it makes a ~1.2 KB record."""
    return {
        "argv": ["rsync", "-a", "--partial", "--info=progress2", "/srv/data/incoming/", "backup:/vol/archive/"],
        "cwd": "/srv/data",
        "env": {"LANG": "C.UTF-8", "RSYNC_RSH": "ssh -o BatchMode=yes", "TZ": "UTC"},
        "notes": "nightly mirror of the incoming tree; resumable, checkpointed every 64 MiB " * 6,
        "retries": 3,
        "timeout_seconds": 7200,
    }


# -- the floor: what an atomic replace costs with nothing of ours around it ----


def raw_replace(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.urandom(5).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY | _O_CLOEXEC | _O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def bare_read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as fh:
        return fh.read()


def bare_scan(jobs: str) -> int:
    """List the directory and open+read every record: the least any scan must do."""
    names = sorted(e.name for e in os.scandir(jobs) if e.name.endswith(".json") and not e.name.startswith("."))
    total = 0
    for name in names:
        total += len(bare_read(os.path.join(jobs, name)))
    return total


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


# -- writes ----------------------------------------------------------------------


def bench_writes(root: str) -> dict[str, list[float]]:
    store = FileStore(root)
    job_id = store.submit(Record(kind="bench", spec=spec()))
    record_path = store.path(job_id)
    size = len(bare_read(record_path))
    floor_path = os.path.join(store.jobs_dir, ".floor")  # a dot name: never taken for a record
    floor_data = b"x" * (size - 1) + b"\n"
    raw_replace(floor_path, floor_data)

    samples: dict[str, list[float]] = {
        name: []
        for name in ("floor", "create floor", "submit", "claim", "progress", "release", "cycle", "load", "read")
    }

    def floor() -> None:
        samples["floor"].append(timed(lambda: raw_replace(floor_path, floor_data)))

    def raw_create() -> None:
        # What creating a record costs the file system at the least: its lock
        # file (the contract creates it on the first write and never removes
        # it) and the record itself, a new name, by temp + rename.
        path = os.path.join(store.jobs_dir, f".create-{len(samples['create floor'])}.json")

        def create() -> None:
            os.close(os.open(path + ".lock", os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o600))
            raw_replace(path, floor_data)

        samples["create floor"].append(timed(create))

    def submit() -> None:
        record = Record(kind="bench", spec=spec())
        samples["submit"].append(timed(lambda: store.submit(record)))

    def cycle() -> None:
        t0 = time.perf_counter()
        rec = store.claim(job_id, "bench", 60)
        t1 = time.perf_counter()
        store.progress(job_id, rec.lease.epoch, len(samples["cycle"]), {"offset": len(samples["cycle"]) << 20})
        t2 = time.perf_counter()
        store.release(job_id, rec.lease.epoch)
        t3 = time.perf_counter()
        samples["claim"].append(t1 - t0)
        samples["progress"].append(t2 - t1)
        samples["release"].append(t3 - t2)
        samples["cycle"].append(t3 - t0)

    def load() -> None:
        samples["load"].append(timed(lambda: store.load(job_id)))
        samples["read"].append(timed(lambda: bare_read(record_path)))

    rng = random.Random(1)
    steps = [floor, raw_create, submit, floor, cycle, load]
    for _ in range(20):  # warm up: caches, the directory, the interpreter
        for step in steps:
            step()
    for values in samples.values():
        values.clear()
    samples["floor_pair"] = []
    for _ in range(WRITE_RUNS):
        rng.shuffle(steps)  # no operation always runs right after another
        first = len(samples["floor"])
        for step in steps:
            step()
        # This iteration's own floor, for ratios paired within one moment of the disk.
        samples["floor_pair"].append(statistics.fmean(samples["floor"][first:]))
    samples["size"] = [float(size)]
    return samples


# -- scans -------------------------------------------------------------------------


def populate(store: FileStore, count: int) -> None:
    """Write ``count`` encoded records and their lock files directly: no fsync, no lock.

    A mix a real store holds: mostly finished jobs, some pending, some held,
    some running under a lapsed lease, a few paused.
    """
    now = datetime.now(timezone.utc)
    base_ms = int(now.timestamp() * 1000) - count
    template = spec()
    for n in range(count):
        job_id = f"{base_ms + n:013d}-{n:020x}"
        created = now - timedelta(seconds=count - n)
        rec = Record(id=job_id, kind="bench", spec=template, created_at=created, updated_at=created)
        rec.progress.updated_at = created
        kind = n % 10
        if kind < 6:
            rec.state = "complete"
            rec.lease = Lease("", 1, created)
            rec.progress.done = rec.progress.total = 100
        elif kind == 6:
            rec.state = "running"
            rec.lease = Lease(f"worker-{n % 7}", 1, now + timedelta(minutes=5))  # held
        elif kind == 7:
            rec.state = "running"
            rec.lease = Lease(f"worker-{n % 7}", 2, created)  # lapsed: an orphan
            rec.checkpoint = {"verified_prefix": n << 16, "verified": [[0, n << 16]]}
        elif kind == 8:
            rec.intent = Intent("pause", "ops", created)
        path = store.path(job_id)
        with open(path, "wb") as fh:
            fh.write(encode(rec))
        os.close(os.open(path + ".lock", os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o600))


def bench_scans(root: str) -> tuple[dict[str, list[float]], dict[str, int], float]:
    store = FileStore(root)
    start = time.perf_counter()
    populate(store, SCAN_RECORDS)
    setup = time.perf_counter() - start
    listing, orphans = store.list(), store.orphans()  # also warms the page cache
    counts = {"list": len(listing), "orphans": len(orphans), "unreadable": len(listing.unreadable)}
    samples: dict[str, list[float]] = {"list": [], "orphans": [], "read": []}
    for _ in range(SCAN_RUNS):
        samples["read"].append(timed(lambda: bare_scan(store.jobs_dir)))
        samples["list"].append(timed(store.list))
        samples["read"].append(timed(lambda: bare_scan(store.jobs_dir)))
        samples["orphans"].append(timed(store.orphans))
    return samples, counts, setup


# -- report ------------------------------------------------------------------------


def line(name: str, seconds: float, ratio: float, base: str, target: str = "") -> str:
    shown = f"{seconds * 1000:8.3f} ms" if seconds < 0.1 else f"{seconds:8.3f} s "
    return f"{name:<18}{shown} {ratio:6.2f}x {base:<10}{target}"


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> int:
    tmp = tempfile.mkdtemp(prefix=".bench-", dir=REPO)  # same file system as the repo; /tmp may not be
    started = time.perf_counter()
    try:
        writes = bench_writes(os.path.join(tmp, "writes"))
        scans, counts, setup = bench_scans(os.path.join(tmp, "scans"))
    finally:
        shutil.rmtree(tmp)
    med = {name: statistics.median(values) for name, values in writes.items()}
    floor = med["floor"]
    pairs = writes["floor_pair"]
    writes["cycle per write"] = [c / 3 for c in writes["cycle"]]

    def paired(name: str) -> float:
        """The median of per-iteration ratios: each sample over its own iteration's floor."""
        return statistics.median(v / f for v, f in zip(writes[name], pairs, strict=True))

    size = int(writes["size"][0])

    print(f"jobctl store bench: Python {platform.python_version()} on {platform.system()} {platform.machine()}")
    print(f"store on the repo's file system ({REPO}); medians; write ratios are medians of per-iteration ratios")
    print()
    print(f"writes: {WRITE_RUNS} interleaved runs, record of {size} bytes, target each write <= {WRITE_TARGET}x floor")
    print(line("floor", floor, 1.0, "floor", "(temp, write, fsync, rename, directory fsync)"))
    misses = []
    for name in ("submit", "claim", "progress", "release", "cycle per write"):
        ratio = paired(name)
        ok = ratio <= WRITE_TARGET
        if not ok:
            misses.append(name)
        print(line(name, statistics.median(writes[name]), ratio, "floor", verdict(ok)))
    create_ratio = statistics.median(s / c for s, c in zip(writes["submit"], writes["create floor"], strict=True))
    print(line("create floor", med["create floor"], paired("create floor"), "floor", "(a new lock file + a new name)"))
    print(line("submit", med["submit"], create_ratio, "create", "(submit against the create floor)"))
    print(line("cycle", med["cycle"], paired("cycle"), "floor", "(claim + progress + release: 3 writes)"))
    print(line("load", med["load"], med["load"] / med["read"], "bare read", f"(bare read {med['read'] * 1e6:.0f} us)"))
    print()
    scan_med = {name: statistics.median(values) for name, values in scans.items()}
    print(
        f"scans: {SCAN_RECORDS} records ({counts['orphans']} orphans, {counts['unreadable']} unreadable), "
        f"{SCAN_RUNS} interleaved runs, set up in {setup:.1f} s, target <= {SCAN_TARGET} s"
    )
    print(line("bare read", scan_med["read"], 1.0, "bare read", "(list the directory, open+read each record)"))
    for name in ("list", "orphans"):
        value = scan_med[name]
        ok = value <= SCAN_TARGET
        if not ok:
            misses.append(name)
        print(line(name, value, value / scan_med["read"], "bare read", verdict(ok)))
    print()
    if misses:
        print(f"targets missed: {', '.join(misses)}")
    else:
        print("all targets met")
    print(f"bench took {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
