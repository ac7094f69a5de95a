"""A worker's log directory held open (``LogRoot``): one walk for every attempt, nothing followed, never stale.

The worker opens ``work/.jobctl/logs`` once and makes each attempt's log in
it by name; these pin that the logs still land where ``jobctl logs`` reads
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
from jobctl.runner import LogRoot, log_dir, log_files, log_read, log_size, logs_dir
from jobctl.runner.logs import log_name
from jobctl.worker import Worker


def write_log(root: LogRoot, job_id: str, text: bytes) -> None:
    with root.dir(job_id) as at:
        fd = fsio.open_append(at, log_name(job_id, 1), job_id)
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


@pytest.mark.parametrize("where", ["logs", "log"])
def test_a_planted_link_is_refused_never_followed(store: FileStore, tmp_path: Path, where: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    logs = Path(logs_dir(store, "j-1"))
    if where == "logs":
        logs.parent.mkdir(parents=True)
        logs.symlink_to(outside)
    else:
        logs.mkdir(parents=True)
        (logs / log_name("j-1", 1)).symlink_to(outside / "private.log")
    root = LogRoot(store)
    try:
        with pytest.raises(JobError, match="symbolic link"):
            write_log(root, "j-1", b"out\n")
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
        logs = Path(logs_dir(store, "a-1"))
        shutil.rmtree(logs)
        logs.symlink_to(outside)
        with pytest.raises(JobError, match="symbolic link"):
            root.dir("b-2")
    finally:
        root.close()
    assert os.listdir(outside) == []


def test_a_directory_moved_away_and_linked_back_is_not_written_through(store: FileStore, tmp_path: Path) -> None:
    """The directory held is still ``logs``, but reached through a link now: walked to again, and refused."""
    root = LogRoot(store)
    try:
        write_log(root, "a-1", b"first\n")
        jobctl_dir = Path(logs_dir(store, "a-1")).parent
        moved = tmp_path / "moved"
        jobctl_dir.rename(moved)
        jobctl_dir.symlink_to(moved)
        with pytest.raises(JobError, match="symbolic link"):
            root.dir("b-2")
    finally:
        root.close()
    assert not (moved / "logs" / log_name("b-2", 1)).exists()


@pytest.mark.parametrize("how", ["removed", "moved"])
def test_a_logs_directory_gone_meanwhile_is_walked_to_again(store: FileStore, tmp_path: Path, how: str) -> None:
    root = LogRoot(store)
    try:
        write_log(root, "a-1", b"first\n")
        logs = Path(logs_dir(store, "a-1"))
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


def test_a_worker_makes_no_directory_a_job(store: FileStore) -> None:
    """Each attempt's log is a file in ``logs/`` named by its job: no directory (an inode, a block) a job."""
    ids = [store.submit(Record(kind="shell", spec={"argv": ["sh", "-c", "echo ran"]})) for _ in range(3)]
    assert Worker(store, poll_interval=0.05).run("drain")["complete"] == 3
    logs = Path(logs_dir(store, ids[0]))
    assert sorted(p.name for p in logs.iterdir()) == sorted(log_name(job_id, 1) for job_id in ids)
    assert all(p.is_file() for p in logs.iterdir())


def test_logs_of_the_older_layout_are_still_read(store: FileStore) -> None:
    """A store written by a version that kept a directory a job: its logs are listed, read and sized."""
    retry = {"jobctl.run/retry@1": {"intervals": [0], "failures": 1}}  # attempt 2 runs: its log is in logs/
    job_id = store.submit(Record(kind="shell", spec={"argv": ["true"]}, extensions=retry))
    old = Path(log_dir(store, job_id))
    old.mkdir(parents=True)
    (old / "attempt-1.log").write_bytes(b"first, the old way\n")
    (old / "attempt-x.log").write_bytes(b"not a log of an attempt\n")
    (Path(logs_dir(store, job_id)) / log_name(job_id, 2)).write_bytes(b"second\n")
    assert log_files(store, job_id) == [
        (1, str(old / "attempt-1.log")),
        (2, os.path.join(logs_dir(store, job_id), log_name(job_id, 2))),
    ]
    assert log_read(store, job_id, 1, 7) == b"the old way\n"
    assert (log_size(store, job_id, 1), log_size(store, job_id, 2), log_size(store, job_id, 3)) == (19, 7, None)


def test_every_log_of_a_job_is_listed_past_a_missing_one_and_past_the_record(store: FileStore) -> None:
    """Found by name: up to the attempt the record names (a gap passed over), and on while there are more."""
    job_id = store.submit(
        Record(
            kind="shell",
            spec={"argv": ["true"]},
            extensions={"jobctl.run/retry@1": {"intervals": [0, 0, 0], "failures": 2}},
        )
    )
    logs = Path(logs_dir(store, job_id))
    logs.mkdir(parents=True)
    for attempt in (1, 3, 4):  # attempt 2 left no log; 4 is under way beyond the record read
        (logs / log_name(job_id, attempt)).write_bytes(b"x")
    (logs / log_name(job_id + "x", 1)).write_bytes(b"another job's")
    assert [n for n, _ in log_files(store, job_id)] == [1, 3, 4]


def test_a_job_of_many_attempts_has_its_logs_found_by_reading_the_directory(store: FileStore) -> None:
    from jobctl.runner.logs import PROBED

    many = PROBED + 6
    job_id = store.submit(
        Record(
            kind="shell",
            spec={"argv": ["true"]},
            extensions={"jobctl.run/retry@1": {"intervals": [0] * (many + 1), "failures": many}},
        )
    )
    logs = Path(logs_dir(store, job_id))
    logs.mkdir(parents=True)
    for attempt in (1, 2, many + 1, many + 3):
        (logs / log_name(job_id, attempt)).write_bytes(b"x")
    (logs / f"{job_id}.attempt-5.9.result").write_bytes(b"{}")
    (logs / log_name(job_id + "x", 7)).write_bytes(b"another job's")
    assert [n for n, _ in log_files(store, job_id)] == [1, 2, many + 1, many + 3]
