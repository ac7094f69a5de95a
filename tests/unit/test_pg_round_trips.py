"""The PostgreSQL store's hot path: how many round trips each operation costs, and that the fewer still fence.

Each step of the contract is one statement whose WHERE clause states its
preconditions: one round trip. ``update`` (a holder's arbitrary change) and
a step whose statement was refused are one transaction in pipeline mode
(``Session.tx``): the locked read goes out with a Flush, Python runs the
contract's rules on the row while its lock is held, and the write goes out
with the Sync that commits it. Counted here from libpq's own protocol
trace: a round trip is the client sending and then waiting for the server's
answer.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from jobctl import Record
from jobctl.errors import LeaseHeld, Refused, StaleEpoch


def round_trips(store: Any, step: Callable[[], object], *, preparing: bool = False) -> int:
    """How many times ``step`` sends to the server and then reads its answer.

    A statement is prepared once per connection, at its second run (a Parse
    and a Sync, a round trip of its own): not counted unless ``preparing``,
    so that what is counted is what every later run costs.
    """
    from psycopg import pq

    conn = store._connection()
    fd, path = tempfile.mkstemp(prefix="jobctl-pgtrace-")
    try:
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            step()
        finally:
            conn.pgconn.untrace()
        with open(path, encoding="utf-8", errors="replace") as fh:
            # one line per protocol message: "F" from the client, "B" from the server, a tab, its
            # length, its type; a statement's text may span lines, and continuations start with neither
            lines = [line.split("\t") for line in fh if line[:2] in ("F\t", "B\t")]
    finally:
        os.close(fd)
        os.unlink(path)
    trips, sent = 0, []
    for line, after in itertools.pairwise([*lines, ["F"]]):
        if line[0] == "F":
            sent.append(line[2].strip())
        elif after[0] == "F":  # the server's answer is over: one round trip
            trips += preparing or set(sent) != {"Parse", "Sync"}
            sent = []
    return trips


def submit(store: Any) -> str:
    return str(store.submit(Record(kind="k", spec={"n": 1})))


def test_the_hot_path_round_trips(pg_store: Any) -> None:
    """Every step one round trip: its statement; update two (read under lock; write with commit).

    A pick that fills its slots is its statement alone; one that leaves some
    free reads the open jobs with a key after it (a round trip more).

    A refused step costs its statement and the rules' locked read, whose
    transaction ends with nothing written (its Sync): three.
    """
    assert round_trips(pg_store, lambda: submit(pg_store)) == 1  # the server's clock stamps it
    for _ in range(4):
        submit(pg_store)
    got: list[Any] = []
    assert round_trips(pg_store, lambda: got.append(pg_store.claim_next("w", 30))) == 1
    rec = got[0]
    epoch = rec.lease.epoch
    assert round_trips(pg_store, lambda: pg_store.renew(rec.id, epoch, 30)) == 1
    assert round_trips(pg_store, lambda: pg_store.progress(rec.id, epoch, 5, {"at": 5})) == 1
    assert round_trips(pg_store, lambda: pg_store.update(rec.id, epoch, lambda r: None)) == 2
    assert round_trips(pg_store, lambda: pg_store.set_intent(rec.id, "pause", "ops")) == 1
    assert round_trips(pg_store, lambda: pg_store.recall(rec.id, epoch, "move", "ops", 20)) == 1
    assert round_trips(pg_store, lambda: pg_store.finish(rec.id, epoch, "complete")) == 1
    other = pg_store.claim_next("w", 30)
    assert round_trips(pg_store, lambda: pg_store.release(other.id, other.lease.epoch)) == 1
    mine: list[Any] = []
    assert round_trips(pg_store, lambda: mine.append(pg_store.claim(other.id, "w", 30))) == 1
    assert round_trips(pg_store, lambda: pg_store.load(rec.id)) == 1
    assert round_trips(pg_store, pg_store.now) == 1
    assert round_trips(pg_store, pg_store.list_open) == 1  # open rows and finished states together
    # the worker's pick also names malformed jobs: that query rides with the pick
    skipped: list[Any] = []
    assert round_trips(pg_store, lambda: pg_store.claim_next("w", 30, skipped=skipped)) == 1
    batch: list[Any] = []
    # a pick that leaves slots free (2 jobs for 4) reads the open jobs with a key after it, for those slots
    assert round_trips(pg_store, lambda: batch.extend(pg_store.claim_some("w", 30, 4))) == 2
    assert len(batch) == 2
    # a refused step: its statement, then the rules on the row under its lock, which name the refusal
    now_at = mine[0].lease.epoch
    assert round_trips(pg_store, lambda: _refused(lambda: pg_store.finish(other.id, now_at - 1, "complete"))) == 3
    assert round_trips(pg_store, lambda: _refused(lambda: pg_store.renew(other.id, now_at - 1, 30))) == 3
    assert pg_store.load(rec.id).state == "complete"
    assert pg_store.load(other.id).state == "running"


def test_a_slot_finishes_and_claims_the_next_in_one_round_trip(pg_store: Any) -> None:
    """finish + claim of the next job: one transaction in pipeline mode; a batch of claims: one statement."""
    jobs = [submit(pg_store) for _ in range(6)]
    first = pg_store.claim(jobs[0], "w", 30)
    for _ in range(2):  # prepared from the second run (a round trip of its own, this once)
        pg_store.finish_and_claim(first.id, 99, "complete", next_id=jobs[5], owner="w", ttl_seconds=30)
    got: list[Any] = []
    step = lambda: got.append(  # noqa: E731
        pg_store.finish_and_claim(first.id, first.lease.epoch, "complete", next_id=jobs[1], owner="w", ttl_seconds=30)
    )
    assert round_trips(pg_store, step) == 1
    done, taken = got[0]
    assert done.state == "complete" and taken.state == "running" and taken.lease.owner == "w"
    assert pg_store.load_bytes(first.id) == _bytes_of(done)
    assert pg_store.load_bytes(jobs[1]) == _bytes_of(taken)
    batch: list[Any] = []
    assert round_trips(pg_store, lambda: batch.extend(pg_store.claim_each(jobs[2:5], "w", 30))) == 1
    assert [r.id for r in batch] == jobs[2:5]
    assert all(pg_store.load_bytes(r.id) == _bytes_of(r) for r in batch)


def test_finish_and_claim_judge_each_step_alone(pg_store: Any) -> None:
    """A stale finish is refused and the claim still taken; a claim refused leaves the finish done."""
    a, b, c = (submit(pg_store) for _ in range(3))
    held_a = pg_store.claim(a, "w", 30)
    pg_store.claim(c, "other", 30)
    done, taken = pg_store.finish_and_claim(a, held_a.lease.epoch - 1, "complete", next_id=b, owner="w", ttl_seconds=30)
    assert isinstance(done, StaleEpoch) and done.job_id == a
    assert taken.state == "running" and taken.lease.owner == "w"
    done, refused = pg_store.finish_and_claim(a, held_a.lease.epoch, "failed", next_id=c, owner="w", ttl_seconds=30)
    assert done.state == "failed"
    assert isinstance(refused, LeaseHeld) and refused.job_id == c
    assert pg_store.load(c).lease.owner == "other"
    assert pg_store.moved == 0


def test_a_row_held_past_the_lock_patience_makes_them_steps_apart(pg_url: str, monkeypatch: Any) -> None:
    """Another transaction holds the next job's row: the pair rolls back and runs apart; the finish is not lost."""
    import psycopg

    from jobctl import limits
    from jobctl.errors import LockBusy
    from jobctl.store import postgres

    monkeypatch.setattr(limits, "LOCK_PATIENCE", 0.2)
    postgres.init(pg_url)
    with postgres.PostgresStore(pg_url) as s, psycopg.connect(pg_url) as locker:
        a, b, c = (submit(s) for _ in range(3))
        mine = s.claim(a, "w", 30)
        locker.execute("SELECT id FROM jobctl_jobs WHERE id = %s FOR UPDATE", (b,))  # held until the end
        done, taken = s.finish_and_claim(a, mine.lease.epoch, "complete", next_id=b, owner="w", ttl_seconds=30)
        assert done.state == "complete" and s.load(a).state == "complete"
        assert isinstance(taken, LockBusy) and taken.job_id == b
        got = s.claim_each([b, c], "w", 30)
        assert isinstance(got[0], LockBusy) and got[1].state == "running"
        locker.rollback()
        assert s.load(b).state == "pending"


