"""Every write of a PostgreSQL store raises the row's revision by one, keeps `unfinished` and sends one notice.

From schema version 5 jobctl's updates do this in their own statements
(queries.sql), and the trigger does it for inserts, deletes and every other
writer's update that does not raise the revision itself (migrate-5.sql):
each write, whichever path it takes (a step's statement, the rules' locked
write, a batch, bytes planted as another writer would, an administrator's
``UPDATE`` in psql), must still announce itself with the revision it wrote,
or a listener sleeps through it, a holder takes it for its own, and a job
reopened by hand is never picked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from jobctl import Record
from jobctl.record import encode
from jobctl.store import postgres

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def listening(pg_store: Any) -> Iterator[Any]:
    """A plain connection listening on the store's channel, as any listener of its schema listens."""
    import psycopg

    with psycopg.connect(pg_store.url, autocommit=True) as conn:
        conn.execute("LISTEN jobctl_jobs")
        yield conn


def row_of(store: Any, job_id: str) -> tuple[int, bool, str]:
    """The row's revision, `unfinished` and state, read past the store's memory."""
    got = store.session.one("SELECT revision, unfinished, state FROM jobctl_jobs WHERE id = %(id)s", {"id": job_id})
    assert got is not None
    return int(got[0]), bool(got[1]), str(got[2])


def announced(conn: Any, store: Any, write: Callable[[], object], *jobs: str, writes: int = 1) -> None:
    """``write`` sent ``writes`` notices a job, each naming the revision it wrote, which rose by one each."""
    schema = conn.execute("SELECT current_schema()").fetchone()[0]
    before = {job: row_of(store, job)[0] for job in jobs}
    write()
    conn.execute("SELECT 1")  # the notices committed before it arrive first
    got = [json.loads(n.payload) for n in conn.notifies(timeout=0.5, stop_after=len(jobs) * writes + 1)]
    want = [[schema, "written", job, before[job] + n] for job in jobs for n in range(1, writes + 1)]
    assert sorted(got) == sorted(want)
    for job in jobs:
        assert row_of(store, job)[0] == before[job] + writes, job


def test_every_step_raises_the_revision_by_one_and_sends_one_notice(pg_store: Any, listening: Any) -> None:
    s = pg_store
    a, b, _ = (s.submit(Record(kind="k", spec={"n": n})) for n in range(3))
    listening.execute("SELECT 1")
    assert len(list(listening.notifies(timeout=0.5, stop_after=3))) == 3  # the inserts: the trigger's
    picked: list[Any] = []
    announced(listening, s, lambda: picked.append(s.claim_next("w", 30)), a)  # the pick's statement
    assert picked[0] is not None and picked[0].id == a
    epoch = picked[0].lease.epoch
    announced(listening, s, lambda: s.claim_next("w", 30), b)
    announced(listening, s, lambda: s.renew(a, epoch, 60), a)
    announced(listening, s, lambda: s.progress(a, epoch, 3, {"at": 3}), a)
    announced(listening, s, lambda: s.set_intent(a, "pause", "ops"), a)
    announced(listening, s, lambda: s.recall(a, epoch, "move", "ops", 20), a)
    announced(listening, s, lambda: s.update(a, epoch, lambda r: None), a)  # the rules' locked write
    announced(listening, s, lambda: s.release(a, epoch), a)
    assert row_of(s, a)[1:] == (True, "pending")
    announced(listening, s, lambda: s.claim(a, "w", 30), a)
    epoch = s.load(a).lease.epoch
    announced(listening, s, lambda: s.finish(a, epoch, "complete"), a)
    assert row_of(s, a)[1:] == (False, "complete")  # out of the open index: no pick walks it again


def test_batches_and_the_rules_path_keep_unfinished_true_to_the_state(pg_store: Any, listening: Any) -> None:
    s = pg_store
    jobs = [s.submit(Record(kind="k", spec={"n": n})) for n in range(4)]
    listening.execute("SELECT 1")
    list(listening.notifies(timeout=0.5, stop_after=4))
    got: list[Any] = []
    announced(listening, s, lambda: got.extend(s.claim_some("w", 30, 2)), jobs[0], jobs[1])
    first = got[0]
    announced(
        listening,
        s,
        lambda: s.finish_and_claim(first.id, first.lease.epoch, "failed", next_id=jobs[2], owner="w", ttl_seconds=30),
        *jobs[:3:2],
    )
    assert row_of(s, jobs[0])[1:] == (False, "failed") and row_of(s, jobs[2])[1:] == (True, "running")
    # A pending job cancelled: the intent, then the claim and the end the rules write whole.
    announced(listening, s, lambda: s.cancel(jobs[3], "ops"), jobs[3], writes=3)
    assert row_of(s, jobs[3])[1:] == (False, "cancelled")


def test_bytes_planted_as_another_writer_would_are_announced(pg_store: Any, listening: Any) -> None:
    s = pg_store
    job = s.submit(Record(kind="k", spec={}))
    listening.execute("SELECT 1")
    list(listening.notifies(timeout=0.5, stop_after=1))
    rec = s.load(job)
    announced(listening, s, lambda: s.replace_bytes(job, encode(rec)), job)  # decodable: written as columns
    announced(listening, s, lambda: s.replace_bytes(job, b'{"schema": "nobody/knows@9"}'), job)  # forged
    assert row_of(s, job)[1:] == (True, "pending")
    rec.state = "complete"  # as another writer ended it: the whole row written, out of the open jobs
    announced(listening, s, lambda: s.replace_bytes(job, encode(rec)), job)
    assert row_of(s, job)[1:] == (False, "complete")


