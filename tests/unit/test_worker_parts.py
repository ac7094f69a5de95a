"""The worker loop's collaborators on their own: its ledger, its picks, its alert command.

tests/worker runs them inside real workers; these pin what each one decides
without a loop around it.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from jobctl import FileStore
from jobctl.alerts import Alerts
from jobctl.errors import LockBusy, StaleEpoch
from jobctl.keeper import Outcome
from jobctl.ledger import Ledger
from jobctl.picker import Picker
from jobctl.slots import Event, Report


@pytest.mark.parametrize(
    ("outcome", "what"),
    [
        (Outcome("j", "shell", 1, 1, state="complete"), "complete"),
        (Outcome("j", "shell", 1, 1, state="failed", error="exit status 3"), "failed"),
        (Outcome("j", "shell", 1, 1, state="pending", retried=True, error="exit status 3"), "retry"),
        (Outcome("j", "shell", 1, 1, state="pending", reason="pause"), "released"),
        (Outcome("j", "shell", 1, 1, state="running", verdict=StaleEpoch("j: epoch 2 holds it")), "fenced"),
        (Outcome("j", "shell", 1, 1, verdict=LockBusy("j: busy")), "refused"),
    ],
)
def test_the_ledger_says_and_counts_what_an_attempt_came_to(store: FileStore, outcome: Outcome, what: str) -> None:
    heard: list[Event] = []
    ledger = Ledger(store, frozenset({"shell"}), heard.append)
    assert ledger.ran("j", outcome) == what
    assert [e.what for e in heard] == [what] and heard[0].outcome is outcome
    assert (ledger.summary["finished"], ledger.summary[what]) == (1, 1)
    assert ledger.summary.ran == {"j": outcome.state or "refused"}


def test_a_pick_leaves_out_what_is_handed_out_and_what_is_passed_over_for_now(store: FileStore) -> None:
    picker = Picker(store, "w@h:1", 30.0, 1.0, lambda event: None)
    now = time.monotonic()
    picker.passed.update({"later": now + 60.0, "over": now - 1.0, "never": math.inf})
    assert picker.excluded(["busy"], ["ahead"], now) == {"busy", "ahead", "later", "never"}
    picker.reported(Report("refused", skip=True))  # a refused claim: passed over until the next poll at least
    picker.reported(Report("untrusted", skip=True, forever=True))
    assert now + 1.0 <= picker.passed["refused"] < math.inf and picker.passed["untrusted"] == math.inf


def test_the_alert_command_gets_the_job_not_its_lease_and_its_exit_status_is_said(
    store: FileStore, tmp_path: Path
) -> None:
    heard: list[Event] = []
    seen = tmp_path / "seen"
    env = {"PATH": "/usr/bin:/bin", "JOB_EPOCH": "4", "JOB_WORK": "/w", "KEPT": "yes"}
    command = f'echo "$JOB_ID|$JOB_KIND|$JOB_ERROR|$JOB_ATTEMPT|$JOB_STORE|$JOB_EPOCH|$JOB_WORK|$KEPT" > {seen}; exit 3'
    alerts = Alerts(store, "w@h:1", env, command, "", emit=heard.append, wake=lambda: None)
    alerts.alert(Outcome("j1", "shell", 4, 2, state="failed", error="exit status 7"))
    assert alerts.running
    alerts.close()
    assert not alerts.running
    assert seen.read_text() == f"j1|shell|exit status 7|2|{store.root}|||yes\n"
    assert [(e.what, e.job_id, e.detail) for e in heard] == [("alert-failed", "j1", "the alert command exited 3")]
