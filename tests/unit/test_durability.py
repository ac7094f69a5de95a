"""Every committed write is durable: the temporary is fsynced before the rename, the directory after it.

A spy on ``os.fsync``, ``os.replace`` and ``os.unlink`` records what each store
operation asks of the kernel, in order. Without the first fsync a crash can
leave a renamed but empty record; without the second, a rename the caller was
told about can vanish. Removing either fails these tests. [issue 11: 18]
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobctl import FileStore, Record

Event = tuple[str, str]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    events: list[Event] = []
    real_fsync, real_replace, real_unlink = os.fsync, os.replace, os.unlink

    def fsync(fd: int) -> None:
        kind = "fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync"
        events.append((kind, os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str, dst: str, **kw: Any) -> None:
        events.append(("rename", f"{src} -> {dst}"))
        real_replace(src, dst, **kw)

    def unlink(path: str, **kw: Any) -> None:
        events.append(("unlink", path))
        real_unlink(path, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    return events


def check_committed(events: list[Event], jobs_dir: str, what: str) -> int:
    """Each rename: its temporary fsynced before it, the jobs directory fsynced after it."""
    renames = [i for i, (kind, _) in enumerate(events) if kind == "rename"]
    assert renames, f"{what}: no rename at all: {events}"
    for i in renames:
        src = events[i][1].split(" -> ")[0]
        assert ("fsync", os.path.join(jobs_dir, src)) in events[:i], f"{what}: temporary not fsynced: {events}"
        after = [e for e in events[i + 1 :] if e[0] != "rename"]
        assert after[:1] == [("fsync-dir", jobs_dir)], f"{what}: directory not fsynced after the rename: {events}"
    return len(renames)


def test_submit_and_every_update_sync_before_and_after_the_rename(tmp_path: Path, spy: list[Event]) -> None:
    store = FileStore(tmp_path / "store")
    jobs_dir = os.path.realpath(store.jobs_dir)
    job_id = ""

    def submit() -> None:
        nonlocal job_id
        job_id = store.submit(Record(kind="test", spec={"n": 1}))

    epoch = 0

    def claim() -> None:
        nonlocal epoch
        epoch = store.claim(job_id, "me", 30).lease.epoch

    def touch(rec: Record) -> None:
        rec.checkpoint = {"at": 1}

    operations: list[tuple[str, Callable[[], object]]] = [
        ("submit", submit),
        ("claim", claim),
        ("renew", lambda: store.renew(job_id, epoch, 60)),
        ("progress", lambda: store.progress(job_id, epoch, 3, {"cp": 1})),
        ("update", lambda: store.update(job_id, epoch, touch)),
        ("set_intent", lambda: store.set_intent(job_id, "pause", "ops")),
        ("recall", lambda: store.recall(job_id, epoch, "moving", "ops")),
        ("release", lambda: store.release(job_id, epoch)),
        ("claim again", claim),
        ("finish", lambda: store.finish(job_id, epoch, "complete")),
    ]
    for what, call in operations:
        spy.clear()
        call()
        assert check_committed(spy, jobs_dir, what) == 1, (what, spy)

    other = store.submit(Record(kind="test", spec={}))
    spy.clear()
    store.cancel(other, "ops")  # intent, claim and the final write: three commits
    assert check_committed(spy, jobs_dir, "cancel") == 3


def test_sweep_syncs_the_directory_after_removing(tmp_path: Path, spy: list[Event]) -> None:
    store = FileStore(tmp_path / "store")
    jobs_dir = os.path.realpath(store.jobs_dir)
    job_id = store.submit(Record(kind="test", spec={}))
    for unique in ("aa11", "bb22"):
        Path(store.path(job_id) + f".{unique}.tmp").write_bytes(b"{")
    spy.clear()
    assert store.sweep() == 2
    unlinks = [i for i, (kind, _) in enumerate(spy) if kind == "unlink"]
    assert len(unlinks) == 2
    assert ("fsync-dir", jobs_dir) in spy[unlinks[-1] + 1 :], f"the removals were not made durable: {spy}"


def test_the_spy_sees_a_missing_sync(tmp_path: Path, spy: list[Event], monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above is not vacuous: a write path without its directory sync fails it."""
    from jobctl import fsio

    monkeypatch.setattr(fsio, "fsync_dir", lambda at: None)
    store = FileStore(tmp_path / "store")
    store.submit(Record(kind="test", spec={}))
    with pytest.raises(AssertionError, match="directory not fsynced"):
        check_committed(spy, os.path.realpath(store.jobs_dir), "submit")
