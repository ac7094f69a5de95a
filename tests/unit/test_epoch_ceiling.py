"""A record at the largest epoch a record holds (2^63-1) cannot be claimed again: refused, and passed over by a pick.

Another writer of the format (Go's ``int64``) may leave a record there, and
an import carries it into either store. A claim raises the epoch, so no claim
of it can be written: it is refused ``invalid`` with the encoder's words, on
both stores alike, with nothing written. A pick passes it over, names it, and
claims the jobs behind it. Before, the PostgreSQL store's statements failed
with ``bigint out of range`` (``Refused``, naming the server, not the job),
and its pick failed at every call while that job was the oldest runnable one:
one imported job stopped every worker of the store.
"""

from __future__ import annotations

import pytest

import jobctl
from jobctl.errors import Invalid, JobError
from jobctl.limits import INT64_MAX
from jobctl.record import Lease, Record, encode

SAID = "lease.epoch does not fit in 64 bits"


def _plant(store: jobctl.Store, job_id: str, epoch: int) -> None:
    """A pending job at ``epoch``, imported as a record another writer left."""
    rec = Record(id=job_id, kind="k", spec={})
    rec.lease = Lease("", epoch, rec.lease.expires_at)
    store.import_bytes(encode(rec))


def test_a_claim_at_the_last_epoch_is_refused_with_nothing_written(any_store: jobctl.Store) -> None:
    _plant(any_store, "top", INT64_MAX)
    before = any_store.load_bytes("top")
    with pytest.raises(Invalid, match=SAID) as refused:
        any_store.claim("top", "me", 30)
    assert refused.value.job_id == "top"
    (verdict,) = any_store.claim_each(["top"], "me", 30)
    assert isinstance(verdict, Invalid) and SAID in verdict.message
    assert any_store.load_bytes("top") == before


def test_a_claim_of_several_refuses_the_one_at_the_last_epoch_and_claims_the_others(any_store: jobctl.Store) -> None:
    _plant(any_store, "top", INT64_MAX)
    fine = any_store.submit(Record(kind="k", spec={}))
    top, other = any_store.claim_each(["top", fine], "me", 30)
    assert isinstance(top, JobError) and SAID in top.message and top.job_id == "top"
    assert isinstance(other, Record) and other.id == fine and other.lease.epoch == 1


def test_a_pick_passes_over_the_job_at_the_last_epoch_names_it_and_claims_the_next(any_store: jobctl.Store) -> None:
    _plant(any_store, "top", INT64_MAX)  # the oldest: every pick meets it first
    _plant(any_store, "below", INT64_MAX - 1)  # one claim left in it
    skipped: list[tuple[str, JobError]] = []
    claimed = any_store.claim_some("me", 30, 4, skipped=skipped, unreadable=[])
    assert [(rec.id, rec.lease.epoch) for rec in claimed] == [("below", INT64_MAX)]
    assert [(job_id, exc.message) for job_id, exc in skipped] == [("top", SAID)]
    later = any_store.submit(Record(kind="k", spec={}))
    got = any_store.claim_next("me", 30)
    assert got is not None and got.id == later
    assert any_store.load("top").lease.epoch == INT64_MAX and any_store.load("top").state == "pending"


#: The columns a claim could write over or hand back (a NULL ``state`` or ``critical`` keeps a row from every pick).
CLAIMED_NOT_NULL = (
    "epoch", "kind", "spec", "owner", "expires_at", "done", "total", "progress_at", "error", "created_at",
    "updated_at", "content",
)  # fmt: skip


@pytest.mark.parametrize("column", CLAIMED_NOT_NULL)
def test_a_row_with_a_null_is_neither_claimed_nor_written(pg_store: jobctl.Store, pg_url: str, column: str) -> None:
    """A row an administrator broke: refused and named by the pick, left as it was; the jobs beside it are claimed.

    Before, the pick claimed it with the others (writing it), then failed on
    its NULL: the others stayed held by a claimer that never heard of them
    until their leases lapsed, and so at every pick after.
    """
    import psycopg

    broken = pg_store.submit(Record(kind="k", spec={}))
    fine = pg_store.submit(Record(kind="k", spec={}))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE jobctl_jobs ALTER {column} DROP NOT NULL".encode())
        conn.execute(f"UPDATE jobctl_jobs SET {column} = NULL WHERE id = %s".encode(), (broken,))
        (revision,) = conn.execute(b"SELECT revision FROM jobctl_jobs WHERE id = %s", (broken,)).fetchone() or (0,)
    said = f"column {column} of its row is NULL"
    with pytest.raises(Invalid, match=said):
        pg_store.claim(broken, "me", 30)
    (verdict,) = pg_store.claim_each([broken], "me", 30)
    assert isinstance(verdict, Invalid) and said in verdict.message
    unreadable: list[tuple[str, JobError]] = []
    claimed = pg_store.claim_some("me", 30, 4, skipped=[], unreadable=unreadable)
    assert [rec.id for rec in claimed] == [fine]
    assert [job_id for job_id, _ in unreadable] == [broken]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        after = conn.execute(b"SELECT revision FROM jobctl_jobs WHERE id = %s", (broken,)).fetchone()
    assert after == (revision,)  # nothing written
