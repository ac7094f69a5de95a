"""A store outlives its server's restart: the connection is opened again, nothing is lost, fencing holds.

The session's throwaway server is restarted here (``pg_ctl restart -m
fast``: every session ended, open transactions rolled back); a server named
by ``JOBCTL_TEST_PG_URL`` is somebody else's, and these tests skip on it.
"""

from __future__ import annotations

import time

import pytest

from jobctl import Record
from jobctl.errors import LeaseHeld, Refused, StaleEpoch
from jobctl.store import postgres


@pytest.fixture
def server(pg_server: object) -> object:
    if not pg_server.restartable:  # type: ignore[attr-defined]
        pytest.skip("JOBCTL_TEST_PG_URL names a server these tests did not start; they do not restart it")
    return pg_server


def _store(url: str, **kwargs: float) -> postgres.PostgresStore:
    postgres.init(url)
    return postgres.PostgresStore(url, **kwargs)


@pytest.mark.timeout(120)
def test_a_store_from_before_a_restart_goes_on_working(server: object, pg_url: str) -> None:
    store = _store(pg_url)
    try:
        job_id = store.submit(Record(kind="k", spec={"n": 1}))
        server.restart()  # type: ignore[attr-defined]
        # The first call after it finds its connection gone, opens another and runs again.
        claimed = store.claim_next("host-a", 30)
        assert claimed is not None and claimed.id == job_id
        assert store.reconnects == 1
        store.finish(job_id, claimed.lease.epoch, "complete")
        assert store.load(job_id).state == "complete"
        assert store.reconnects == 1
    finally:
        store.close()


@pytest.mark.timeout(120)
def test_a_stale_epoch_from_before_a_restart_is_refused_after_it(server: object, pg_url: str) -> None:
    old, new = _store(pg_url), _store(pg_url)
    try:
        job_id = old.submit(Record(kind="k", spec={}))
        first = old.claim(job_id, "old-host", 0.2)
        time.sleep(0.3)  # its lease lapses; the new host adopts the job with a higher epoch
        second = new.claim(job_id, "new-host", 60)
        assert second.lease.epoch > first.lease.epoch
        server.restart()  # type: ignore[attr-defined]
        with pytest.raises(StaleEpoch):
            old.progress(job_id, first.lease.epoch, 1, checkpoint={"from": "old"})
        with pytest.raises(LeaseHeld):
            old.claim(job_id, "old-host", 60)
        renewed = new.renew(job_id, second.lease.epoch, 60)
        assert renewed.lease.owner == "new-host" and renewed.checkpoint is None
        assert old.reconnects == 1 and new.reconnects == 1
    finally:
        old.close()
        new.close()


@pytest.mark.timeout(120)
def test_a_server_away_too_long_is_refused_then_found_again(server: object, pg_url: str) -> None:
    store = _store(pg_url, reconnect_wait=0.5)
    try:
        job_id = store.submit(Record(kind="k", spec={}))
        seen: list[Refused] = []

        def while_down() -> None:
            with pytest.raises(Refused) as caught:
                store.load(job_id)
            seen.append(caught.value)

        server.restart(while_down)  # type: ignore[attr-defined]
        assert "no connection for 0.5 s" in str(seen[0])
        assert "password" not in str(seen[0])
        assert store.load(job_id).id == job_id  # the server is back: the next call finds it
    finally:
        store.close()
