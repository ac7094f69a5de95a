"""Start-up cost of the jobctl command line, whole process, against the click floor.

jobctl is started by cron and by shell loops, so its start-up is its latency.
The target (issue 3): a piped ``jobctl submit`` within 1.25x of
``python -c "import click"`` on the same interpreter.

Method: the four commands run interleaved, round after round, each round in
a rotated order, so a noisy moment hits every command alike; the report is
the median wall time of each and the median of the per-round ratios to
``import click`` (paired). ``jobctl list`` reads a store holding a fixed
number of records, so its cost does not drift as ``submit`` adds records to
its own store. Bytecode is compiled first: an installed jobctl has it, and a
checkout run with PYTHONDONTWRITEBYTECODE would otherwise pay the compiler on
every start and measure that instead.

Usage: python bench/startup_bench.py [--rounds N] [--records N]. Always exits 0.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.25
REPO = Path(__file__).resolve().parents[1]


def _jobctl() -> str:
    here = Path(sys.executable).parent / "jobctl"
    return str(here) if here.exists() else "jobctl"


def _run(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="measured rounds (default 40)")
    parser.add_argument("--records", type=int, default=20, help="records in the store jobctl list reads (default 20)")
    args = parser.parse_args()

    compileall.compile_dir(str(REPO / "jobctl"), quiet=1)
    jobctl = _jobctl()
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="jobctl-startup-") as tmp:
        submit_env = {**os.environ, "JOB_STORE": os.path.join(tmp, "submit")}
        list_env = {**os.environ, "JOB_STORE": os.path.join(tmp, "list")}
        for n in range(args.records):
            _run([jobctl, "submit", "--kind", "bench", "--spec", f'{{"n": {n}}}'], list_env)
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([python, "-c", "pass"], submit_env),
            'python -c "import click"': ([python, "-c", "import click"], submit_env),
            "jobctl submit (piped)": (
                [jobctl, "submit", "--kind", "bench", "--spec", '{"url": "https://example.com/a", "n": 1.50}'],
                submit_env,
            ),
            f"jobctl list (piped, {args.records} jobs)": ([jobctl, "list"], list_env),
        }
        names = list(commands)
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_no in range(args.rounds + 3):
            shift = round_no % len(names)
            for name in names[shift:] + names[:shift]:
                argv, env = commands[name]
                elapsed = _run(argv, env)
                if round_no >= 3:  # the first rounds warm the page cache; not counted
                    times[name].append(elapsed)

    floor = names[1]
    print(f"interpreter: {python} (Python {sys.version.split()[0]})")
    print(f"rounds: {args.rounds}, interleaved; medians; ratio = median of per-round ratios to {floor}")
    print()
    print(f"{'command':<34} {'median':>9} {'ratio':>7}")
    for name in names:
        ratios = [t / f for t, f in zip(times[name], times[floor], strict=True)]
        print(f"{name:<34} {statistics.median(times[name]) * 1000:7.1f}ms {statistics.median(ratios):6.2f}x")
    print()
    for name in names[2:]:
        ratio = statistics.median(t / f for t, f in zip(times[name], times[floor], strict=True))
        verdict = "met" if ratio <= TARGET else "NOT met"
        print(f"{name}: {ratio:.2f}x import click; target {TARGET:.2f}x: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
