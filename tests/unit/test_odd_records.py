"""One bad name in ``jobs/`` never stops the store; a full disk changes nothing [issue 11: 8-11, 16].

Whatever sits at a record's name -- a link, a FIFO (even one swapped in during
a scan), a directory, a sparse file of gigabytes, a file this reader may not
open -- is that record's refusal, named with its path and why, and every
other record reads as before. A disk that refuses a write leaves the record,
and the store's names, as they were.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import jobctl
from jobctl import FileStore, Invalid, Record, Refused, fsio, lock
from jobctl.errors import WriteFailed


def submit(store: FileStore, job_id: str) -> str:
    return store.submit(Record(id=job_id, kind="test", spec={"n": 1}))


def unreadable(listing: jobctl.Listing) -> dict[str, tuple[type, str]]:
    return {job_id: (type(exc), str(exc)) for job_id, exc in listing.unreadable}


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "store")
    for job_id in ("a-1", "c-3"):
        submit(store, job_id)
    return store


def jobs(store: FileStore) -> Path:
    return Path(store.jobs_dir)


@pytest.mark.timeout(10)
def test_a_fifo_at_a_record_name_is_named_and_nothing_hangs(store: FileStore) -> None:
    os.mkfifo(jobs(store) / "b-2.json")
    listing = store.list()
    assert [r.id for r in listing] == ["a-1", "c-3"]
    ((cls, message),) = unreadable(listing).values()
    assert cls is Invalid and f"{store.jobs_dir}/b-2.json is a FIFO" in message
    assert [r.id for r in store.orphans()] == ["a-1", "c-3"]
    with pytest.raises(Invalid, match=r"b-2\.json is a FIFO, not a record"):
        store.load("b-2")
    with pytest.raises(Invalid, match="is a FIFO"):
        store.claim("b-2", "me", 30)
    store.claim("a-1", "me", 30)  # the others are untouched


@pytest.mark.timeout(10)
def test_a_fifo_swapped_in_during_a_scan_is_named(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The names are read first; c-3 becomes a FIFO before its turn comes."""
    real = lock.read
    swapped = []

    def read(at: fsio.Dir, name: str, job_id: str = "") -> bytes | None:
        if name == "c-3.json" and not swapped:
            os.unlink(jobs(store) / name)
            os.mkfifo(jobs(store) / name)
            swapped.append(name)
        return real(at, name, job_id)

    monkeypatch.setattr(lock, "read", read)
    listing = store.list()
    assert swapped == ["c-3.json"]
    assert [r.id for r in listing] == ["a-1"]
    assert "c-3.json is a FIFO" in unreadable(listing)["c-3"][1]


def test_a_directory_at_a_record_name_is_invalid_with_its_path(store: FileStore) -> None:
    (jobs(store) / "d-4.json").mkdir()
    assert unreadable(store.list()) == {
        "d-4": (Invalid, f"{store.jobs_dir}/d-4.json is a directory, not a record (a regular file)")
    }
    with pytest.raises(Invalid, match=r"d-4\.json is a directory"):
        store.load("d-4")