def test_two_transactions_waiting_on_each_other_make_them_steps_apart(pg_url: str, monkeypatch: Any) -> None:
    """The server ends the pair as a deadlock's victim: LockBusy, run apart, and neither step lost."""
    import threading
    import time

    import psycopg

    from jobctl import limits
    from jobctl.errors import LockBusy
    from jobctl.store import postgres

    monkeypatch.setattr(limits, "LOCK_PATIENCE", 10.0)  # the deadlock check (1 s) comes first
    postgres.init(pg_url)
    with postgres.PostgresStore(pg_url) as s, psycopg.connect(pg_url) as locker:
        a, b = submit(s), submit(s)
        mine = s.claim(a, "w", 30)
        first, second = sorted([a, b])
        busy: list[BaseException] = []
        together = s.session.together

        def spied(calls: Any) -> Any:
            try:
                return together(calls)
            except LockBusy as exc:
                busy.append(exc)
                raise

        monkeypatch.setattr(s.session, "together", spied)
        got: list[Any] = []
        locker.execute("SELECT id FROM jobctl_jobs WHERE id = %s FOR UPDATE", (second,))
        pair = lambda: got.append(  # noqa: E731
            s.finish_and_claim(a, mine.lease.epoch, "complete", next_id=b, owner="w", ttl_seconds=30)
        )
        worker = threading.Thread(target=pair)
        worker.start()
        time.sleep(0.4)  # the pair holds the first row and waits for the second
        locker.execute("SELECT id FROM jobctl_jobs WHERE id = %s FOR UPDATE", (first,))  # a cycle: the pair ends
        locker.rollback()
        worker.join(30)
        assert len(busy) == 1 and isinstance(busy[0].__cause__, psycopg.errors.DeadlockDetected)
        done, taken = got[0]
        assert done.state == "complete" and s.load(a).state == "complete"
        assert taken.state == "running" and s.load(b).lease.owner == "w" and s.load(b).lease.epoch == 1


