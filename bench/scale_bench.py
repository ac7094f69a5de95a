"""What the commands that look at a whole store cost at 1,000 / 10,000 / 100,000 records.

Run with ``make bench`` (``.venv/bin/python bench/scale_bench.py``). For each
size a store is built with 99% of its records ``complete`` and 1% ``pending``
(written directly from two encoded templates, each with its ``.lock`` beside
it, as a store that grew by submits has), in a temporary directory inside the
repository. Then, interleaved, each of these is timed as a whole process
(``python -m jobctl ...``, interpreter start-up included) or in process:

* ``floor``: a bare ``os.scandir`` + ``stat`` of every record file of the store
  in this process -- the least any answer that looks at every file costs;
* ``list``, ``orphans``, ``claim --next`` (the claim released again, in
  process, so each sample sees the same store), ``worker --once`` (with
  ``--kind none`` and a handler for it: it scans and picks, and finds nothing of that kind to run);
* ``pick``: the board's start-up scan plus one pick, in process;

each with the summary cache absent (``cold``: removed before every sample) and
present (``warm``: the store has not changed since the cache was written),
plus ``claim --next`` ``changing``: one pending record is replaced before each
sample, so the directory fast path cannot apply and every file is statted.
Each figure is the median of a few samples; ratios are to the floor measured
in the same run. ``start-up`` is ``python -m jobctl --version``.

Then the growth from 10,000 to 100,000 records, each command timed on the
two stores in turn, sample by sample, so that a slow moment of the machine
slows both: the median of the pairs' ratios, cold and warm. The growth
target is judged on these.

Last, the watch notice latency: a ``jobctl watch --json`` subprocess on a store
of 100 and of 1,000 records, and the time from a submit's return to its
notice's line (a notice includes reading the watched records again).

Timing is reported, never asserted; the exit code is 0. Several minutes
on 2 CPUs (the 100,000-record store dominates).

``--list [--samples N]`` times only a piped ``list`` on the 100,000-record
store (a minute or so): cold (the cache removed before each sample) and warm,
taking turns, each sample's first line, total and the ``list`` process's
peak memory; its output is checked to be the same in every sample. Then the
time to read every record's bytes in this process (:func:`read_floor`): the
least a cold listing's first line can wait, the order being the records'.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the working tree, even without an editable install

from jobctl import FileStore, Record, summary  # noqa: E402 -- after the path fix above
from jobctl.board import Board  # noqa: E402
from jobctl.errors import LeaseExpired  # noqa: E402
from jobctl.record import encode  # noqa: E402

SIZES = (1_000, 10_000, 100_000)
SAMPLES = {1_000: 3, 10_000: 3, 100_000: 2}
#: Samples of each way of the cache-absent path at 100,000 (now, one process, before): taking turns.
PAIRED_SAMPLES = 3
#: Samples of the warm pick (in process, milliseconds).
PICK_SAMPLES = 15
#: The two sizes whose costs the growth target compares, and the pairs of samples (one at each, in turn).
GROWTH_SIZES = (10_000, 100_000)
GROWTH_SAMPLES = 3
#: Pairs of samples of the floor's own growth (a floor takes a second at most).
FLOOR_PAIRS = 15
LATENCY_SAMPLES = 15
LATENCY_SIZES = (100, 1_000)  # a notice costs a read of the watched store: shown at two sizes
TARGET_UNCHANGED = 0.15  # claim --next / orphans at 100,000 when nothing changed, seconds
TARGET_RATIO = 1.5  # ... when records keep changing: floor x 1.5 + start-up
TARGET_LIST = 1.0  # list at 100,000, warm cache, seconds
TARGET_FIRST_LINE = 0.2
TARGET_GROWTH = 10.0  # cost from 10,000 to 100,000 records
TARGET_LATENCY = 0.05
#: The issue's figures at 100,000 records before the cache (seconds, whole process; worker --once
#: was 3.3-3.6 s, the lower taken): with the cache absent, each is to take at most half of these.
BEFORE_COLD = {"list": 3.9, "orphans": 3.8, "claim --next": 3.4, "worker --once": 3.3}
#: The floor on the machine the issue's targets were set on (os.scandir + stat of 100,000 record
#: files, seconds): its absolute targets are judged here as multiples of it, scaled by this run's floor.
ISSUE_FLOOR = 0.37
#: The code the cache-absent path is compared with in the same run: the commit before the cache.
BEFORE_COMMIT = "76afad7"


def make_id(n: int, base_ms: int) -> str:
    return f"{base_ms + n // 1000:013d}-{n:020x}"


def build(root: str, n: int) -> list[str]:
    """A store of ``n`` records, 1% pending, from two encoded templates; returns the pending ids."""
    store = FileStore(root, summaries=False)
    created = datetime(2026, 1, 1, tzinfo=timezone.utc)
    template = Record(kind="backup", spec={"argv": ["rsync", "-a", "/srv/data/", "backup:/vol/"]})
    template.id = "0000000000000-" + "0" * 20
    template.created_at = template.updated_at = created
    template.progress.updated_at = created
    pending = encode(template)
    template.state = "complete"
    template.lease.owner = "host-1:4242"
    template.lease.epoch = 1
    template.lease.expires_at = created + timedelta(seconds=60)
    template.progress.done = 1
    complete = encode(template)
    placeholder = template.id.encode()
    base_ms = int(created.timestamp() * 1000) - n
    open_ids = []
    jobs = store.jobs_dir
    for k in range(n):
        job_id = make_id(k, base_ms)
        is_open = k % 100 == 99
        data = (pending if is_open else complete).replace(placeholder, job_id.encode())
        path = os.path.join(jobs, job_id + ".json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, data)
        os.close(fd)
        os.close(os.open(path + ".lock", os.O_WRONLY | os.O_CREAT, 0o600))
        if is_open:
            open_ids.append(job_id)
    return open_ids


CLAIM = ["claim", "--next", "--owner", "bench", "--ttl", "60"]
WORKER = ["worker", "--once", "--kind", "none", "--handler", "none=true", "--name", "bench", "-q"]
COMMANDS = {"list": ["list"], "orphans": ["orphans"], "claim --next": CLAIM, "worker --once": WORKER}


def release(store: FileStore) -> None:
    """Give back every lease the bench's claims took (so each claim sample sees the same store)."""
    for rec in store.list_open():
        if rec.lease.owner == "bench":
            try:
                store.release(rec.id, rec.lease.epoch)
            except LeaseExpired:
                pass  # a claim of a while ago, lapsed since: nobody holds it