def test_a_link_at_a_record_name_is_not_followed(store: FileStore, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_bytes(jobs(store).joinpath("a-1.json").read_bytes().replace(b'"a-1"', b'"e-5"'))
    os.symlink(secret, jobs(store) / "e-5.json")
    listing = store.list()
    assert [r.id for r in listing] == ["a-1", "c-3"]
    assert "e-5.json is a symbolic link, not a record; jobctl does not follow links" in unreadable(listing)["e-5"][1]
    with pytest.raises(Invalid, match="symbolic link"):
        store.load("e-5")


@pytest.mark.timeout(10)
def test_a_huge_sparse_file_is_refused_unread(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    with open(jobs(store) / "b-2.json", "wb") as fh:
        fh.truncate(3 << 30)  # 3 GB of nothing: instant, and a reader that tried would take gigabytes
    reads: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", counting_read)
    listing = store.list()
    assert [r.id for r in listing] == ["a-1", "c-3"]
    assert unreadable(listing)["b-2"][1] == (
        f"{store.jobs_dir}/b-2.json is {3 << 30} bytes, over the {64 << 20}-byte limit on a record "
        "(JOBCTL_MAX_RECORD_BYTES)"
    )
    assert len(reads) == 2  # one read call for each legitimate record, none for the big one


def test_the_record_size_limit_is_configurable(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    size = len(jobs(store).joinpath("a-1.json").read_bytes())
    monkeypatch.setenv("JOBCTL_MAX_RECORD_BYTES", str(size))
    assert store.load("a-1").id == "a-1"
    monkeypatch.setenv("JOBCTL_MAX_RECORD_BYTES", str(size - 1))
    with pytest.raises(Invalid, match=f"is {size} bytes, over the {size - 1}-byte limit"):
        store.load("a-1")
    for bad in ("0", "-5", "lots", "1e9"):
        monkeypatch.setenv("JOBCTL_MAX_RECORD_BYTES", bad)
        with pytest.raises(Invalid, match="JOBCTL_MAX_RECORD_BYTES must be a whole number of bytes"):
            store.load("a-1")


def test_a_record_the_reader_may_not_open_is_named(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault-injecting open: EACCES for c-3, as for a mode 000 record of another user (see also
    tests/integration/test_hostile_store.py, which does it for real as an unprivileged user)."""
    real_open = os.open

    def guarded_open(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path == "c-3.json":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", guarded_open)
    listing = store.list()
    assert [r.id for r in listing] == ["a-1"]
    assert unreadable(listing) == {"c-3": (Refused, f"cannot read {store.jobs_dir}/c-3.json: Permission denied")}
    assert [r.id for r in store.orphans()] == ["a-1"]


# -- disk full -------------------------------------------------------------------------------


def _fail_staging(monkeypatch: pytest.MonkeyPatch, code: int) -> list[str]:
    """os.write raises ``code`` on a staging temporary (and only there); returns the temps hit."""
    real_write = os.write
    hit: list[str] = []

    def write(fd: int, data: bytes) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.endswith(".tmp"):
            hit.append(target)
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return hit


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO])
def test_a_failed_submit_changes_nothing_and_leaves_no_lock(
    store: FileStore, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    before = sorted(os.listdir(store.jobs_dir))
    hit = _fail_staging(monkeypatch, code)
    with pytest.raises(WriteFailed) as caught:
        store.submit(Record(id="n-9", kind="test", spec={}))
    assert hit, "the fault was never injected"
    exc = caught.value
    assert exc.job_id == "n-9" and exc.exit_code == 14 and exc.verdict == "refused"
    assert str(exc) == f"job n-9: cannot write {store.jobs_dir}/n-9.json: {os.strerror(code)}; nothing was changed"
    assert sorted(os.listdir(store.jobs_dir)) == before  # no record, no temporary, no lock


def test_a_failed_update_keeps_the_record_and_its_lock(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = store.claim("a-1", "me", 30)
    path = Path(store.path("a-1"))
    data = path.read_bytes()
    lock_inode = os.stat(str(path) + ".lock").st_ino
    before = sorted(os.listdir(store.jobs_dir))
    _fail_staging(monkeypatch, errno.ENOSPC)
    with pytest.raises(WriteFailed, match=r"job a-1: cannot write .*/a-1\.json: No space left on device; nothing was"):
        store.progress("a-1", rec.lease.epoch, 5)
    assert path.read_bytes() == data
    assert sorted(os.listdir(store.jobs_dir)) == before
    assert os.stat(str(path) + ".lock").st_ino == lock_inode


def test_a_refused_write_to_a_missing_record_leaves_no_lock(store: FileStore) -> None:
    before = sorted(os.listdir(store.jobs_dir))
    with pytest.raises(jobctl.NotFound):
        store.claim("z-26", "me", 30)
    assert sorted(os.listdir(store.jobs_dir)) == before


def test_a_locker_that_waited_on_a_dropped_lock_takes_the_new_one(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only lock jobctl removes is a never-born record's: a waiter on it must not keep the old inode."""
    with fsio.opened_dir(store.jobs_dir) as at:
        stale = fsio.open_lock(at, "w-1.json.lock")
        os.unlink(jobs(store) / "w-1.json.lock")  # what a failed submit does, under the flock
        opened: list[int] = []
        real = fsio.open_lock

        def open_lock(at: fsio.Dir, name: str, job_id: str = "") -> int:
            # The first open is the one that raced the unlink: it got the old inode.
            fd = stale if not opened else real(at, name, job_id)
            opened.append(fd)
            return fd

        monkeypatch.setattr(fsio, "open_lock", open_lock)
        with lock._locked(at, "w-1.json") as hold:
            assert len(opened) == 2 and hold.fd == opened[1]
            assert os.fstat(hold.fd).st_ino == os.stat(jobs(store) / "w-1.json.lock").st_ino


def test_doctors_probes_never_write_through_a_link_swapped_in_for_jobs(store: FileStore, tmp_path: Path) -> None:
    # doctor opened the store (jobs/ not followed), then probed jobs/ again by its path, following
    # a link swapped in meanwhile: its probe files were made, and renamed, in the directory linked to.
    from jobctl.cli.upkeep import check_lock, check_rename

    assert check_lock(store.root) == "ok" and check_rename(store.root) == "ok"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    made: list[str] = []
    real_open = os.open

    def watching_open(path: str, flags: int, *args: object, **kwargs: object) -> int:
        fd = real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]
        if flags & os.O_CREAT and os.path.samestat(os.fstat(kwargs["dir_fd"]), os.stat(elsewhere)):  # type: ignore[arg-type]
            made.append(path)
        return fd

    os.rename(store.jobs_dir, tmp_path / "moved")
    os.symlink(elsewhere, store.jobs_dir)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fsio.os, "open", watching_open)
        for check in (check_lock, check_rename):
            verdict = check(store.root)
            assert verdict.startswith("FAILED: ") and "symbolic link" in verdict, verdict
    assert made == [] and list(elsewhere.iterdir()) == []
