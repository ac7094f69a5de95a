"""A write that would make a record over the size limit a reader takes is refused, with nothing written.

Before, the file store wrote it, and no reader could read it after: ``list``
named it unreadable, and its job could be neither claimed nor finished (the
holder's own next write was refused), so a job whose checkpoint grew past
the limit was stuck for good.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import jobctl
from jobctl.errors import Invalid

LIMIT = 5000
BIG = "x" * 6000


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> jobctl.FileStore:
    monkeypatch.setenv("JOBCTL_MAX_RECORD_BYTES", str(LIMIT))
    return jobctl.FileStore(tmp_path / "root")


def test_a_submit_over_the_limit_writes_nothing(small: jobctl.FileStore) -> None:
    with pytest.raises(Invalid, match=f"job big: the record would be [0-9]+ bytes, over the {LIMIT}-byte limit"):
        small.submit(jobctl.Record(id="big", kind="k", spec={"pad": BIG}))
    assert small.ids() == []


def test_a_checkpoint_over_the_limit_is_refused_and_the_job_goes_on(small: jobctl.FileStore) -> None:
    job = small.submit(jobctl.Record(kind="k", spec={}))
    epoch = small.claim(job, "me", 60).lease.epoch
    before = small.load_bytes(job)
    with pytest.raises(Invalid, match="over the 5000-byte limit on a record"):
        small.progress(job, epoch, 1, {"pad": BIG})
    with pytest.raises(Invalid, match="nothing written"):
        small.finish(job, epoch, "failed", error=BIG)
    assert small.load_bytes(job) == before  # still readable, unchanged
    small.progress(job, epoch, 2, {"at": 2})
    assert small.finish(job, epoch, "complete").state == "complete"
    assert [rec.id for rec in small.list()] == [job] and not small.list().unreadable