def warm_up(envs: list[dict[str, str]]) -> None:
    """Let each store's cache be written by the commands that write it, once its last change has aged.

    The racy-timestamp guard trusts a directory only once it is 2 s old: wait
    that out, then ``orphans`` writes the cache and ``list`` its own part.
    """
    time.sleep(summary.RACY_NS / 1e9 + 0.1)
    for env in envs:
        run(["orphans"], env)
        run(["list"], env)
        writers_done()


def become_subreaper() -> bool:
    """Adopt the orphans of the commands run here (Linux ``PR_SET_CHILD_SUBREAPER``): see :func:`writers_done`."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def writers_done() -> None:
    """Wait for what the commands run here left working: a listing of thousands leaves its listing part
    to a child it does not wait for, which this process adopts (:func:`become_subreaper`). Otherwise a
    warm sample would race it and, not finding the part, stat every record file."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def floor(jobs: str) -> float:
    t = time.perf_counter()
    with os.scandir(jobs) as entries:
        for entry in entries:
            if entry.name.endswith(".json"):
                entry.stat(follow_symlinks=False)
    return time.perf_counter() - t


def read_floor(jobs: str) -> float:
    """Seconds to read every record file's bytes in this process (no decoding): what an ordered answer waits for.

    A listing is ordered by creation time, which only a record's bytes
    hold (an id's leading milliseconds are a writer's clock when it minted
    the id, not the record's ``created_at``), so with no cache its first
    line cannot come before every record has been read.
    """
    t = time.perf_counter()
    flags = os.O_RDONLY | os.O_NOFOLLOW
    top = os.open(jobs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with os.scandir(top) as entries:
            for entry in entries:
                if entry.name.endswith(".json"):
                    fd = os.open(entry.name, flags, dir_fd=top)
                    os.read(fd, 1 << 16)
                    os.close(fd)
    finally:
        os.close(top)
    return time.perf_counter() - t


def before_tree(work: str) -> str | None:
    """The jobctl package of :data:`BEFORE_COMMIT`, unpacked under ``work`` (its parent directory), or None."""
    out = os.path.join(work, "before")
    os.makedirs(out)
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", BEFORE_COMMIT, "jobctl"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", out], input=archive, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    compiled(os.path.join(out, "jobctl"))
    return out


