"""A worker's log directory held open (``LogRoot``): one walk for every attempt, nothing followed, never stale.

The worker opens ``work/.jobctl/logs`` once and each attempt's directory
below it; these pin that the logs still land where ``jobctl logs`` reads
them, that a planted link is refused as the walk from the root refuses it,
and that a ``logs`` directory removed or moved meanwhile is walked to again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from jobctl import FileStore, Record, fsio
from jobctl.errors import JobError
from jobctl.runner import LogRoot, log_dir, log_read
from jobctl.worker import Worker


def write_log(root: LogRoot, job_id: str, text: bytes) -> None:
    with root.job_dir(job_id) as at:
        fd = fsio.open_append(at, "attempt-1.log", job_id)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)


def test_each_job_directory_is_where_the_readers_look(store: FileStore) -> None:
    root = LogRoot(store)
    try:
        for job_id in ("a-1", "b-2"):
            write_log(root, job_id, f"out of {job_id}\n".encode())
        for job_id in ("a-1", "b-2"):
            assert log_read(store, job_id, 1) == f"out of {job_id}\n".encode()
    finally:
        root.close()


@pytest.mark.parametrize("where", ["logs", "job"])
def test_a_planted_link_is_refused_never_followed(store: FileStore, tmp_path: Path, where: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    logs = Path(log_dir(store, "j-1")).parent
    if where == "logs":
        logs.parent.mkdir(parents=True)
        logs.symlink_to(outside)
    else:
        logs.mkdir(parents=True)
        (logs / "j-1").symlink_to(outside)
    root = LogRoot(store)
    try:
        with pytest.raises(JobError, match="symbolic link"):
            root.job_dir("j-1")
    finally:
        root.close()
    assert os.listdir(outside) == []


def test_a_link_planted_after_the_first_walk_is_refused(store: FileStore, tmp_path: Path) -> None:
    """The directory held is checked at each use: a link swapped in for ``logs`` is walked to, and refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = LogRoot(store)
    try:
        write_log(root, "a-1", b"first\n")
        logs = Path(log_dir(store, "a-1")).parent
        shutil.rmtree(logs)
        logs.symlink_to(outside)
        with pytest.raises(JobError, match="symbolic link"):
            root.job_dir("b-2")
    finally:
        root.close()
    assert os.listdir(outside) == []


def test_a_directory_moved_away_and_linked_back_is_not_written_through(store: FileStore, tmp_path: Path) -> None:
    """The directory held is still ``logs``, but reached through a link now: walked to again, and refused."""
    root = LogRoot(store)
    try:
        write_log(root, "a-1", b"first\n")
        jobctl_dir = Path(log_dir(store, "a-1")).parent.parent
        moved = tmp_path / "moved"
        jobctl_dir.rename(moved)
        jobctl_dir.symlink_to(moved)
        with pytest.raises(JobError, match="symbolic link"):
            root.job_dir("b-2")
    finally:
        root.close()
    assert not (moved / "logs" / "b-2").exists()


@pytest.mark.parametrize("how", ["removed", "moved"])
def test_a_logs_directory_gone_meanwhile_is_walked_to_again(store: FileStore, tmp_path: Path, how: str) -> None:
    root = LogRoot(store)
    try:
        write_log(root, "a-1", b"first\n")
        logs = Path(log_dir(store, "a-1")).parent
        if how == "removed":
            shutil.rmtree(logs)
        else:
            logs.rename(tmp_path / "logs.old")
            logs.mkdir()
        write_log(root, "b-2", b"second\n")
        assert log_read(store, "b-2", 1) == b"second\n"
    finally:
        root.close()


def test_a_worker_walks_to_the_logs_once_for_all_its_jobs(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    walks: list[tuple[str, ...]] = []
    real = fsio.open_dir

    def counted(root: str, *parts: str, **kw: bool) -> fsio.Dir:
        if "logs" in parts:
            walks.append(parts)
        return real(root, *parts, **kw)

    monkeypatch.setattr(fsio, "open_dir", counted)
    ids = [store.submit(Record(kind="shell", spec={"argv": ["sh", "-c", "echo ran"]})) for _ in range(3)]
    summary = Worker(store, poll_interval=0.05).run("drain")
    assert summary["complete"] == 3
    assert walks == [("work", ".jobctl", "logs")]
    for job_id in ids:
        log = log_read(store, job_id, 1)
        assert log is not None and b"ran\n" in log
