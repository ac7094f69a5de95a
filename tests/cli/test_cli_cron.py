"""The cron scenario, played end to end by a shell script with the installed ``jobctl``.

The script (tests/cli/cron/scenario.sh) is the test: it drives producer.sh and
consumer.sh, kills a consumer with SIGKILL, waits for its lease to lapse, and
checks every line and exit code itself. Here it only needs a PATH that finds
this checkout's ``jobctl`` console script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from clitools import CLEARED, JOBCTL

CRON = Path(__file__).with_name("cron")


@pytest.mark.timeout(180)
def test_the_cron_scenario(tmp_path: Path) -> None:
    assert Path(JOBCTL).exists(), f"the console script {JOBCTL} is not installed (pip install -e .)"
    bash = shutil.which("bash")
    assert bash is not None, "the cron scenario needs bash"
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env["PATH"] = os.pathsep.join([str(Path(JOBCTL).parent), env.get("PATH", "")])
    env["HOME"] = str(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / ".config")
    proc = subprocess.run(
        [bash, str(CRON / "scenario.sh"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.stdout.splitlines()[-1] == "ok"
