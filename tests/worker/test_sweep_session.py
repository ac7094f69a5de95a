"""A dead guardian's session swept: every process left in it killed, none outside it (jobctl.children.sweep_session)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from workertools import gone, wait_until

from jobctl.children import sweep_session

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="the sweep reads /proc (Linux)")

#: A session leader standing in for a guardian: it starts a child in its group, one that moves to a
#: group of its own (with a child of its own there), and one that leaves the session (setsid); it
#: writes their pids, then waits to be killed.
LEADER = r"""
import os, sys, time
pids = []
for how in ("group", "own group", "own session"):
    pid = os.fork()
    if pid == 0:
        if how == "own group":
            os.setpgid(0, 0)
            if os.fork() == 0:
                time.sleep(120)
                os._exit(0)
        if how == "own session":
            os.setsid()
        time.sleep(120)
        os._exit(0)
    pids.append(pid)
# the own group's child, by the parent's /proc children list
time.sleep(0.3)
kids = open(f"/proc/{pids[1]}/task/{pids[1]}/children").read().split()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(" ".join(map(str, pids + [int(k) for k in kids])))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


def _no_pidfds(pid: int) -> int:
    raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfds", "a kernel without pidfds"])
def test_a_dead_leaders_session_is_swept_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pidfds: bool
) -> None:
    if not pidfds:
        monkeypatch.setattr(os, "pidfd_open", _no_pidfds)  # the kill falls back to the pid the look found
    pids_file = tmp_path / "pids"
    leader = subprocess.Popen([sys.executable, "-c", LEADER, str(pids_file)], start_new_session=True)
    bystander = subprocess.Popen(["sleep", "120"], start_new_session=True)  # ours, in another session
    try:
        wait_until(pids_file.exists, 10, "the leader to start its children")
        in_group, own_group, own_session, own_groups_child = map(int, pids_file.read_text().split())
        leader.kill()
        # A zombie, not reaped: its pid (the session's id) is held.
        wait_until(lambda: gone(leader.pid), 10, "the leader to die")
        killed = sweep_session(leader.pid)
        assert killed == 3
        for pid in (in_group, own_group, own_groups_child):
            wait_until(lambda pid=pid: gone(pid), 10, f"{pid} of the session to die of the sweep")
        assert not gone(own_session)  # it left the session: not the guardian's to answer for
        assert not gone(bystander.pid)
        assert sweep_session(leader.pid) == 0  # nothing left: a second sweep kills nothing
    finally:
        leader.kill()
        leader.wait()
        bystander.kill()
        bystander.wait()
        if pids_file.exists():
            for pid in map(int, pids_file.read_text().split()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_a_session_of_no_process_sweeps_nothing() -> None:
    # A pid past the kernel's largest is no process's session.
    assert sweep_session(2**22 + 1) == 0