def test_a_foreign_insert_is_announced_and_its_unfinished_kept_by_the_trigger(pg_store: Any, listening: Any) -> None:
    """Inserts and deletes keep the trigger: whoever writes them, the row is announced and `unfinished` is true."""
    import pgserver

    schema = listening.execute("SELECT current_schema()").fetchone()[0]
    pgserver.add_rows(pg_store.url, 2, state="complete")
    listening.execute("SELECT 1")
    got = sorted(json.loads(n.payload) for n in listening.notifies(timeout=0.5, stop_after=3))
    assert got == [[schema, "written", "complete-1", 0], [schema, "written", "complete-2", 0]]
    assert row_of(pg_store, "complete-1")[1:] == (False, "complete")  # the trigger set it, not the writer
    listening.execute("DELETE FROM jobctl_jobs WHERE id = 'complete-1'")
    got = [json.loads(n.payload) for n in listening.notifies(timeout=0.5, stop_after=2)]
    assert got == [[schema, "removed", "complete-1", 0]]


def hand(store: Any, sql: str, params: dict[str, object] | None = None) -> None:
    """``sql`` as an administrator's psql sends it: plain SQL on a connection of its own, committed."""
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(sql.encode(), params)  # type: ignore[call-overload]


def test_a_finished_job_reopened_by_hand_is_announced_and_picked(pg_store: Any, listening: Any) -> None:
    """A psql ``UPDATE ... SET state = 'pending'`` raises no revision itself: the trigger does all of it."""
    s = pg_store
    job = s.submit(Record(kind="k", spec={}))
    got = s.claim_next("w", 30)
    assert got is not None and got.id == job
    s.finish(job, got.lease.epoch, "complete")
    assert row_of(s, job)[1:] == (False, "complete")
    assert s.claim_next("w", 30) is None
    listening.execute("SELECT 1")
    list(listening.notifies(timeout=0.5, stop_after=3))
    announced(
        listening, s, lambda: hand(s, "UPDATE jobctl_jobs SET state = 'pending' WHERE id = %(id)s", {"id": job}), job
    )
    assert row_of(s, job)[1:] == (True, "pending")  # back in the open jobs: a pick walks it
    # The finished attempt's lease is still on the row: a picker once it has run out takes the job.
    later = postgres.PostgresStore(s.url, clock=lambda: datetime.now(timezone.utc) + timedelta(seconds=60))
    try:
        again = later.claim_next("w2", 30)
    finally:
        later.close()
    assert again is not None and again.id == job and again.lease.owner == "w2"


def test_every_other_writers_update_is_announced_whatever_it_sets(pg_store: Any, listening: Any) -> None:
    """Several rows at once, a column that is no state, a revision set back: each row raised by one and announced."""
    s = pg_store
    jobs = [s.submit(Record(kind="k", spec={"n": n})) for n in range(3)]
    listening.execute("SELECT 1")
    list(listening.notifies(timeout=0.5, stop_after=4))
    announced(listening, s, lambda: hand(s, "UPDATE jobctl_jobs SET priority = 7"), *jobs)
    announced(
        listening,
        s,
        lambda: hand(s, "UPDATE jobctl_jobs SET state = state WHERE id = %(id)s", {"id": jobs[0]}),
        jobs[0],
    )
    before = row_of(s, jobs[1])[0]
    hand(s, "UPDATE jobctl_jobs SET revision = 0, state = 'cancelled' WHERE id = %(id)s", {"id": jobs[1]})
    listening.execute("SELECT 1")
    got = [json.loads(n.payload)[2:] for n in listening.notifies(timeout=0.5, stop_after=2)]
    assert got == [[jobs[1], before + 1]]  # set back, it is another writer's: raised from where it was
    assert row_of(s, jobs[1]) == (before + 1, False, "cancelled")


def test_an_update_that_raises_the_revision_itself_is_left_to_announce_itself(pg_store: Any, listening: Any) -> None:
    """The gate jobctl's statements pass: the trigger's body is skipped, so the writer's revision stands."""
    s = pg_store
    job = s.submit(Record(kind="k", spec={}))
    listening.execute("SELECT 1")
    list(listening.notifies(timeout=0.5, stop_after=1))
    before = row_of(s, job)[0]
    hand(s, "UPDATE jobctl_jobs SET revision = revision + 1 WHERE id = %(id)s", {"id": job})
    listening.execute("SELECT 1")
    assert list(listening.notifies(timeout=0.3, stop_after=1)) == []
    assert row_of(s, job)[0] == before + 1  # not raised twice
    # So it does all three itself, as docs/reference/postgres.md shows administrators: a finished job reopened.
    rec = s.load(job)
    rec.state = "complete"
    s.replace_bytes(job, encode(rec))
    assert row_of(s, job)[1:] == (False, "complete")
    listening.execute("SELECT 1")
    list(listening.notifies(timeout=0.5, stop_after=1))
    documented = (
        "UPDATE jobctl_jobs AS j SET state = 'pending', unfinished = true, revision = j.revision + 1"
        " WHERE j.id = %(id)s"
        " RETURNING pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text)"
    )
    announced(listening, s, lambda: hand(s, documented, {"id": job}), job)
    assert row_of(s, job)[1:] == (True, "pending")
    again = s.claim_next("w", 30)
    assert again is not None and again.id == job
