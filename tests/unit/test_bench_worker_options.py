"""bench/worker_bench.py's ``--store-dir``: where its stores go, and the file system it names."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "worker_bench.py"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("worker_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="the mounts are read from /proc (Linux)")
def test_the_file_system_named_is_the_mount_the_directory_is_on() -> None:
    wb = bench()
    assert wb.file_system("/proc/self") == "proc"  # the longest mount point that holds it, not "/"
    assert wb.file_system("/proc") == "proc"
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    assert wb.file_system("/") == [fields[2] for fields in mounts if fields[1] == "/"][-1]  # the last mount wins


def test_a_store_dir_that_is_no_directory_is_refused_before_any_work(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    ran = subprocess.run(
        [sys.executable, str(BENCH), "--store-dir", str(missing)], capture_output=True, text=True, timeout=60
    )
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr == f"worker_bench.py: --store-dir {missing}: not a directory\n"
