"""No job runs twice at the same time, whatever happens to its worker: kill campaigns through real workers.

Each campaign (``_campaign.py``, in its own process, a child subreaper) runs
jobs that take an exclusive non-blocking ``flock`` on a per-job file and
record ``DOUBLE`` when they find it taken. ``JOBCTL_KILL_CAMPAIGN`` sets the
number of kills per campaign (default 20 each, so the suite stays quick on a
busy machine; ``JOBCTL_KILL_CAMPAIGN=100`` runs the issue's 200).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from workertools import HERE

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("flock") is None, reason="the campaign jobs need flock(1) (util-linux)"),
]

KILLS = int(os.environ.get("JOBCTL_KILL_CAMPAIGN", "20"))
TTL = 1.0


def campaign(mode: str, root: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "_campaign.py"), mode, str(root), str(KILLS), str(TTL)],
        capture_output=True,
        text=True,
        timeout=880,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    figures: dict[str, Any] = json.loads(proc.stdout)
    print(f"{mode} campaign: {figures}")  # the figures, for whoever runs it with -s
    return figures


def test_a_stopped_worker_never_lets_its_job_run_twice(root: Path) -> None:
    """Issue 11 item 1: SIGSTOP (what Ctrl-Z does) a worker mid-job; the guardian kills its children in time."""
    got = campaign("stop", root)
    assert got["kills"] == KILLS
    # The race happened: every stop outlasted the TTL and, each time, another worker adopted a stopped job.
    assert got["shortest_stop_s"] > TTL
    assert got["adopted"] == KILLS
    assert got["runs"] > KILLS
    assert got["doubles"] == []
    assert got["survivors"] == 0 and got["locks_held_at_end"] == 0


def test_a_worker_killed_while_starting_jobs_leaves_nothing_running(root: Path) -> None:
    """Issue 11 item 2: SIGKILL a --concurrency 8 worker in its first burst of starts."""
    got = campaign("kill", root)
    assert got["kills"] == KILLS
    # The race happened: each kill landed while slots were still starting, and some children had
    # been started but were still waiting for their go (they exited with 125, running nothing).
    assert got["in_burst"] == KILLS
    assert got["no_go"] > 0
    assert got["doubles"] == []
    assert got["survivors"] == 0 and got["locks_held_at_end"] == 0
