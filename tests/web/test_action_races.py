"""Approve and reject racing over HTTP, with a worker running, against a real ``jobctl serve`` on both stores.

Two browser tabs approving one held stage make one run; an approve racing
a reject ends as the one the store let through last: a reject answered 200
leaves the stage cancelled (its run, if the approval let one start, is
stopped by its holder), and an approve after it is refused 409 ``terminal``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from webtools import Reply, Server

pytestmark = pytest.mark.timeout(180)


def _race(server: Server, *requests: tuple[str, dict[str, str]]) -> list[Reply]:
    start = threading.Barrier(len(requests))
    replies: list[Reply | None] = [None] * len(requests)

    def send(n: int, path: str, body: dict[str, str]) -> None:
        start.wait()
        replies[n] = server.post(path, body)

    clients = [threading.Thread(target=send, args=(n, *r)) for n, r in enumerate(requests)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(60)
    assert all(reply is not None for reply in replies)
    return replies  # type: ignore[return-value]


def _worker(server: Server, tmp_path: Path) -> subprocess.Popen[str]:
    ran = tmp_path / "ran"
    handler = f"publish=sh -c 'echo \"$JOB_ID\" >> {ran}; sleep 0.3'"
    return subprocess.Popen(
        [sys.executable, "-m", "jobctl", "worker", "--handler", handler, "--poll-interval", "0.05", "--grace", "1"],
        env=server.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _settled(server: Server, job_id: str, check: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + 30
    while True:
        state = server.get(f"/api/jobs/{job_id}").body["state"]
        if check(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def test_approves_and_rejects_racing_make_at_most_one_run_and_a_reject_answered_200_wins(
    served: Callable[..., Server], tmp_path: Path
) -> None:
    server = served()
    worker = _worker(server, tmp_path)
    try:
        for round_ in range(6):
            gate = server.post("/api/jobs", {"kind": "publish", "hold": True, "pipeline": f"p{round_}"}).body["id"]
            if round_ % 2 == 0:  # two tabs approving at once, then nothing else
                replies = _race(server, *[(f"/api/jobs/{gate}/approve", {"by": f"tab{n}"}) for n in range(4)])
                assert [r.status for r in replies] == [200] * 4, [r.body for r in replies]
                assert _settled(server, gate, lambda s: s == "complete") == "complete"
                continue
            approve, reject = _race(
                server,
                (f"/api/jobs/{gate}/approve", {"by": "alice"}),
                (f"/api/jobs/{gate}/cancel", {"by": "bob", "reason": "wrong voice"}),
            )
            assert reject.status == 200, reject.body
            assert approve.status == 200 or (approve.status, approve.body["error"]) == (409, "terminal"), approve.body
            _settled(server, gate, lambda s: s != "running")
            final = server.get(f"/api/jobs/{gate}").body
            assert final["state"] == "cancelled", final
            assert final["error"] == "cancelled at the request of bob: wrong voice"
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    assert "Traceback" not in err, err
    runs = (tmp_path / "ran").read_text().split() if (tmp_path / "ran").exists() else []
    assert len(runs) == len(set(runs)), runs  # no stage ran twice
    assert len(server.store.ids()) == 6  # an approval submits nothing
