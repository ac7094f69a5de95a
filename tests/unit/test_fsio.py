"""jobctl.fsio: the one place a store path is opened; links and odd files refused with their path."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from oddfiles import bind_socket

from jobctl import Invalid, Refused, fsio
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


def _outside_and_job(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A directory outside the store holding ``precious``, the store's root, and its ``work/job-1`` (made)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    root = tmp_path / "store"
    job = root / "work" / "job-1"
    job.mkdir(parents=True)
    return outside, root, job


def test_remove_tree_removes_links_never_their_targets(tmp_path: Path) -> None:
    outside, root, job = _outside_and_job(tmp_path)
    (job / "deep").mkdir()
    (job / "deep" / "out.txt").write_text("x")
    (job / "to-dir").symlink_to(outside)
    (job / "deep" / "to-file").symlink_to(outside / "precious")
    fsio.remove_below(str(root), str(job))
    assert not job.exists() and (root / "work").is_dir()
    assert (outside / "precious").read_text() == "keep"


def test_remove_tree_removes_a_tree_of_any_depth_holding_few_descriptors(tmp_path: Path) -> None:
    # A tree deeper than Python's recursion limit (planted in a store, or made by a job): gc removed
    # it with a RecursionError traceback, and held one descriptor a level.
    outside, root, job = _outside_and_job(tmp_path)
    depth = sys.getrecursionlimit() + 200
    here = os.open(job, os.O_RDONLY)
    try:
        for _ in range(depth):  # by descriptor: the path soon outgrows PATH_MAX
            os.mkdir("d", dir_fd=here)
            os.mkdir("e", dir_fd=here)
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=here))
            os.symlink(str(outside), "l", dir_fd=here)
            below = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = below
    finally:
        os.close(here)
    opened = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    most = [0]
    real_open = os.open

    def counting_open(*args: object, **kwargs: object) -> int:
        fd = real_open(*args, **kwargs)  # type: ignore[arg-type]
        if opened is not None:
            most[0] = max(most[0], len(os.listdir("/proc/self/fd")) - opened)
        return fd

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(fsio.os, "open", counting_open)
            fsio.remove_below(str(root), str(job))
    finally:
        subprocess.run(["rm", "-rf", str(job)], check=False)  # what is left: pytest's own clean-up recurses too
    assert not job.exists() and (root / "work").is_dir()
    assert (outside / "precious").read_text() == "keep"
    if opened is not None:
        assert most[0] <= fsio.TREE_HELD + 8


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


@pytest.mark.parametrize("bad", ["0", "-5", "lots", "1e9", "²", "٣", "1²"])
def test_a_record_size_limit_that_is_no_whole_number_is_invalid_naming_it(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    """Only ASCII digits: "²".isdigit() is true, and int("²") would raise ValueError (a traceback)."""
    monkeypatch.setenv(fsio.MAX_RECORD_ENV, bad)
    with pytest.raises(
        Invalid, match=f"^JOBCTL_MAX_RECORD_BYTES must be a whole number of bytes of at least 1, not '{bad}'$"
    ):
        fsio.max_record_bytes()
    monkeypatch.setenv(fsio.MAX_RECORD_ENV, " 12 ")
    assert fsio.max_record_bytes() == 12


@pytest.mark.parametrize("kind", ["directory", "socket", "FIFO"])
def test_an_odd_file_at_a_lock_or_record_name_is_invalid_naming_what_is_there(tmp_path: Path, kind: str) -> None:
    """A directory (EISDIR) or a socket (ENXIO) fails the open itself: named as an odd file, not 'cannot create'."""
    for name in ("r.json.lock", "r.json", "attempt-1.log"):
        path = tmp_path / name
        if kind == "directory":
            path.mkdir()
        elif kind == "socket":
            bind_socket(path)
        else:
            os.mkfifo(path)
    with fsio.opened_dir(str(tmp_path)) as at:
        with pytest.raises(Invalid, match=rf"^{tmp_path}/r\.json\.lock is a {kind}, not a lock \(a regular file\)$"):
            fsio.open_lock(at, "r.json.lock")
        with pytest.raises(Invalid, match=rf"^{tmp_path}/r\.json is a {kind}, not a record \(a regular file\)$"):
            fsio.read_file(at, "r.json")
        with pytest.raises(Invalid, match=rf"^{tmp_path}/attempt-1\.log is a {kind}, not a log \(a regular file\)$"):
            fsio.open_append(at, "attempt-1.log")
        with pytest.raises(Invalid, match=rf"^{tmp_path}/attempt-1\.log is a {kind}, not a log \(a regular file\)$"):
            fsio.open_read(at, "attempt-1.log")


@pytest.mark.parametrize(
    "kind", ["record", "empty", "gone", "link", "directory", "socket", "FIFO", "over the limit", "large", "unreadable"]
)
def test_read_plain_reads_what_read_file_stat_reads_and_hands_back_everything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The cold scan's cheap read: the same bytes and identity for a record, True whenever read_file_stat refuses.

    Gone is False (read_file_stat's None); a link, an odd file, a file over
    the limit, one larger than one read and one whose read fails are True:
    the caller reads them with read_file_stat, which says what they are.
    """
    path = tmp_path / "r.json"
    if kind in ("record", "over the limit", "unreadable"):
        path.write_bytes(b'{"id": "r"}\n')
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "link":
        os.symlink(tmp_path / "elsewhere.json", path)
        (tmp_path / "elsewhere.json").write_bytes(b"{}")
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        bind_socket(path)
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "large":
        path.write_bytes(b" " * (fsio._CHUNK + 1))
    limit = 5 if kind == "over the limit" else fsio.DEFAULT_MAX_RECORD_BYTES
    if kind == "unreadable":
        real_read = os.read
        monkeypatch.setattr(os, "read", lambda fd, n: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with fsio.opened_dir(str(tmp_path)) as at:
        got = fsio.read_plain(at.fd, "r.json", limit)
        try:
            slow = fsio.read_file_stat(at, "r.json", "r", limit)
        except JobError:
            assert got is True, kind
            return
        finally:
            if kind == "unreadable":
                monkeypatch.setattr(os, "read", real_read)
    if kind == "large":  # read whole by read_file_stat in chunks; handed back by the one-read path
        assert slow is not None and got is True
        return
    if slow is None:
        assert got is False
        return
    assert got not in (True, False) and not isinstance(got, bool)
    data, st = got
    assert data == slow[0] and (st.st_ino, st.st_size, st.st_mtime_ns) == (
        slow[1].st_ino, slow[1].st_size, slow[1].st_mtime_ns
    )  # fmt: skip
    assert kind in ("record", "empty")


def test_a_refusal_of_a_regular_file_still_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what is not a regular file is named odd: EACCES on a record stays 'refused ... Permission denied'."""
    (tmp_path / "r.json").write_text("{}")
    real_open = os.open

    def denying(name: Any, *args: Any, **kwargs: Any) -> int:
        if name == "r.json":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(name, *args, **kwargs)

    with fsio.opened_dir(str(tmp_path)) as at:
        monkeypatch.setattr(os, "open", denying)
        with pytest.raises(Refused, match=rf"^cannot read {tmp_path}/r\.json: Permission denied$"):
            fsio.read_file(at, "r.json")
        with pytest.raises(Refused, match=rf"^cannot create {tmp_path}/r\.json: Permission denied$"):
            fsio.open_lock(at, "r.json")


def test_a_lock_is_opened_neither_waiting_nor_taking_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """O_RDWR opens a device or FIFO planted at a lock before fstat can refuse it: O_NONBLOCK so it is not
    waited on, O_NOCTTY so a terminal there does not become the controlling terminal of a session leader
    (a worker under setsid). A real terminal cannot be planted here (a pty opens only through devpts)."""
    flags: list[int] = []
    real_open = os.open

    def recording(name: Any, how: int, *args: Any, **kwargs: Any) -> int:
        if name == "null.json.lock":
            flags.append(how)
        return real_open(name, how, *args, **kwargs)

    if os.geteuid() == 0:  # a device at the lock's name, refused naming it
        os.mknod(tmp_path / "null.json.lock", stat.S_IFCHR | 0o600, os.stat("/dev/null").st_rdev)
    monkeypatch.setattr(os, "open", recording)
    with fsio.opened_dir(str(tmp_path)) as at:
        if os.geteuid() == 0:
            with pytest.raises(Invalid, match=r"null\.json\.lock is a device, not a lock \(a regular file\)$"):
                fsio.open_lock(at, "null.json.lock")
        else:
            os.close(fsio.open_lock(at, "null.json.lock"))
    wanted = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    assert flags and all(how & wanted == wanted for how in flags)


def test_threads_reading_one_kept_directory_each_get_every_name(tmp_path: Path) -> None:
    """One descriptor held for a directory (a store's ``jobs/``), read by several threads at once.

    ``os.scandir`` and ``os.listdir`` of a descriptor read through a ``dup`` of it, which shares the
    directory's read position, and rewind it first: read straight through that descriptor, the
    threads each missed what another read (a threaded ``jobctl serve`` listed stores short).
    """
    import gc
    import threading

    made = {f"{n:05}.json" for n in range(3000)}  # many getdents calls a read
    for name in made:
        (tmp_path / name).write_bytes(b"")
    gc.collect()  # what earlier tests left for the collector holds descriptors of its own
    before = len(os.listdir("/proc/self/fd"))
    at = fsio.open_dir(str(tmp_path), kept=True)
    short: list[int] = []
    start = threading.Barrier(6)

    def read(n: int) -> None:
        start.wait()
        for _ in range(15):
            got = set(fsio.names(at.fd)) if n % 2 else {entry.name for entry in fsio.scan(at)}
            if got != made:
                short.append(len(got))

    threads = [threading.Thread(target=read, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    at.close()
    assert short == []
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before  # each read's own descriptor closed after it
