"""jobctl.fsio: the one place a store path is opened; links and odd files refused with their path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobctl import Invalid, fsio
from jobctl.errors import JobError


def test_open_dir_follows_the_root_but_no_part_below_it(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "jobs").mkdir(parents=True)
    (tmp_path / "root-link").symlink_to(real)  # the root a user names may be a link
    with fsio.opened_dir(str(tmp_path / "root-link"), "jobs") as at:
        assert os.path.samefile(f"/proc/self/fd/{at.fd}", real / "jobs")
    (real / "work").symlink_to(real / "jobs")
    with pytest.raises(Invalid, match=r"/work is a symbolic link, not a directory; jobctl does not follow links"):
        fsio.open_dir(str(real), "work")
    (real / "file").write_text("")
    with pytest.raises(Invalid, match=r"/file is a regular file, not a directory"):
        fsio.open_dir(str(real), "file", create=True)
    with pytest.raises(FileNotFoundError):
        fsio.open_dir(str(real), "missing")
    fsio.open_dir(str(real), "a", "b", create=True).close()
    assert (real / "a" / "b").is_dir()


def test_a_log_with_a_second_name_is_not_appended_to(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(b"keep\n")
    os.link(elsewhere, tmp_path / "attempt-1.log")
    with fsio.opened_dir(str(tmp_path)) as at:
        with pytest.raises(Invalid, match=r"attempt-1\.log has 2 names \(a hard link\)"):
            fsio.open_append(at, "attempt-1.log")
        fd = fsio.open_append(at, "attempt-2.log")
        os.close(fd)
    assert elsewhere.read_bytes() == b"keep\n"
    assert (tmp_path / "attempt-2.log").stat().st_mode & 0o777 == 0o600


def test_a_lock_link_is_refused_and_its_target_never_made(tmp_path: Path) -> None:
    target = tmp_path / "target"
    (tmp_path / "r.json.lock").symlink_to(target)
    with fsio.opened_dir(str(tmp_path)) as at:
        with pytest.raises(Invalid, match=r"r\.json\.lock is a symbolic link, not a lock"):
            fsio.open_lock(at, "r.json.lock")
        os.mkfifo(tmp_path / "f.json.lock")
        with pytest.raises(Invalid, match=r"f\.json\.lock is a FIFO, not a lock"):
            fsio.open_lock(at, "f.json.lock")
        os.close(fsio.create_file(at, "new.tmp"))
        with pytest.raises(FileExistsError):
            fsio.create_file(at, "new.tmp")
    assert not target.exists()


def test_remove_tree_removes_links_never_their_targets(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    root = tmp_path / "store"
    job = root / "work" / "job-1"
    (job / "deep").mkdir(parents=True)
    (job / "deep" / "out.txt").write_text("x")
    (job / "to-dir").symlink_to(outside)
    (job / "deep" / "to-file").symlink_to(outside / "precious")
    fsio.remove_below(str(root), str(job))
    assert not job.exists() and (root / "work").is_dir()
    assert (outside / "precious").read_text() == "keep"


def test_remove_below_never_walks_a_linked_parent(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "job-1").mkdir(parents=True)
    root = tmp_path / "store"
    root.mkdir()
    (root / "work").symlink_to(outside)
    with pytest.raises(JobError):
        fsio.remove_below(str(root), str(root / "work" / "job-1"))
    assert (outside / "job-1").is_dir()
    fsio.remove_below(str(root), str(root / "nothing" / "here"))  # missing: nothing to do
    with pytest.raises(ValueError):
        fsio.remove_below(str(root), str(tmp_path / "elsewhere"))
