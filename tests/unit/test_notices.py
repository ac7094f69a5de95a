"""Change notices (jobctl.notices) and the watch that rides on them: read the store when it changed, not before."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

import jobctl
from jobctl import FileStore, Record
from jobctl.notices import Changes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def test_changes_report_record_writes_and_nothing_else(store: FileStore) -> None:
    changes = Changes(store)
    assert changes.watching
    assert changes.wait(0) is False
    job_id = store.submit(Record(kind="k", spec={}))
    assert changes.wait(0) is True
    assert changes.wait(0) is False  # drained
    (Path(store.jobs_dir) / "unrelated.txt").write_text("x")
    assert changes.wait(0) is False  # not a record
    store.claim(job_id, "w", 30)
    assert changes.wait(0) is True
    changes.close()


class Counting(FileStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.lists = 0

    def list(self) -> jobctl.Listing:
        self.lists += 1
        return super().list()


def test_a_watch_reads_the_store_only_when_a_record_changed(tmp_path: Path) -> None:
    store = Counting(tmp_path / "root")
    first = store.submit(Record(kind="k", spec={}))
    w = jobctl.Watch(store, "k")
    present = w.next()
    assert present is not None and present.what == "changed" and [r.id for r in present.records] == [first]
    reads = store.lists
    # A polling watch would read at least twice in this second (on entry, and after 0.75 s).
    assert w.next(timeout=1.0) is None
    assert store.lists == reads
    later = threading.Timer(0.2, lambda: store.submit(Record(id="9-second", kind="k", spec={})))
    later.start()
    try:
        notice = w.next(timeout=30)
    finally:
        later.join()
    assert notice is not None and notice.what == "changed"
    assert [r.id for r in notice.records] == [first, "9-second"]
    w.close()
    closed = w.next()
    assert closed is not None and closed.what == "closed"


def test_a_renewal_wakes_the_watch_but_is_no_notice(tmp_path: Path) -> None:
    """[JOB-N1] unchanged: the file moved, nothing visible did, so no notice comes of it."""
    store = FileStore(tmp_path / "root")
    job_id = store.submit(Record(kind="k", spec={}))
    epoch = store.claim(job_id, "w", 30).lease.epoch
    w = jobctl.Watch(store, "k")
    w.next()
    store.renew(job_id, epoch, 60)
    assert w.next(timeout=0.5) is None
    w.close()


def test_notices_never_watch_through_a_link(tmp_path: Path) -> None:
    """A link planted at the watched name is refused, not followed to the directory it names."""
    from jobctl.notices import Notices

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "jobs").symlink_to(real)
    with pytest.raises(OSError):
        Notices(str(tmp_path / "jobs"))
    Notices(str(real)).close()