def test_a_statement_is_prepared_once_at_its_second_run(pg_store: Any) -> None:
    """The first run parses and plans as it goes, one round trip; the second prepares it (one more), once."""
    job = submit(pg_store)
    trips = [round_trips(pg_store, lambda: pg_store.load(job), preparing=True) for _ in range(5)]
    assert trips == [1, 2, 1, 1, 1]


def _refused(step: Callable[[], object]) -> None:
    with pytest.raises(StaleEpoch):
        step()


def test_the_row_stays_locked_while_the_contract_decides(pg_store: Any) -> None:
    """Between the locked read and the write (two round trips), no other transaction can take the row."""
    import psycopg

    job = submit(pg_store)
    rec = pg_store.claim_next("w", 30)
    probes: list[str] = []

    def mutate(r: Record) -> None:
        with psycopg.connect(pg_store.url, autocommit=True) as other:
            try:
                other.execute("SELECT id FROM jobctl_jobs WHERE id = %s FOR UPDATE NOWAIT", (job,))
            except psycopg.errors.LockNotAvailable:
                probes.append("locked")
            else:
                probes.append("free")
        r.progress.done = 7

    pg_store.update(job, rec.lease.epoch, mutate)
    assert probes == ["locked"]
    assert pg_store.load(job).progress.done == 7


