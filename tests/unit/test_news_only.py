"""News only: a lease holder is not woken by the notices of its own steps, and still hears everyone else's.

A worker's lookout (jobctl.keeper.Lookout) listens for intents, recalls and
claims by others. On PostgreSQL every write sends a notice with the row's
new revision; a store asked for news only leaves out the revisions its own
holder steps (claim, renew, progress, release, finish) wrote, so a busy worker
does not read back every record it just wrote.
"""

from __future__ import annotations

import select
import time
from typing import Any

import jobctl
from jobctl.keeper import Lookout


def submit(store: Any) -> str:
    return str(store.submit(jobctl.Record(kind="k", spec={"n": 1})))


def heard(notices: Any, *, sync: bool = True, within: float = 5.0) -> tuple[set[str], set[str]]:
    """What the notices say, once something arrives (or ``within`` seconds pass)."""
    written: set[str] = set()
    removed: set[str] = set()
    end = time.monotonic() + within
    while time.monotonic() < end:
        got = notices.read(sync=sync)
        assert got is not None
        written |= got[0]
        removed |= got[1]
        if written or removed:
            break
        fd = notices.fileno()
        if fd is not None:
            select.select([fd], [], [], 0.05)
    return written, removed


def test_news_only_leaves_out_the_holder_own_steps(pg_url: str) -> None:
    from jobctl.store import postgres

    postgres.init(pg_url)
    with postgres.PostgresStore(pg_url) as mine, postgres.PostgresStore(pg_url) as other:
        job_id = submit(mine)
        news, every = mine.notices(news_only=True), mine.notices()
        try:
            rec = mine.claim(job_id, "w", 30)
            mine.renew(job_id, rec.lease.epoch, 30)
            mine.progress(job_id, rec.lease.epoch, 1)
            assert heard(every)[0] == {job_id}  # the plain notices tell every write
            assert heard(news, within=0.5) == (set(), set())  # the holder's own: no news
            other.set_intent(job_id, "pause", "ops")
            assert heard(news)[0] == {job_id}  # somebody else's write is news
            mine.recall(job_id, rec.lease.epoch, "maintenance", "ops", 3.0)
            assert heard(news)[0] == {job_id}  # a recall written by this same store is news to the holder
            other.load(job_id)
            mine.release(job_id, rec.lease.epoch)
            assert heard(news, within=0.5) == (set(), set())
        finally:
            news.close()
            every.close()


def test_without_a_sync_the_notices_that_arrived_are_read_without_a_round_trip(pg_url: str) -> None:
    from jobctl.store import postgres
    from jobctl.store.postgres import listener

    postgres.init(pg_url)
    with postgres.PostgresStore(pg_url) as s:
        notices = s.notices()
        try:
            assert notices.read() == (set(), set())
            asked: list[bytes] = []
            conn = notices._conn
            conn_execute = conn.execute
            conn.execute = lambda query, *a, **k: asked.append(query) or conn_execute(query, *a, **k)
            listener.SYNC_EVERY, every = 3600.0, listener.SYNC_EVERY
            try:
                job_id = submit(s)
                # woken by the socket alone, as the lookout is: no statement sent to ask
                assert heard(notices, sync=False)[0] == {job_id}
                assert asked == []
                assert notices.read() == (set(), set()) and len(asked) == 1  # a sync asks the server
            finally:
                listener.SYNC_EVERY = every
        finally:
            notices.close()


class FakeNotices:
    recheck = 60.0

    def __init__(self) -> None:
        import os

        self._r, self._w = os.pipe()

    def fileno(self) -> int:
        return self._r

    def read(self, *, sync: bool = True) -> tuple[set[str], set[str]]:
        return set(), set()

    def close(self) -> None:
        import os

        os.close(self._r)
        os.close(self._w)


class FakeStore:
    def __init__(self) -> None:
        self.opened: list[bool] = []

    def notices(self, *, news_only: bool = False) -> FakeNotices:
        self.opened.append(news_only)
        return FakeNotices()


def test_a_follow_reads_once_only_when_it_may_have_missed_a_write() -> None:
    store = FakeStore()
    lookout = Lookout(store)  # type: ignore[arg-type]
    try:
        before = time.monotonic()
        assert lookout.follow("a", lambda: None, since=None)  # when the claim went out is unknown
        assert store.opened == [True]  # asked for news only
        assert lookout.follow("b", lambda: None, since=before)  # claimed before the lookout listened
        after = time.monotonic()
        assert not lookout.follow("c", lambda: None, since=after)  # nothing heard of c since its claim
        with lookout._lock:
            lookout._remember({"d"}, time.monotonic())
        assert lookout.follow("d", lambda: None, since=after)  # d was written after its claim went out
        assert not lookout.follow("e", lambda: None, since=time.monotonic())
    finally:
        lookout.close()


def test_a_forgotten_id_makes_a_follow_from_before_read_once() -> None:
    lookout = Lookout(FakeStore())  # type: ignore[arg-type]
    lookout.REMEMBER = 2
    try:
        lookout.follow("x", lambda: None)
        claimed = time.monotonic()
        with lookout._lock:
            lookout._remember({"a"}, time.monotonic())
            lookout._remember({"b"}, time.monotonic())
        assert not lookout.follow("c", lambda: None, since=claimed)
        with lookout._lock:
            lookout._remember({"c2"}, time.monotonic())  # "a" forgotten: what was heard before is unknown
        assert lookout.follow("a", lambda: None, since=claimed)
        assert lookout.follow("c", lambda: None, since=claimed)
    finally:
        lookout.close()


def test_a_store_without_notices_makes_a_lookout_that_never_asks_for_a_read(tmp_path: Any) -> None:
    lookout = Lookout(None)
    try:
        assert not lookout.follow("a", lambda: None, since=None)
    finally:
        lookout.close()
    notices = jobctl.FileStore(tmp_path).notices(news_only=True)
    assert notices is not None
    try:
        assert notices.read() == (set(), set())  # inotify: the same notices, asked for news only or not
    finally:
        notices.close()


def test_a_notice_without_a_revision_is_heard_and_a_foreign_payload_ignored(pg_url: str) -> None:
    import json

    import psycopg

    from jobctl.store import postgres

    postgres.init(pg_url)
    with postgres.PostgresStore(pg_url) as s, psycopg.connect(pg_url, autocommit=True) as other:
        schema = other.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
        notices = s.notices(news_only=True)
        try:
            notices.read()
            for payload in ("not json", json.dumps([schema, 7, "x"]), json.dumps(["elsewhere", "written", "y"])):
                other.execute("SELECT pg_notify('jobctl_jobs', %s)", (payload,))
            other.execute("SELECT pg_notify('jobctl_jobs', %s)", (json.dumps([schema, "written", "z"]),))
            assert heard(notices) == ({"z"}, set())
        finally:
            notices.close()
