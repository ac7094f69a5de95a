"""Where the shared contract (DIGEST, scenarios, vectors) is: beside the clone, or where a variable says."""

from __future__ import annotations

import os
from pathlib import Path

CONTRACT_ENV = "JOBCTL_CONTRACT_DIR"


def locate_contract() -> Path:
    """The contract directory this run should use (it may not exist)."""
    env = os.environ.get(CONTRACT_ENV, "")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "contract"