def test_a_refusal_writes_nothing_and_leaves_no_transaction_open(pg_store: Any) -> None:
    import psycopg

    job = submit(pg_store)
    rec = pg_store.claim_next("w", 30)
    before = pg_store.load_bytes(job)
    with pytest.raises(StaleEpoch):
        pg_store.finish(job, rec.lease.epoch - 1, "complete")
    assert pg_store._connection().info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with psycopg.connect(pg_store.url, autocommit=True) as other:  # the row lock went with the transaction
        assert other.execute("SELECT id FROM jobctl_jobs WHERE id = %s FOR UPDATE NOWAIT", (job,)).fetchone()
    assert pg_store.load_bytes(job) == before
    assert pg_store.finish(job, rec.lease.epoch, "complete").state == "complete"


def test_a_failed_write_rolls_its_transaction_back(pg_store: Any) -> None:
    """The server refuses the UPDATE (a trigger here): nothing is written, and the next write works."""
    import psycopg

    job = submit(pg_store)
    with psycopg.connect(pg_store.url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse_complete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF NEW.state = 'complete' THEN RAISE EXCEPTION 'no completing today'; END IF;"
            " RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_complete BEFORE UPDATE ON jobctl_jobs"
            " FOR EACH ROW EXECUTE FUNCTION refuse_complete()"
        )
    rec = pg_store.claim_next("w", 30)
    before = pg_store.load_bytes(job)
    with pytest.raises(Refused, match="no completing today"):
        pg_store.finish(job, rec.lease.epoch, "complete")
    assert pg_store._connection().info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert pg_store.load_bytes(job) == before
    renewed = pg_store.renew(job, rec.lease.epoch, 60)
    assert renewed.lease.expires_at > rec.lease.expires_at


def test_the_pick_is_judged_and_stamped_by_the_server_clock(pg_store: Any) -> None:
    """The pick reads the server's clock in its own statement; the lease it grants starts then."""
    from datetime import timedelta

    submit(pg_store)
    # The server's clock itself: now() may run late by a round trip (it is never early), so not now().
    before = pg_store._server_clock()
    rec = pg_store.claim_next("w", 30)
    after = pg_store._server_clock()
    assert rec is not None
    assert before <= rec.lease.expires_at - timedelta(seconds=30) <= after
    assert pg_store.load(rec.id).lease == rec.lease


def test_without_pipeline_mode_a_write_is_an_ordinary_transaction(pg_store: Any, monkeypatch: Any) -> None:
    """An older libpq has no pipeline mode: the same writes, the same verdicts, in BEGIN ... COMMIT."""
    from jobctl.store.postgres import session

    monkeypatch.setattr(session, "PIPELINE", False)
    job = submit(pg_store)
    rec = pg_store.claim_next("w", 30, skipped=[])
    assert rec is not None and rec.id == job
    with pytest.raises(StaleEpoch):
        pg_store.finish(job, rec.lease.epoch - 1, "complete")
    assert round_trips(pg_store, lambda: pg_store.update(job, rec.lease.epoch, lambda r: None)) == 4
    nxt = submit(pg_store)
    pair = lambda: pg_store.finish_and_claim(job, rec.lease.epoch, "complete", next_id=nxt, owner="w", ttl_seconds=30)  # noqa: E731
    got: list[Any] = []
    assert round_trips(pg_store, lambda: got.append(pair())) == 4  # BEGIN, the two statements, COMMIT
    done, taken = got[0]
    assert done.state == "complete" and pg_store.load(job).state == "complete"
    assert taken.state == "running" and pg_store.load(nxt).lease.owner == "w"


#: What every UPDATE of queries.sql hands back last: the row's change notice, sent (schema version 5).
NOTICE = "pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text)"