def compiled(package: str) -> None:
    """Byte-compile ``package``, as an installed one is.

    With PYTHONDONTWRITEBYTECODE set (as here), a tree without current
    ``__pycache__`` files compiles every module it imports on every start: a
    cost no installed jobctl pays, and one the freshly unpacked tree would
    pay and a checkout not, or the other way round after an edit.
    """
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True)


def run(args: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "jobctl", *args], env=env, capture_output=True)
    elapsed = time.perf_counter() - t
    if proc.returncode not in ok:
        raise SystemExit(f"{args}: exit {proc.returncode}: {proc.stderr.decode()[:300]}")
    return elapsed


def first_line(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds to the first line of stdout, seconds to the end)."""
    first, total, _, _, _ = first_line_memory(args, env)
    return first, total


def first_line_memory(args: list[str], env: dict[str, str]) -> tuple[float, float, float, float, bytes]:
    """(seconds to the first line of stdout, to the end, the process's peak memory in MB, its CPU seconds, its stdout).

    The CPU seconds (user and system, its reaped children's included) say what the machine's other
    work cannot: the shared 2 CPUs make the wall clock move run to run.
    """
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "jobctl", *args], env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    head = proc.stdout.readline()
    first = time.perf_counter() - t
    out = head + proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)  # the process's own peak, not its children's
    proc.returncode = os.waitstatus_to_exitcode(status)
    total = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{args}: exit {proc.returncode}")
    return first, total, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, out


def median(f: Callable[[], float], samples: int, before: Callable[[], None] | None = None) -> float:
    out = []
    for _ in range(samples):
        if before is not None:
            before()
        out.append(f())
    return statistics.median(out)


def turns(runs: dict[str, Callable[[], float]], samples: int, before: Callable[[], None]) -> dict[str, list[float]]:
    """Every sample of each of ``runs``, taking turns sample by sample (a slow moment slows them all)."""
    got: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(samples):
        for name, f in runs.items():
            before()
            got[name].append(f())
    return got


def paired(runs: dict[str, Callable[[], float]], samples: int, before: Callable[[], None]) -> dict[str, float]:
    """The median of each of ``runs``, taking :func:`turns`."""
    return {name: statistics.median(times) for name, times in turns(runs, samples, before).items()}


def ratios(got: dict[str, list[float]], over: str, under: str) -> list[float]:
    """Each sample of ``over`` over the one of ``under`` taken beside it (:func:`turns`), sorted."""
    return sorted(a / b for a, b in zip(got[over], got[under], strict=True))


def measure(n: int, work: str, old: str | None) -> dict[str, float]:
    root = os.path.join(work, f"store-{n}")
    cache = os.path.join(work, "cache")
    t = time.perf_counter()
    open_ids = build(root, n)
    built = time.perf_counter() - t
    env = dict(os.environ, XDG_CACHE_HOME=cache, JOB_STORE=root, PYTHONPATH=str(REPO))
    quiet = FileStore(root, summaries=False)  # the bench's own housekeeping never touches the cache
    cached = FileStore(root, summaries=os.path.join(cache, "jobctl", "summaries"))
    jobs = quiet.jobs_dir
    samples = SAMPLES[n]

    def cold() -> None:
        shutil.rmtree(cache, ignore_errors=True)

    def warm() -> None:
        warm_up([env])

    def replace_one() -> None:
        release(quiet)
        path = os.path.join(jobs, open_ids[0] + ".json")
        data = Path(path).read_bytes()
        Path(path + ".bench.tmp").write_bytes(data)
        os.replace(path + ".bench.tmp", path)

    out: dict[str, float] = {"build": built}
    out["floor"] = median(lambda: floor(jobs), samples)
    if n == max(SIZES):
        # The cache absent, three ways taking turns: as jobctl runs, with its reads in one process
        # (JOBCTL_SCAN_PROCESSES=1), and the code before the cache (when git can unpack it).
        one = dict(env, JOBCTL_SCAN_PROCESSES="1")
        then = None if old is None else dict(env, PYTHONPATH=old)
        for name, args in COMMANDS.items():
            ways = {"": lambda a=args: run(a, env), " one process": lambda a=args: run(a, one)}
            if then is not None:
                ways[" before"] = lambda a=args, e=then: run(a, e)
            reset = (lambda: (release(quiet), cold())) if name == "claim --next" else cold
            for way, t in paired(ways, PAIRED_SAMPLES, reset).items():
                out[f"{name} cold{way}"] = t
    for mode, before in (("cold", cold), ("warm", None)):
        if mode == "warm":
            warm()
        elif n != max(SIZES):
            out["list cold"] = median(lambda: run(["list"], env), samples, before)
            out["orphans cold"] = median(lambda: run(["orphans"], env), samples, before)
            out["worker --once cold"] = median(lambda: run(WORKER, env), samples, before)
            out["claim --next cold"] = median(lambda: run(CLAIM, env), samples, lambda: (release(quiet), cold()))
        if mode == "warm":
            out["list warm"] = median(lambda: run(["list"], env), samples, before)
            out["orphans warm"] = median(lambda: run(["orphans"], env), samples, before)
            out["worker --once warm"] = median(lambda: run(WORKER, env), samples, before)
        # Milliseconds in process, warm: enough samples that one slow moment of the machine is not the median.
        out[f"pick {mode}"] = median(lambda: pick(cached), samples if mode == "cold" else PICK_SAMPLES, before)
    out["claim --next warm"] = median(lambda: run(CLAIM, env), samples, lambda: (release(quiet), warm()))
    out["claim --next changing"] = median(lambda: run(CLAIM, env), samples, replace_one)
    release(quiet)
    warm()
    out["list first line"], out["list total"] = min(first_line(["list"], env) for _ in range(samples))
    if n not in GROWTH_SIZES:
        shutil.rmtree(root)  # the growth sizes' stores are kept for growth()
    cold()
    return out


def growth(work: str) -> dict[str, float]:
    """Each command's cost at the larger of :data:`GROWTH_SIZES` over the smaller, the two taking turns.

    Both stores (kept by :func:`measure`) are timed one after the other in
    each pair of samples, so a slow moment of the machine slows both; the
    figure is the median of :data:`GROWTH_SAMPLES` pairs' ratios, cold (cache
    removed before each sample) and warm (unchanged since it was written).
    """
    cache = os.path.join(work, "cache")
    roots = [os.path.join(work, f"store-{n}") for n in GROWTH_SIZES]
    envs = [dict(os.environ, XDG_CACHE_HOME=cache, JOB_STORE=root, PYTHONPATH=str(REPO)) for root in roots]
    quiet = [FileStore(root, summaries=False) for root in roots]
    cached = [FileStore(root, summaries=os.path.join(cache, "jobctl", "summaries")) for root in roots]
    small, large = (str(n) for n in GROWTH_SIZES)
    out: dict[str, float] = {}
    # The floor's own growth: what "linear in stat" allows, measured the same way.
    floors = {size: lambda s=store: floor(s.jobs_dir) for size, store in zip((small, large), quiet, strict=True)}
    spread = ratios(turns(floors, FLOOR_PAIRS, lambda: None), large, small)
    out["floor"], out["floor least"], out["floor most"] = statistics.median(spread), spread[0], spread[-1]

    def way(name: str, mode: str, k: int) -> Callable[[], float]:
        """One sample of ``name`` on store ``k``, its store made ready first (run and pick time themselves)."""

        def sample() -> float:
            if name == "claim --next":
                release(quiet[k])
                if mode == "warm":
                    warm_up([envs[k]])  # the claim and the release changed its directory
            if mode == "cold":
                shutil.rmtree(cache, ignore_errors=True)
            return pick(cached[k]) if name == "pick" else run(COMMANDS[name], envs[k])

        return sample

    for mode in ("cold", "warm"):
        shutil.rmtree(cache, ignore_errors=True)
        if mode == "warm":
            warm_up(envs)
        for name in [*COMMANDS, "pick"]:
            ways = {size: way(name, mode, k) for k, size in enumerate((small, large))}
            out[f"{name} {mode}"] = statistics.median(ratios(turns(ways, GROWTH_SAMPLES, lambda: None), large, small))
    for store in quiet:
        release(store)
    for root in roots:
        shutil.rmtree(root)
    shutil.rmtree(cache, ignore_errors=True)
    return out


def pick(store: FileStore) -> float:
    t = time.perf_counter()
    board = Board(store, notices=False)
    board.pick(store.now())
    board.close()
    return time.perf_counter() - t


def startup(env: dict[str, str]) -> float:
    return median(lambda: run(["--version"], env), 5)


def latency(work: str, n: int) -> list[float]:
    """Seconds from a submit's return to the matching line of a running ``watch --json`` on ``n`` records."""
    root = os.path.join(work, f"store-watch-{n}")
    build(root, n)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"), JOB_STORE=root, PYTHONPATH=str(REPO))
    store = FileStore(root, summaries=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "watch", "--json", "--kind", "probe"], env=env, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    out = []
    try:
        fd = proc.stdout.fileno()
        time.sleep(1.0)  # the present-first notice (empty for kind probe) and the watch settled
        for _ in range(LATENCY_SAMPLES):
            job_id = store.submit(Record(kind="probe", spec={}))
            t = time.perf_counter()
            line = b""
            while job_id.encode() not in line:
                ready, _, _ = select.select([fd], [], [], 5.0)
                if not ready:
                    raise SystemExit("watch gave no notice within 5 s")
                line = proc.stdout.readline()
            out.append(time.perf_counter() - t)
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait()
    return out


def list_only(samples: int) -> None:
    """``--list``: a piped ``list`` on 100,000 records, cold and warm taking turns, ``samples`` of each."""
    work = tempfile.mkdtemp(prefix="scale-bench-", dir=REPO)
    os.chdir(work)  # as in main(): never the checkout's own directory first on sys.path
    try:
        compiled(str(REPO / "jobctl"))
        n = max(SIZES)
        root, cache = os.path.join(work, f"store-{n}"), os.path.join(work, "cache")
        build(root, n)
        env = dict(os.environ, XDG_CACHE_HOME=cache, JOB_STORE=root, PYTHONPATH=str(REPO))
        jobs = os.path.join(root, "jobs")
        print(
            f"scale bench, list only: python {platform.python_version()}, {os.cpu_count()} cpus,"
            f" load average {os.getloadavg()[0]:.1f}; {n:,} records (1% open), floor {floor(jobs):.3f} s"
        )
        got: dict[str, list[tuple[float, float, float, float]]] = {"cold": [], "warm": []}
        outputs = set()
        for _ in range(samples):
            for mode in got:
                shutil.rmtree(cache, ignore_errors=True)
                if mode == "warm":
                    warm_up([env])
                first, total, mb, cpu, out = first_line_memory(["list"], env)
                got[mode].append((first, total, mb, cpu))
                outputs.add(out)
        for mode, rows in got.items():
            firsts, totals, mbs, cpus = zip(*rows, strict=True)
            med = statistics.median(firsts)
            print(
                f"  list {mode}: first line {min(firsts):.3f}-{max(firsts):.3f} s (median {med:.3f}),"
                f" total {min(totals):.3f}-{max(totals):.3f} s (median {statistics.median(totals):.3f}),"
                f" CPU {statistics.median(cpus):.2f} s, peak {max(mbs):.0f} MB, {samples} samples"
            )
        print(f"  the same output in every sample: {'yes' if len(outputs) == 1 else 'NO'}")
        reads = statistics.median(read_floor(jobs) for _ in range(3))
        print(
            f"  every record's bytes read, no decoding, one process: {reads:.3f} s (median of 3; two CPUs halve it"
            " at best): ordered by creation, which only the records hold, a cold listing's first line comes after"
        )
        print(f"  load average after: {os.getloadavg()[0]:.1f}")
    finally:
        os.chdir(REPO)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="only a piped list on 100,000 records, cold and warm")
    parser.add_argument("--samples", type=int, default=5, metavar="N", help="with --list: samples of each (5)")
    args = parser.parse_args()
    if not become_subreaper():
        print("(not a subreaper here: a warm sample may race the listing part's writer)")
    if args.list:
        list_only(max(1, args.samples))
        return
    work = tempfile.mkdtemp(prefix="scale-bench-", dir=REPO)
    # Every command runs from the work directory: `python -m jobctl` puts its working directory
    # first on sys.path, so from the checkout it would run the checkout whatever PYTHONPATH says.
    os.chdir(work)
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        compiled(str(REPO / "jobctl"))
        start = startup(env)
        old = before_tree(work)
        print(f"scale bench: python {platform.python_version()}, {os.cpu_count()} cpus; start-up {start:.3f} s")
        if old is None:
            print(f"  (the code before the cache, {BEFORE_COMMIT}, could not be unpacked with git: not timed)")
        rows = ["list", "orphans", "claim --next", "worker --once", "pick"]
        results = {}
        for n in SIZES:
            results[n] = measure(n, work, old)
            r = results[n]
            print(f"\n{n:,} records (99% finished; built in {r['build']:.1f} s), floor {r['floor']:.3f} s")
            print(f"  {'':<16}{'cold s':>9}{'x floor':>9}{'warm s':>9}{'x floor':>9}")
            for name in rows:
                c, w = r[f"{name} cold"], r[f"{name} warm"]
                print(f"  {name:<16}{c:9.3f}{c / r['floor']:9.1f}{w:9.3f}{w / r['floor']:9.1f}")
            ch = r["claim --next changing"]
            print(f"  {'claim changing':<16}{ch:9.3f}{ch / r['floor']:9.1f}   (one record replaced before each sample)")
            print(f"  list first line {r['list first line']:.3f} s, total {r['list total']:.3f} s (warm)")
            if n == max(SIZES):
                print(f"  cache absent, taking turns: {'now':>8}{'1 process':>11}{'before':>9}{'before/now':>12}")
                for name in rows[:-1]:
                    c, one = r[f"{name} cold"], r[f"{name} cold one process"]
                    then = r.get(f"{name} cold before")
                    tail = "" if then is None else f"{then:9.3f}{then / c:11.2f}x"
                    print(f"  {name:<26}{c:9.3f}{one:11.3f}{tail}")
                if old is not None:
                    print(f"  (before: {BEFORE_COMMIT}, the code before the summary cache, on the same store)")
        grown = growth(work)
        small, large = GROWTH_SIZES
        print(f"\ngrowth {small:,} -> {large:,} records, taking turns (median of {GROWTH_SAMPLES} paired ratios):")
        print(f"  {'':<16}{'cold':>9}{'warm':>9}")
        for name in rows:
            print(f"  {name:<16}{grown[f'{name} cold']:8.1f}x{grown[f'{name} warm']:8.1f}x")
        print(
            f"  {'floor':<16}{grown['floor']:8.1f}x   (os.scandir + stat, {FLOOR_PAIRS} pairs:"
            f" {grown['floor least']:.1f}x to {grown['floor most']:.1f}x)"
        )
        lats = {}
        for size in LATENCY_SIZES:
            lat = lats[size] = latency(work, size)
            print(
                f"\nwatch notice latency, {size:,} records (submit returned -> line read):"
                f" median {statistics.median(lat) * 1000:.1f} ms, max {max(lat) * 1000:.1f} ms over {len(lat)}"
            )
        big = results[100_000]
        print("\ntargets:")

        def verdict(ok: bool) -> str:
            return "met" if ok else "NOT met"

        # The issue's absolute targets were set where the floor took ISSUE_FLOOR: judged as the same
        # multiples of this run's floor (a slower or busier machine moves both), the absolute beside.
        scale = big["floor"] / ISSUE_FLOOR
        print(f"  (absolute targets at this run's floor: x{scale:.2f} the issue's, whose floor was {ISSUE_FLOOR} s)")

        def scaled(what: str, got: float, target: float) -> None:
            print(
                f"  {what} <= {target} s at the issue's floor ({target * scale:.3f} s here): {got:.3f} s"
                f" {verdict(got <= target * scale)}; absolute {verdict(got <= target)}"
            )

        for name in ("claim --next", "orphans"):
            scaled(f"{name} at 100,000 unchanged", big[f"{name} warm"], TARGET_UNCHANGED)
        limit = TARGET_RATIO * big["floor"] + start
        ch = big["claim --next changing"]
        print(
            f"  claim --next at 100,000 changing <= {TARGET_RATIO}x floor + start-up ({limit:.3f} s):"
            f" {ch:.3f} s {verdict(ch <= limit)}"
        )
        scaled("list at 100,000 warm", big["list warm"], TARGET_LIST)
        scaled("list first line", big["list first line"], TARGET_FIRST_LINE)
        for name, before in BEFORE_COLD.items():
            c = big[f"{name} cold"]
            then = big.get(f"{name} cold before")
            if then is not None:
                print(
                    f"  {name} at 100,000 cold at least 2x faster than {BEFORE_COMMIT} (same run):"
                    f" {then / c:.2f}x {verdict(then >= 2 * c)}"
                )
            else:
                scaled(f"{name} at 100,000 cold (half the issue's {before} s)", c, before / 2)
        for mode in ("cold", "warm"):
            worst = max(rows, key=lambda name: grown[f"{name} {mode}"])
            most = grown[f"{worst} {mode}"]
            print(
                f"  growth {small:,} -> {large:,} ({mode}, taking turns) <= {TARGET_GROWTH}x:"
                f" worst {most:.1f}x ({worst}) {verdict(most <= TARGET_GROWTH)}"
            )
        med = statistics.median(lats[LATENCY_SIZES[0]])
        print(
            f"  watch notice latency at {LATENCY_SIZES[0]:,} records < {TARGET_LATENCY * 1000:.0f} ms:"
            f" {med * 1000:.1f} ms {verdict(med < TARGET_LATENCY)}"
        )
    finally:
        os.chdir(REPO)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
