"""Start-up cost of the jobctl command line, whole process, against the click floor.

jobctl is started by cron and by shell loops, so its start-up is its latency.
The target (issue 29): a piped ``jobctl submit`` within 1.2x of
``python -c "import click"`` on the same interpreter, both as the editable
checkout (``make install``: this script's own interpreter) and as an
installed package (the wheel built from this tree, installed with pip in a
fresh virtual environment, with ``import click`` timed on that one's
interpreter: each install is judged against its own floor).

Method: the four commands run interleaved, round after round, each round in
a rotated order, so a noisy moment hits every command alike; the report is
the median wall time of each and the median of the per-round ratios to
``import click`` (paired). ``jobctl list`` reads a store holding a fixed
number of records, so its cost does not drift as ``submit`` adds records to
its own store. Bytecode is compiled first: an installed jobctl has it, and a
checkout run with PYTHONDONTWRITEBYTECODE would otherwise pay the compiler on
every start and measure that instead.

Usage: python bench/startup_bench.py [--rounds N] [--records N] [--installs editable,wheel].
The wheel's environment needs the package registry (or pip's cache) for
click, rich and platformdirs; without it that install is left out with a
line saying so. Always exits 0.
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

TARGET = 1.2
REPO = Path(__file__).resolve().parents[1]


def _jobctl(python: str) -> str:
    here = Path(python).parent / "jobctl"
    return str(here) if here.exists() else "jobctl"


def _wheel_env(tmp: str) -> str | None:
    """A fresh virtual environment with the wheel of this tree installed by pip; its python, or None."""
    venv = os.path.join(tmp, "venv")
    steps = [
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", tmp, str(REPO)],
        [sys.executable, "-m", "venv", venv],
    ]
    for argv in steps:
        if subprocess.run(argv, capture_output=True, check=False).returncode != 0:
            return None
    python = os.path.join(venv, "bin", "python")
    wheels = [str(p) for p in Path(tmp).glob("jobctl-*.whl")]
    proc = subprocess.run([python, "-m", "pip", "install", "--quiet", *wheels], capture_output=True, check=False)
    return python if proc.returncode == 0 else None


def _run(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    return elapsed


def measure(python: str, rounds: int, records: int, tmp: str) -> None:
    """The four commands on ``python`` (and the ``jobctl`` beside it), interleaved; prints the table."""
    jobctl = _jobctl(python)
    submit_env = {**os.environ, "JOB_STORE": os.path.join(tmp, "submit")}
    list_env = {**os.environ, "JOB_STORE": os.path.join(tmp, "list")}
    for n in range(records):
        _run([jobctl, "submit", "--kind", "bench", "--spec", f'{{"n": {n}}}'], list_env)
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([python, "-c", "pass"], submit_env),
        'python -c "import click"': ([python, "-c", "import click"], submit_env),
        "jobctl submit (piped)": (
            [jobctl, "submit", "--kind", "bench", "--spec", '{"url": "https://example.com/a", "n": 1.50}'],
            submit_env,
        ),
        f"jobctl list (piped, {records} jobs)": ([jobctl, "list"], list_env),
    }
    names = list(commands)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(rounds + 3):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            argv, env = commands[name]
            elapsed = _run(argv, env)
            if round_no >= 3:  # the first rounds warm the page cache; not counted
                times[name].append(elapsed)

    floor = names[1]
    print(f"interpreter: {python}")
    print(f"rounds: {rounds}, interleaved; medians; ratio = median of per-round ratios to {floor}")
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="measured rounds (default 40)")
    parser.add_argument("--records", type=int, default=20, help="records in the store jobctl list reads (default 20)")
    parser.add_argument("--installs", default="editable,wheel", help="which installs: editable, wheel (default both)")
    args = parser.parse_args()

    compileall.compile_dir(str(REPO / "jobctl"), quiet=1)
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    installs = args.installs.split(",")
    if "editable" in installs:
        print("\n== the editable checkout (make install)")
        with tempfile.TemporaryDirectory(prefix="jobctl-startup-") as tmp:
            measure(sys.executable, args.rounds, args.records, tmp)
    if "wheel" in installs:
        print("\n== the installed package (the wheel, installed by pip in a fresh virtual environment)")
        with tempfile.TemporaryDirectory(prefix="jobctl-startup-") as tmp:
            python = _wheel_env(tmp)
            if python is None:
                print("left out: the wheel could not be built or installed (no registry, no pip cache?)")
            else:
                measure(python, args.rounds, args.records, tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
