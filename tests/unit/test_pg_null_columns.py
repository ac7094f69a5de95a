"""A row with NULL where the schema says NOT NULL (an administrator dropped the constraint): one unreadable record.

No record holds a NULL id, kind, epoch, owner or time, so the row is refused
by name, with its column, as a record that breaks the format is; the other
rows are read, listed, exported and picked as ever. Before, a NULL epoch was
read as a record at epoch ``None`` (and claimed at it), and a NULL kind,
spec, owner or model list crashed every listing with a Python error.
"""

from __future__ import annotations

import pytest

import jobctl
from jobctl.errors import Invalid, JobError

NOT_NULL = (
    "kind", "state", "spec", "done", "total", "progress_at", "owner", "epoch", "expires_at",
    "error", "created_at", "updated_at", "content", "critical",
)  # fmt: skip


@pytest.mark.parametrize("column", NOT_NULL)
def test_a_null_in_a_not_null_column_is_one_unreadable_record_named(
    pg_store: jobctl.Store, pg_url: str, column: str
) -> None:
    import psycopg

    broken = pg_store.submit(jobctl.Record(kind="k", spec={}))
    fine = pg_store.submit(jobctl.Record(kind="k", spec={}))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        also = ", ALTER unfinished DROP NOT NULL" if column == "state" else ""  # the trigger keeps it from state
        conn.execute(f"ALTER TABLE jobctl_jobs ALTER {column} DROP NOT NULL{also}".encode())
        conn.execute(f"UPDATE jobctl_jobs SET {column} = NULL WHERE id = %s".encode(), (broken,))

    said = f"column {column} of its row is NULL"
    with pytest.raises(Invalid, match=said) as refused:
        pg_store.load(broken)
    assert refused.value.job_id == broken
    with pytest.raises(JobError, match=said):
        pg_store.load_bytes(broken)  # export's read

    listed = pg_store.list()
    assert [rec.id for rec in listed] == [fine]
    assert [(job_id, str(exc.message)) for job_id, exc in listed.unreadable] == [
        (broken, f"{said}, which no record holds")
    ]
    opened = pg_store.list_open()
    # A NULL state leaves ``unfinished`` NULL too: neither open nor finished, the row is not among them.
    assert [rec.id for rec in opened] == [fine]
    assert [job_id for job_id, _ in opened.unreadable] == ([] if column == "state" else [broken])
    unreadable: list[tuple[str, JobError]] = []
    assert [rec.id for rec in pg_store.scan(unreadable)] == [fine] and [i for i, _ in unreadable] == [broken]

    assert pg_store.load(fine).lease.epoch == 0
    claimed = pg_store.claim(fine, "me", 30)
    assert (claimed.id, claimed.lease.epoch) == (fine, 1)