def test_each_step_hands_back_what_the_store_lays_over() -> None:
    """queries.sql's RETURNING of each step is the revision, then row.STEPS's columns, in order, then the notice."""
    import re

    from jobctl.store.postgres import Q, row

    def names(listed: str, prefix: str) -> tuple[str, ...]:
        listed = listed.rstrip(";").rstrip()
        assert listed.endswith(", " + NOTICE) or listed.endswith(",\n    " + NOTICE), listed
        listed = listed[: listed.rindex(NOTICE)].rstrip().rstrip(",")
        return tuple(name.strip().removeprefix(prefix) for name in listed.split(","))

    for step, columns in row.STEPS.items():
        found = re.search(r"RETURNING (.*);?\Z", Q[step], re.S)
        assert found is not None, step
        assert names(found.group(1), "j.") == ("revision", *columns), step

    # A claim's answer is the row's head: the record's columns and the revision; the pick's, each claimed row's.
    for name in ("claim", "claim_next"):
        found = re.search(r"RETURNING (.*);?\Z", Q[name], re.S)
        assert found is not None and names(found.group(1), "j.") == row.HELD, name
    # Every other UPDATE of the table sends its notice too.
    for name in ("write", "forged"):
        assert Q[name].endswith("RETURNING " + NOTICE + ";"), name
    # The open jobs with a key, read when a pick leaves slots free: the head of each, with the time of the look.
    keyed = re.search(r"^SELECT (.*?), coalesce\(%\(now\)s::timestamptz, [^\n]*\nFROM", Q["keyed_open"], re.S | re.M)
    assert keyed is not None
    assert tuple(name.strip().removeprefix("k.") for name in keyed.group(1).split(",")) == row.HELD


def test_a_step_after_another_writer_hands_back_the_row_as_it_left_it(pg_store: Any) -> None:
    """A step laid over a held row that somebody else wrote since reads the row again: their write is in it."""
    from jobctl.store import postgres

    job = submit(pg_store)
    mine = pg_store.claim(job, "w", 60)
    with postgres.PostgresStore(pg_store.url) as other:
        other.set_intent(job, "pause", "ops")
    done = pg_store.progress(job, mine.lease.epoch, 3, {"at": 3})
    assert done.want == "pause" and done.progress.done == 3
    assert pg_store.load_bytes(job) == _bytes_of(done)
    ended = pg_store.finish(job, mine.lease.epoch, "complete")  # held at the revision before: laid over
    assert ended.want == "pause" and ended.state == "complete" and ended.checkpoint == {"at": 3}
    assert pg_store.load_bytes(job) == _bytes_of(ended)


def test_a_step_of_a_store_holding_no_row_reads_it_in_the_same_round_trip(pg_store: Any) -> None:
    """A command that runs one step (`jobctl finish ID` in a fresh process): still one round trip."""
    from jobctl.store import postgres

    job = submit(pg_store)
    mine = pg_store.claim(job, "w", 60)
    with postgres.PostgresStore(pg_store.url) as fresh:
        got: list[Any] = []
        assert round_trips(fresh, lambda: got.append(fresh.finish(job, mine.lease.epoch, "failed", error="x"))) == 1
        assert got[0].state == "failed" and got[0].error == "x"
        assert fresh.load_bytes(job) == _bytes_of(got[0])


def _bytes_of(rec: Record) -> bytes:
    from jobctl.record import encode

    return encode(rec)


def test_the_server_clock_is_asked_at_most_once_a_second(pg_store: Any, monkeypatch: Any) -> None:
    from jobctl.store.postgres import handle as pg

    pg_store.now()
    assert round_trips(pg_store, lambda: [pg_store.now() for _ in range(5)]) == 0  # within CLOCK_FRESH
    monkeypatch.setattr(pg, "CLOCK_FRESH", 0.0)
    assert round_trips(pg_store, lambda: [pg_store.now() for _ in range(2)]) == 2
