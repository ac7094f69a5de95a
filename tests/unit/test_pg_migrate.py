"""`jobctl db migrate` from schema version 2 (a record's bytes in one column) to 3 (the columns are the record).

The version 2 store here is populated as the jobctl of version 2 wrote it:
each row a record's exact bytes and the columns derived from them. Its
records are jobctl's own in every state (a lease, a recall, an intent,
ranges, a retry, dependencies, a pipeline, a result), upstream writers'
records of every era, and forged ones. After the migration every record
exports to exactly the bytes it had; one nobody can decode is still refused
in its own words; and every step on a migrated record writes what the file
store writes on the same record.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from contractdir import locate_contract

import jobctl
from jobctl import replay, schedule
from jobctl.errors import JobError, UnknownSchema
from jobctl.priority import PRIORITY, priority_of
from jobctl.record import RESULT, decode
from jobctl.store import postgres
from jobctl.wire import Raw

# The version 2 table's own INSERT (its queries.sql of then): the bytes, and columns derived from them.
V2_INSERT = (
    "INSERT INTO jobctl_jobs (id, data, state, kind, epoch, owner, expires_at, want, not_before, after, pipeline,"
    " scheduled, created_at) VALUES (%(id)s, %(data)s, %(state)s, %(kind)s, %(epoch)s, %(owner)s, %(expires_at)s,"
    " %(want)s, %(not_before)s, %(after)s, %(pipeline)s, %(scheduled)s, %(created_at)s)"
)


def _v2_row(job_id: str, data: bytes) -> dict[str, Any]:
    try:
        rec = decode(data, job_id, named=True)
    except JobError:  # a forged record: version 2 kept it with the columns it had
        return dict(
            id=job_id, data=data, state="pending", kind="k", epoch=0, owner="", expires_at=None, want="run",
            not_before=None, after=[], pipeline=None, scheduled=True, created_at="2030-01-01T00:00:00Z",
        )  # fmt: skip
    try:
        after, when, scheduled = schedule.after_of(rec), schedule.not_before(rec), True
    except JobError:
        after, when, scheduled = [], None, False
    pipe = schedule.pipeline_of(rec)
    return dict(
        id=job_id, data=data, state=rec.state, kind=rec.kind, epoch=rec.lease.epoch, owner=rec.lease.owner,
        expires_at=rec.lease.expires_at, want=rec.want, not_before=when, after=after,
        pipeline=None if pipe is None else pipe[0], scheduled=scheduled, created_at=rec.created_at or "1970-01-01Z",
    )  # fmt: skip


def _jobctl_records(store: jobctl.FileStore, clock: Any) -> None:
    """jobctl's own records in the shapes version 2 held: every state, every model, jobctl's extensions."""

    def job(kind: str = "fetch", **plan: Any) -> str:
        rec = jobctl.Record(kind=kind, spec=Raw('{"url": "a\\/b", "n": 1.50}'))
        if plan:
            schedule.plan(rec, **plan)
        clock.advance(1)
        return store.submit(rec)

    first = job(retries=2, intervals=[5, 30], pipeline="nightly")
    job(after=[first], pipeline="nightly")
    job(hold=True, by="ops")
    held = job()
    mine = store.claim(held, "host-a", 3600)
    store.progress(held, mine.lease.epoch, 4, Raw('{"verified": [[4, 8], [0, 4]], "etag": "x"}'))
    recalled = job()
    mine = store.claim(recalled, "host-b", 3600)
    store.recall(recalled, mine.lease.epoch, "drain", "ops", 600)
    done = job()
    mine = store.claim(done, "host-a", 60)
    store.update(done, mine.lease.epoch, lambda r: r.extensions.update({RESULT: {"rows": 3}}))
    store.finish(done, mine.lease.epoch, "complete")
    failed = job()
    mine = store.claim(failed, "host-a", 60)
    store.update(failed, mine.lease.epoch, lambda r: schedule.record_failure(r, 2, clock.now))
    store.release(failed, mine.lease.epoch)
    store.cancel(job(), "ops")
    malformed = jobctl.Record(kind="fetch", spec={}, extensions={schedule.RETRY: {"intervals": "soon"}})
    store.submit(malformed)
    # Priorities, as a jobctl that knew them wrote them beside a store of version 3 (or a foreign writer).
    for value in (7, -3, 1000, "high", 7.5, 5000):
        clock.advance(1)
        store.submit(jobctl.Record(kind="ranked", spec={}, extensions={PRIORITY: value}))


@pytest.fixture
def populated(pg_url: str, tmp_path: Path, make_clock: Callable[[], Any]) -> tuple[str, dict[str, bytes], Any]:
    """A version 2 store holding jobctl's, upstream's and forged records; and each one's bytes."""
    import psycopg

    clock = make_clock()
    files = jobctl.FileStore(tmp_path / "made", clock=clock)
    _jobctl_records(files, clock)
    advisory, critical = files.ids()[:2]
    replay.plant(files, advisory, "content", "abstraction.test/hovercraft@7")
    replay.plant(files, critical, "critical", "abstraction.test/hovercraft@7")
    records = {job_id: files.load_bytes(job_id) for job_id in files.ids()}
    contract = locate_contract() / "vectors" / "records"
    foreign = [*sorted((Path(__file__).resolve().parents[1] / "data").glob("*.json"))]
    foreign += sorted(contract.glob("*.json")) if contract.is_dir() else []
    for path in foreign:
        data = path.read_bytes()
        try:
            records[decode(data).id] = data
        except JobError:
            continue
    assert postgres.init(pg_url, target=2) == (0, 2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for job_id, data in records.items():
            conn.execute(V2_INSERT.encode(), _v2_row(job_id, data))
    return pg_url, records, clock


def _migrate(url: str, was: int = 2) -> None:
    jobctl_cmd = str(Path(sys.executable).parent / "jobctl")
    ran = subprocess.run(
        [jobctl_cmd, "db", "migrate", "--store", url], capture_output=True, text=True, timeout=120, check=False
    )
    assert (ran.returncode, ran.stdout) == (0, f"schema_version={postgres.SCHEMA_VERSION} was={was}\n"), ran.stderr


def test_a_populated_version_2_store_exports_the_same_bytes_after_migrating(populated: Any) -> None:
    url, records, clock = populated
    with pytest.raises(JobError, match=f"has schema version 2; this jobctl needs {postgres.SCHEMA_VERSION}"):
        postgres.PostgresStore(url)
    _migrate(url)
    with postgres.PostgresStore(url, clock=clock) as pg:
        assert pg.schema_version == postgres.SCHEMA_VERSION
        assert pg.ids() == sorted(records)
        for job_id, data in records.items():
            assert pg.load_bytes(job_id) == data, job_id
        unreadable = [job_id for job_id, _ in pg.list().unreadable]
        assert len(unreadable) == 1
        with pytest.raises(UnknownSchema, match="hovercraft"):
            pg.claim(unreadable[0], "host-c", 30)
        assert unreadable[0] not in {r.id for r in pg.orphans()}


def test_every_step_on_a_migrated_record_writes_what_the_file_store_writes(populated: Any, tmp_path: Path) -> None:
    """Each record, migrated or copied as its bytes into a directory: the same steps, the same bytes after each."""
    url, records, clock = populated
    _migrate(url)
    root = tmp_path / "twin"
    files = jobctl.FileStore(root, clock=clock)
    for job_id, data in records.items():
        (root / "jobs" / f"{job_id}.json").write_bytes(data)
    with postgres.PostgresStore(url, clock=clock) as pg:
        assert [r.id for r in pg.orphans()] == [r.id for r in files.orphans()]
        assert pg.list_open().states == files.list_open().states
        for job_id in sorted(records):
            for step in _steps(job_id):
                answers = []
                for store in (files, pg):
                    try:
                        answers.append(store.load_bytes(step(store).id))
                    except JobError as exc:
                        answers.append(f"{exc.verdict}: {exc.message}".encode())
                assert answers[0] == answers[1], job_id
                assert files.load_bytes(job_id) == pg.load_bytes(job_id), job_id
            clock.advance(1)
        assert pg.moved == 0
    shutil.rmtree(root)


def _steps(job_id: str) -> list[Callable[[Any], jobctl.Record]]:
    def claim(s: Any) -> jobctl.Record:
        return s.claim(job_id, "host-c", 60)  # type: ignore[no-any-return]

    def progress(s: Any) -> jobctl.Record:
        return s.progress(job_id, s.load(job_id).lease.epoch, 9, {"at": 9})  # type: ignore[no-any-return]

    def intent(s: Any) -> jobctl.Record:
        return s.set_intent(job_id, "pause", "ops")  # type: ignore[no-any-return]

    def finish(s: Any) -> jobctl.Record:
        return s.finish(job_id, s.load(job_id).lease.epoch, "complete")  # type: ignore[no-any-return]

    return [claim, progress, intent, finish]


def test_the_migrated_store_is_picked_and_heard(populated: Any) -> None:
    url, records, clock = populated
    _migrate(url)
    with postgres.PostgresStore(url, clock=clock) as pg:
        notices = pg.notices()
        try:
            got = pg.claim_next("host-c", 60)
            assert got is not None and got.id in records
            assert notices.read() == ({got.id}, set())
        finally:
            notices.close()


#: Every column of version 3 but the revision, which the fill raises on the rows it writes (the trigger does, as
#: on every write), as `SELECT` gives them; the priority column is version 4's.
_V3_COLUMNS = ", ".join((*postgres.row.COLUMNS, "not_before", "after", "pipeline", "scheduled", "unfinished"))


def test_a_populated_version_3_store_gains_priorities_and_keeps_its_bytes(populated: Any) -> None:
    """3 -> 4: the priority column is what the extension says; every other column, every record's bytes as they were."""
    import psycopg

    url, records, clock = populated
    assert postgres.migrate(url, target=3) == (2, 3)
    with psycopg.connect(url, autocommit=True) as conn:
        before = conn.execute(f"SELECT {_V3_COLUMNS} FROM jobctl_jobs ORDER BY id").fetchall()
        revisions = dict(conn.execute("SELECT id, revision FROM jobctl_jobs").fetchall())
    _migrate(url, was=3)
    with psycopg.connect(url, autocommit=True) as conn:
        after = conn.execute(f"SELECT {_V3_COLUMNS} FROM jobctl_jobs ORDER BY id").fetchall()
        priorities = dict(conn.execute("SELECT id, priority FROM jobctl_jobs").fetchall())
        raised = {i for i, n in conn.execute("SELECT id, revision FROM jobctl_jobs").fetchall() if n != revisions[i]}
        index = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'jobctl_jobs_open'").fetchone()
    assert after == before  # not a column of the record moved: nothing was written but priority
    assert index is not None and "(priority DESC, created_at, id) WHERE unfinished" in index[0]
    expected = {}
    for job_id, data in records.items():
        try:
            expected[job_id] = priority_of(decode(data, job_id, named=True))
        except JobError:
            expected[job_id] = 0
    assert priorities == expected
    assert raised == {job_id for job_id, value in expected.items() if value}
    assert sorted(v for v in expected.values() if v) == [-3, 7, 1000]  # "high", 7.5 and 5000 order as 0
    with postgres.PostgresStore(url, clock=clock) as pg:
        for job_id, data in records.items():
            assert pg.load_bytes(job_id) == data, job_id
        first = pg.claim_next("host-c", 60)
        assert first is not None and first.extensions.get(PRIORITY) == 1000
        second = pg.claim_next("host-c", 60)
        assert second is not None and second.extensions.get(PRIORITY) == 7


def _keyed_index(url: str) -> str | None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        where = "schemaname = current_schema() AND indexname = 'jobctl_jobs_keyed'"
        got = conn.execute(f"SELECT indexdef FROM pg_indexes WHERE {where}").fetchone()
    return None if got is None else str(got[0])


def test_a_store_made_before_the_index_of_keyed_jobs_picks_the_same_and_migrate_adds_it(pg_url: str) -> None:
    """keyed.sql is no version of its own: a store without it picks the same jobs, and `db migrate` adds it."""
    import psycopg

    from jobctl.exclusive import set_exclusive

    postgres.init(pg_url, target=3)  # before version 4: no priority column to order the index by, no index
    assert _keyed_index(pg_url) is None
    postgres.migrate(pg_url)
    assert "(priority DESC, created_at, id) WHERE (unfinished AND" in (_keyed_index(pg_url) or "")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP INDEX jobctl_jobs_keyed")  # as a version 4 store made before it
    with postgres.PostgresStore(pg_url) as store:
        keyed = store.submit(set_exclusive(jobctl.Record(kind="k", spec={}), "printer"))
        plain = store.submit(jobctl.Record(kind="k", spec={}))
        got = store.claim_some("w", 30, 3)
        assert sorted(rec.id for rec in got) == sorted([keyed, plain])
    _migrate(pg_url, was=postgres.SCHEMA_VERSION)
    assert _keyed_index(pg_url) is not None


def test_a_populated_version_4_store_keeps_every_row_and_hands_its_updates_to_jobctl(
    populated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 -> 5: no row changes; jobctl's updates raise and announce; another writer's still get the trigger."""
    import psycopg

    url, records, clock = populated
    assert postgres.migrate(url, target=4) == (2, 4)
    every = "SELECT j.* FROM jobctl_jobs j ORDER BY j.id"
    triggers = (
        "SELECT event_manipulation, action_condition FROM information_schema.triggers"
        " WHERE event_object_table = 'jobctl_jobs' AND trigger_schema = current_schema()"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        before = conn.execute(every).fetchall()
        assert sorted(conn.execute(triggers).fetchall()) == [("DELETE", None), ("INSERT", None), ("UPDATE", None)]
    _migrate(url, was=4)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(every).fetchall() == before  # every column, the revision too
        assert sorted(conn.execute(triggers).fetchall()) == [
            ("DELETE", None),
            ("INSERT", None),
            ("UPDATE", "(new.revision <= old.revision)"),
        ]
    revision = {row[0]: row[postgres.row.REVISION] for row in before}
    with postgres.PostgresStore(url, clock=clock) as pg:
        for job_id, data in records.items():
            assert pg.load_bytes(job_id) == data, job_id
        notices = pg.notices()
        try:
            got = pg.claim_next("host-c", 60)
            assert got is not None and got.id in records
            assert notices.read() == ({got.id}, set())
            pg.finish(got.id, got.lease.epoch, "complete")
            assert notices.read() == ({got.id}, set())
            with psycopg.connect(url, autocommit=True) as conn:  # an administrator reopens it in psql
                conn.execute("UPDATE jobctl_jobs SET state = 'pending' WHERE id = %s", (got.id,))
            assert notices.read() == ({got.id}, set())
        finally:
            notices.close()
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT revision, unfinished FROM jobctl_jobs WHERE id = %s", (got.id,)).fetchone()
    assert row == (revision[got.id] + 3, True)
    # A jobctl of version 4 refuses the store, its db commands and its steps alike.
    with pytest.raises(JobError, match="schema version 5, newer than this jobctl knows \\(4\\)"):
        postgres.migrate(url, target=4)
    monkeypatch.setattr(postgres.handle, "SCHEMA_VERSION", 4)
    with pytest.raises(JobError, match="schema version 5, newer than this jobctl knows \\(4\\)"):
        postgres.PostgresStore(url, clock=clock).load(got.id)
