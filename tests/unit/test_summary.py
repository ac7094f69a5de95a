"""The summary cache (jobctl.summary) behind FileStore.list_open: faster, never different."""

from __future__ import annotations

import marshal
import os
import random
import stat
import sys
import time
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import jobctl
from jobctl import FileStore, Record, fanout, fsio, schedule, summary
from jobctl.record import decode, encode
from jobctl.store import file as file_store
from jobctl.store import file_listing


def answer(listing: jobctl.store.OpenListing) -> tuple[list[str], dict[str, str], list[str]]:
    return [r.id for r in listing], dict(listing.states), [job_id for job_id, _ in listing.unreadable]


def reference(store: FileStore) -> tuple[list[str], dict[str, str], list[str]]:
    """What list_open must say, from a whole list()."""
    whole = store.list()
    return (
        [r.id for r in whole if not r.terminal],
        {r.id: r.state for r in whole},
        [job_id for job_id, _ in whole.unreadable],
    )


def finish(store: FileStore, job_id: str, state: str = "complete") -> None:
    rec = store.claim(job_id, "w", 30)
    store.finish(job_id, rec.lease.epoch, state)


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the id of every record the file store decodes, in order."""
    decoded: list[str] = []

    def counting(data: bytes, job_id: str = "", *, named: bool = False) -> Record:
        decoded.append(job_id)
        return decode(data, job_id, named=named)

    # The store's own reads, and its listings': both call jobctl.record's decode through the package.
    monkeypatch.setattr(file_store.record, "decode", counting)
    return decoded


def cached_store(tmp_path: Path, finished: int) -> tuple[FileStore, tuple[list[str], dict[str, str], list[str]]]:
    """A store of ``finished`` finished records and one pending, its cache written; and what list_open must say."""
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    for _ in range(finished):
        finish(store, store.submit(Record(kind="k", spec={})))
    store.submit(Record(kind="k", spec={}))
    expected = reference(store)
    assert answer(store.list_open()) == expected
    return store, expected


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scans believe they start 10 s from now: nothing written by the test looks racy."""
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + 10 * 10**9)


def cache_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if not p.name.endswith(".tmp")) if cache.exists() else []


def test_list_open_answers_as_a_whole_listing_does(tmp_path: Path, later: None) -> None:
    cache = tmp_path / "cache"
    store = FileStore(tmp_path / "root", summaries=str(cache))
    ids = [store.submit(Record(kind="k", spec={})) for _ in range(8)]
    finish(store, ids[0])
    finish(store, ids[1], "failed")
    finish(store, ids[2], "cancelled")
    (Path(store.jobs_dir) / "1-broken.json").write_bytes(b"{not json")
    expected = reference(store)
    assert answer(FileStore(store.root, summaries=False).list_open()) == expected  # no cache
    assert answer(store.list_open()) == expected  # cold: writes the cache
    assert [p.suffix for p in cache_files(cache)] == [".open"]
    assert answer(store.list_open()) == expected  # warm, directory unchanged
    assert store.orphans()[0].id == min(ids[3:])  # ids minted in one millisecond sort by their random part


def test_a_warm_scan_decodes_no_finished_record(tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    ids = [store.submit(Record(kind="k", spec={})) for _ in range(6)]
    for job_id in ids[:5]:
        finish(store, job_id)
    store.list_open()
    decoded = count_decodes(monkeypatch)
    store.list_open()  # directory unchanged: not even a stat of the finished ones
    assert decoded == [ids[5]]
    os.utime(store.jobs_dir)  # the directory looks changed: every file is statted, none decoded again
    decoded.clear()
    got = answer(store.list_open())
    assert decoded == [ids[5]]
    assert got == reference(store)


def test_an_unchanged_directory_is_answered_without_listing_it(
    tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    ids = [store.submit(Record(kind="k", spec={})) for _ in range(3)]
    finish(store, ids[0])
    expected = answer(store.list_open())

    def refuse(path: object) -> object:
        raise AssertionError("the directory listed on the fast path")

    def refuse_listing() -> None:
        monkeypatch.setattr(file_store.os, "scandir", refuse)
        monkeypatch.setattr(file_store.os, "listdir", refuse)

    refuse_listing()
    assert answer(store.list_open()) == expected
    monkeypatch.undo()
    store.submit(Record(kind="k", spec={}))  # the directory changed: the scan must look
    refuse_listing()
    with pytest.raises(AssertionError, match="the directory listed"):
        store.list_open()


def test_a_racy_entry_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file changed within RACY_NS of the scan is not remembered, nor is the directory (git's racy index)."""
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    job_id = store.submit(Record(kind="k", spec={}))
    finish(store, job_id)
    changed = os.stat(store.path(job_id)).st_ctime_ns
    monkeypatch.setattr(time, "time_ns", lambda: changed + 1_000_000)  # the same tick, near enough
    store.list_open()
    cache = summary.Summaries.load(str(tmp_path / "cache"), store.jobs_dir, os.stat(store.jobs_dir))
    assert cache.others == [job_id] and cache.dir_id is None
    # Past the racy window of the record and of jobs/ (whose rename came after the record's temporary
    # was written and fsynced: on a busy machine, milliseconds later).
    jobs = os.stat(store.jobs_dir)
    settled = max(changed, jobs.st_mtime_ns, jobs.st_ctime_ns)
    monkeypatch.setattr(time, "time_ns", lambda: settled + summary.RACY_NS + 1)
    store.list_open()
    cache = summary.Summaries.load(str(tmp_path / "cache"), store.jobs_dir, os.stat(store.jobs_dir))
    assert cache.others == [] and cache.states() == {job_id: "complete"} and cache.dir_id is not None


def test_the_cache_is_private_and_written_atomically(tmp_path: Path, later: None) -> None:
    cache = tmp_path / "cache" / "jobctl" / "summaries"
    store = FileStore(tmp_path / "root", summaries=str(cache))
    finish(store, store.submit(Record(kind="k", spec={})))
    store.list_open()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    files = cache_files(cache)
    assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


def read_cache(path: Path) -> tuple[list[object], list[object]]:
    """A ``.open`` file's head and rows (version 5: the head's length, the head, the rows)."""
    data = path.read_bytes()
    end = 8 + int.from_bytes(data[:8], "little")
    return list(marshal.loads(data[8:end])), list(marshal.loads(data[end:]))


def write_cache(path: Path, head: list[object], rows: list[object]) -> None:
    data = marshal.dumps(tuple(head))
    path.write_bytes(len(data).to_bytes(8, "little") + data + marshal.dumps(tuple(rows)))


def poison(store: FileStore, cache: Path, state: str) -> None:
    """A cache that says every finished record is ``state``."""
    path = next(p for p in cache_files(cache) if p.suffix == ".open")
    head, rows = read_cache(path)
    rows[1] = tuple(state for _ in rows[1])  # type: ignore[attr-defined]  # the table the rows' codes name
    write_cache(path, head, rows)


@pytest.mark.parametrize("how", ["group-writable", "a link", "another owner", "a directory open to others"])
def test_a_cache_not_ours_alone_is_never_believed(tmp_path: Path, later: None, how: str) -> None:
    cache = tmp_path / "cache"
    store = FileStore(tmp_path / "root", summaries=str(cache))
    job_id = store.submit(Record(kind="k", spec={}))
    finish(store, job_id)
    store.list_open()
    poison(store, cache, "failed")
    assert store.list_open().states[job_id] == "failed"  # the poison works when the file is trusted
    opened = next(p for p in cache_files(cache) if p.suffix == ".open")
    if how == "group-writable":
        opened.chmod(0o660)
    elif how == "a link":
        target = tmp_path / "elsewhere"
        opened.rename(target)
        opened.symlink_to(target)
    elif how == "another owner":
        if os.geteuid() != 0:
            pytest.skip("only root can give a file away")
        os.chown(opened, 4242, -1)
    else:
        cache.chmod(0o777)
    assert answer(store.list_open()) == reference(store)


def test_a_missing_or_unwritable_cache_only_costs_time(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for where in (str(blocker / "cache"), str(tmp_path / "absent" / "cache")):
        store = FileStore(tmp_path / "root", summaries=where)
        finish(store, store.submit(Record(kind="k", spec={})))
        assert answer(store.list_open()) == reference(store)
    corrupt = tmp_path / "corrupt"
    store = FileStore(tmp_path / "root", summaries=str(corrupt))
    store.list_open()
    for p in cache_files(corrupt):
        p.write_bytes(b"\x00garbage")
    assert answer(store.list_open()) == reference(store)


def finished_and_open(store: FileStore) -> None:
    """Three finished records and two pending ones: both parts of the cache have rows and others."""
    for _ in range(3):
        finish(store, store.submit(Record(kind="k", spec={})))
    for _ in range(2):
        store.submit(Record(kind="k", spec={}))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("part", [".open", ".list"])
def test_a_fifo_at_a_cache_file_is_neither_waited_on_nor_believed(tmp_path: Path, later: None, part: str) -> None:
    """Opened O_NONBLOCK, then refused by fstat: before, the open itself waited for a writer forever."""
    cache = tmp_path / "cache"
    store = FileStore(tmp_path / "root", summaries=str(cache))
    finished_and_open(store)
    expected, whole = reference(store), listed(FileStore(store.root, summaries=False))
    assert listed_briefly(store) == whole  # both parts written
    path = next(p for p in cache_files(cache) if p.suffix == part)
    path.unlink()
    os.mkfifo(path, 0o600)
    assert answer(store.list_open()) == expected
    assert listed_briefly(store) == whole
    assert listed(store) == whole


def xdg_cache(tmp_path: Path) -> Path:
    return tmp_path / "xdg" / "jobctl" / "summaries"


def test_the_directories_below_the_user_cache_directory_are_made_private(tmp_path: Path, later: None) -> None:
    (tmp_path / "real-xdg").mkdir()
    (tmp_path / "xdg").symlink_to(tmp_path / "real-xdg")  # the user cache directory itself is the user's to link
    store = FileStore(tmp_path / "root", summaries=str(xdg_cache(tmp_path)))
    finished_and_open(store)
    store.list_open()
    for made in (tmp_path / "real-xdg" / "jobctl", tmp_path / "real-xdg" / "jobctl" / "summaries"):
        assert stat.S_IMODE(made.lstat().st_mode) == 0o700 and made.is_dir() and not made.is_symlink()
    assert [p.suffix for p in cache_files(xdg_cache(tmp_path))] == [".open"]


@pytest.mark.parametrize("linked", ["jobctl", "summaries"])
def test_a_link_below_the_user_cache_directory_is_never_followed(tmp_path: Path, later: None, linked: str) -> None:
    """Before, makedirs followed a link at jobctl/ and the cache was written (and believed) where it led."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache = xdg_cache(tmp_path)
    if linked == "jobctl":
        cache.parent.parent.mkdir()
        cache.parent.symlink_to(elsewhere)
    else:
        cache.parent.mkdir(parents=True, mode=0o700)
        cache.symlink_to(elsewhere)
    store = FileStore(tmp_path / "root", summaries=str(cache))
    finished_and_open(store)
    whole = listed(FileStore(store.root, summaries=False))
    for _ in range(2):
        assert answer(store.list_open()) == reference(store)
        assert listed_briefly(store) == whole
    assert list(elsewhere.rglob("*")) == []


@pytest.mark.parametrize(
    "how", ["jobctl open to the group", "jobctl of another owner", "jobctl a link", "summaries a link"]
)
def test_a_cache_directory_not_ours_alone_above_the_files_is_never_believed(
    tmp_path: Path, later: None, how: str
) -> None:
    """jobctl/ as well as summaries/ must be ours and written by nobody else; else the cache is not used."""
    cache = xdg_cache(tmp_path)
    store = FileStore(tmp_path / "root", summaries=str(cache))
    job_id = store.submit(Record(kind="k", spec={}))
    finish(store, job_id)
    store.list_open()
    poison(store, cache, "failed")
    top = cache.parent
    top.chmod(0o755)  # as an older jobctl's os.makedirs left it: still ours alone to write
    assert store.list_open().states[job_id] == "failed"  # the poison works when the directories are trusted
    if how == "jobctl open to the group":
        top.chmod(0o775)
    elif how == "jobctl of another owner":
        if os.geteuid() != 0:
            pytest.skip("only root can give a directory away")
        os.chown(top, 4242, -1)
    elif how == "jobctl a link":
        top.rename(tmp_path / "moved")
        top.symlink_to(tmp_path / "moved")
    else:
        cache.rename(tmp_path / "moved")
        cache.symlink_to(tmp_path / "moved")
    assert answer(store.list_open()) == reference(store)
    assert listed_briefly(store) == listed(FileStore(store.root, summaries=False))


def _list_part(cache: Path) -> tuple[Path, list[Any]]:
    """The listing part's path and content; its seal checked."""
    path = next(p for p in cache_files(cache) if p.suffix == ".list")
    data = path.read_bytes()
    assert zlib.crc32(data[4:]) == int.from_bytes(data[:4], "little")
    return path, list(marshal.loads(data[4:]))


def _listed_once(tmp_path: Path) -> tuple[Path, FileStore, tuple[list[tuple[object, ...]], list[str]]]:
    """A store of finished and open records listed once (its listing part written); the whole listing."""
    cache = tmp_path / "cache"
    store = FileStore(tmp_path / "root", summaries=str(cache))
    finished_and_open(store)
    whole = listed(FileStore(store.root, summaries=False))
    assert listed_briefly(store) == whole
    return cache, store, whole


def _sealed(part: list[Any]) -> bytes:
    """``part`` as the writer writes it, its seal made anew: a malformation the seal cannot catch."""
    data = marshal.dumps(tuple(part))
    return zlib.crc32(data).to_bytes(4, "little") + data


def _mangle(how: str, others: list[Any], rows: list[Any], idents: list[Any]) -> None:
    """Make the listing part's ``others``, ``rows`` and ``idents`` (in place) malformed in the way ``how`` names."""
    first = rows[0]
    if how == "an other that is no string":
        others.append(5)
    elif how == "others out of order":
        others.reverse()
    elif how == "an id among the others too":
        others.append(first[0])
        others.sort()
    elif how == "a row twice":
        rows.insert(1, first)
        idents.insert(1, idents[0])
    elif how == "rows out of order":
        rows.reverse()
        idents.reverse()
    elif how == "a row that is a list":
        rows[0] = list(first)
    elif how == "a row too short":
        rows[0] = first[:-1]
    elif how == "an identity that is no string":
        idents[0] = 5
    else:  # a field of another type: "created a string", "expires a string", "done a bool", "kind None", ...
        field, kind = how.split(" a ") if " a " in how else how.split(" ")
        at = summary.Summary._fields.index(field)
        value = {"string": "2030", "bool": True, "None": None, "float": 1.0, "int": 7}[kind]
        rows[0] = (*first[:at], value, *first[at + 1 :])


#: Malformations the shape check itself refuses (the others, the lengths); the rest only the seal can.
SHAPES = {"an other that is no string", "others out of order", "a row that is a list"}


@pytest.mark.parametrize("unchanged", [True, False], ids=["walked", "looked up"])
@pytest.mark.parametrize(
    "how",
    [
        "an other that is no string",
        "others out of order",
        "an id among the others too",
        "a row twice",
        "rows out of order",
        "a row that is a list",
        "a row too short",
        "an identity that is no string",
        "created a string",
        "expires a string",
        "done a bool",
        "epoch a float",
        "kind None",
        "id a int",
        "checkpoint a int",
    ],
)
def test_a_malformed_listing_part_costs_speed_never_an_answer(
    tmp_path: Path, later: None, how: str, unchanged: bool
) -> None:
    """A private but malformed .list is not believed: before, an int among the others or a created
    that was a string made piped ``jobctl list`` raise (AttributeError, TypeError), or a row shown wrongly.

    A part whose shape is wrong (``SHAPES``) is refused by its shape, even sealed; any other damage
    by the seal (the part written again without one, as a change after the writer's leaves it)."""
    cache, store, whole = _listed_once(tmp_path)
    path, part = _list_part(cache)
    _mangle(how, part[3], part[4], part[5])
    # What the shape check refuses is refused sealed; the rest as damage after the writer leaves it: unsealed.
    path.write_bytes(_sealed(part) if how in SHAPES else marshal.dumps(tuple(part)))
    if not unchanged:  # jobs/ changed: each file's identity is compared with the part's (Listed.lookup)
        (Path(store.jobs_dir) / "stray").write_text("")
        (Path(store.jobs_dir) / "stray").unlink()
    assert listed_briefly(store) == whole
    assert listed(store) == whole
    _, written = _list_part(cache)
    assert summary._well_formed(*written[3:])  # what is written again is believed again


@pytest.mark.parametrize("at", [0, 3, 4, 100, -1], ids=["seal", "seal's end", "marshal's start", "a row", "last"])
def test_a_listing_part_with_one_byte_changed_is_not_believed(tmp_path: Path, later: None, at: int) -> None:
    """A sealed part is believed only as written: one byte changed anywhere and it is as absent."""
    cache, store, whole = _listed_once(tmp_path)
    path, _ = _list_part(cache)
    base, real = str(path)[: -len(".list")], str(Path(store.jobs_dir).resolve())
    assert summary.Listed(base, str(cache), real).rows  # believed as written
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    assert summary.Listed(base, str(cache), real).rows == []
    assert listed_briefly(store) == whole
    _list_part(cache)  # written again, sealed


def test_the_default_directory_is_the_user_cache_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import platformdirs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert summary.default_dir() == os.path.join(platformdirs.user_cache_dir("jobctl", appauthor=False), "summaries")


# -- the randomized comparison -------------------------------------------------------------------


def foreign_replace(path: str, data: bytes, keep_mtime: bool) -> None:
    """Another implementation's write: bytes renamed into place, nothing of ours involved."""
    old = os.stat(path).st_mtime_ns if keep_mtime and os.path.exists(path) else None
    tmp = path + ".foreign"
    with open(tmp, "wb") as fh:
        fh.write(data)
    if old is not None:
        os.utime(tmp, ns=(old, old))
    os.replace(tmp, path)


def same_size(rec: Record, state: str, size: int) -> bytes:
    """``rec`` in ``state``, its error padded so the file is ``size`` bytes long when that is possible."""
    rec.state = state
    rec.error = ""
    data = encode(rec)
    if len(data) < size:
        rec.error = "x" * max(0, size - len(data) - len(b'\n  "error": "",'))
        data = encode(rec)
    return data


def listed(store: FileStore) -> tuple[list[tuple[object, ...]], list[str]]:
    """What a whole listing sees: each record as its summary (read or cached), and the unreadable ids."""
    unreadable: list[tuple[str, jobctl.errors.JobError]] = []
    items = [
        tuple(item) if isinstance(item, summary.Summary) else tuple(file_store.summary_of(item))
        for item in store.scan(unreadable)
    ]
    return items, [job_id for job_id, _ in unreadable]


def listed_briefly(store: FileStore) -> tuple[list[tuple[object, ...]], list[str]]:
    """:func:`listed` the way a piped ``jobctl list`` reads: list_open handing over summaries, then scan."""
    taken: dict[str, tuple[summary.Summary, Any]] = {}
    items: dict[str, tuple[object, ...]] = {}

    def keep(item: Any, how: Any) -> None:
        brief = item if isinstance(item, summary.Summary) else file_store.summary_of(item)
        taken[brief.id] = (brief, how)
        items[brief.id] = tuple(brief)

    opened = store.list_open(finished=keep, briefly=True)
    for rec in opened:
        items[rec.id] = tuple(file_store.summary_of(rec))
    unreadable = {job_id for job_id, _ in opened.unreadable}
    scanned: list[tuple[str, jobctl.errors.JobError]] = []
    for item in store.scan(scanned, taken=taken, opened=opened):
        if item.id not in items and item.id not in unreadable:
            items[item.id] = tuple(item) if isinstance(item, summary.Summary) else tuple(file_store.summary_of(item))
    unreadable |= {job_id for job_id, _ in scanned}
    return [items[job_id] for job_id in sorted(items)], sorted(unreadable)


def foreign_edit_in_place(path: str, data: bytes, jobs_dir: str) -> None:
    """Another program's edit in place: same inode, mtime set back; then jobs/ changes (a stray name comes and goes).

    Only the file's ctime shows the edit. Without the stray name the
    directory would look unchanged, and the cache is allowed to miss an
    in-place edit until something in ``jobs/`` changes (docs/reference/cache.md).
    """
    old = os.stat(path).st_mtime_ns
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.utime(path, ns=(old, old))
    stray = os.path.join(jobs_dir, ".stray")
    Path(stray).write_bytes(b"")
    os.unlink(stray)


#: The simulated timestamp tick of the coarse run, and the racy window then: the window must
#: span a tick and the lag of the kernel's coarse clock behind time.time_ns() (a jiffy, <= 10 ms).
TICK_NS = 200_000_000
COARSE_RACY_NS = 250_000_000


def coarse_stat(st: os.stat_result) -> os.stat_result:
    """``st`` as a filesystem with a TICK_NS timestamp granularity would give it."""
    ticks = {f: getattr(st, f) // TICK_NS * TICK_NS for f in ("st_atime_ns", "st_mtime_ns", "st_ctime_ns")}
    return os.stat_result(tuple(st), ticks)


class Entry:
    """A directory entry as the test's os.scandir gives it (timestamps coarse or not)."""

    def __init__(self, entry: os.DirEntry[str], coarse: bool) -> None:
        self._entry, self._coarse, self.name = entry, coarse, entry.name

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        st = self._entry.stat(follow_symlinks=follow_symlinks)
        return coarse_stat(st) if self._coarse else st

    def __getattr__(self, name: str) -> object:
        return getattr(self._entry, name)


class Entries(list[Entry]):
    """What os.scandir returns: iterable, and a context manager."""

    def __enter__(self) -> Entries:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("coarse", "shared"), [(False, False), (True, False), (False, True)], ids=["fine", "coarse-timestamps", "shared"]
)
def test_cached_answers_equal_uncached_ones_under_interleaved_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, coarse: bool, shared: bool
) -> None:
    """Library writes, raw foreign replacements (same size, same mtime too) and edits in place between reads.

    Both list_open and a whole listing (scan) are compared, cached against
    uncached. The racy window is shrunk to 30 ms (still several kernel
    timestamp ticks) and the test sleeps past it now and then, so that
    cached entries and the directory fast paths are really used -- which
    the counters prove. An edit in place keeps the inode, the size and the
    mtime: only the ctime can tell it (one field of the identity left out,
    and this test fails). Now and then the directory lists its entries in
    another order than the cache stored them (as a rename on btrfs, or a
    directory rebuilt, does), so that the cache's look-up of an entry met
    out of order is used too -- the counter proves it.

    ``coarse``: timestamps have a 200 ms tick, for jobs/ and for the record
    files, so a change made within the tick of the one before leaves the
    identity as it was -- git's racy case. The racy rules (a file or a
    directory changed within the window of a scan is not remembered) must
    still make every such change seen; the counter proves that such
    changes happened, and removing either rule makes this test fail.

    ``shared``: every full scan with two records or more to read shares
    them among three processes (jobctl.fanout), as a cold scan of a large
    store does, and so does every check of the cache's rows against the
    files' stats; the counter proves that children did the reading.
    """
    forks = stat_forks = 0
    if shared:
        monkeypatch.setattr(file_listing, "_SHARED_FROM", 2)
        monkeypatch.setattr(summary.scan, "_CHECK_SHARED_FROM", 1)
        monkeypatch.setattr(fanout, "MIN_SHARE", 1)
        monkeypatch.setenv(fanout.PROCESSES_ENV, "3")
        real_fork = fanout._fork

        def fork_counted(*args: Any) -> Any:
            nonlocal forks, stat_forks
            got = real_fork(*args)
            forks += got is not None
            stat_forks += got is not None and args[1].__name__ == "changed"  # a check's stats
            return got

        monkeypatch.setattr(fanout, "_fork", fork_counted)
    racy = COARSE_RACY_NS if coarse else 30_000_000
    monkeypatch.setattr(summary.cachefile, "RACY_NS", racy)
    same_tick = 0
    if coarse:

        def coarse_identity(st: os.stat_result) -> tuple[int, ...]:
            return (st.st_dev, st.st_ino, st.st_mtime_ns // TICK_NS, st.st_ctime_ns // TICK_NS, st.st_nlink, st.st_size)

        monkeypatch.setattr(summary.cachefile, "_dir_identity", coarse_identity)
        real_read = fsio.read_file_stat

        def coarse_read(*args: Any, **kwargs: Any) -> tuple[bytes, os.stat_result] | None:
            got = real_read(*args, **kwargs)
            return None if got is None else (got[0], coarse_stat(got[1]))

        monkeypatch.setattr(fsio, "read_file_stat", coarse_read)
    order = random.Random(77)
    shuffle = False
    real_scandir = os.scandir

    def scandir(path: Any) -> Entries:
        with real_scandir(path) as it:
            entries = Entries(Entry(entry, coarse) for entry in it)
        if shuffle:
            order.shuffle(entries)
        return entries

    real_listdir, real_stat = os.listdir, os.stat

    def listdir(path: Any = ".") -> list[str]:
        names = real_listdir(path)
        if shuffle:
            order.shuffle(names)
        return names

    def stat(path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
        """A stat relative to a directory (jobs/, as the cache's check makes them): coarse when the run is."""
        st = real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        return coarse_stat(st) if coarse and dir_fd is not None else st

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "stat", stat)
    fresh_hits = listed_hits = 0
    real_fresh = summary.Summaries.fresh
    real_listed_fresh = summary.Listed.fresh

    def fresh(self: summary.Summaries, st: os.stat_result) -> bool:
        nonlocal fresh_hits
        got = real_fresh(self, st)
        fresh_hits += got
        return got

    def listed_fresh(self: summary.Listed, st: os.stat_result) -> bool:
        nonlocal listed_hits
        got = real_listed_fresh(self, st)
        listed_hits += got
        return got

    monkeypatch.setattr(summary.Summaries, "fresh", fresh)
    monkeypatch.setattr(summary.Listed, "fresh", listed_fresh)
    jumps = 0
    real_finish = summary.Summaries.finish

    def finish_counted(self: summary.Summaries, st: os.stat_result) -> None:
        nonlocal jumps
        jumps += self._jumps
        real_finish(self, st)

    monkeypatch.setattr(summary.Summaries, "finish", finish_counted)
    decoded = 0
    real_decode = file_store.record.decode

    def counting(data: bytes, job_id: str = "", *, named: bool = False) -> Record:
        nonlocal decoded
        decoded += 1
        return real_decode(data, job_id, named=named)

    # The store's own reads, and its listings': both call jobctl.record's decode through the package.
    monkeypatch.setattr(file_store.record, "decode", counting)
    rng = random.Random(1212)
    cached = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    plain = FileStore(tmp_path / "root", summaries=False)
    ids = [cached.submit(Record(kind="k", spec={"n": n})) for n in range(12)]
    for job_id in ids[:8]:
        finish(cached, job_id, rng.choice(["complete", "failed", "cancelled"]))
    time.sleep(0.05)
    compared = 0
    scanned_files = 0
    decoded_total = always_read = 0
    edits = 0
    for step in range(200):
        op = rng.random()
        # Edits in place favour a few records, so that two fall within one tick now and then.
        job_id = rng.choice(ids[:3] if op >= 0.85 and rng.random() < 0.5 else ids)
        path = cached.path(job_id)
        before_op = os.stat(cached.jobs_dir)
        try:
            if op < 0.12:
                ids.append(cached.submit(Record(kind="k", spec={"step": step})))
            elif op < 0.25:
                finish(cached, job_id, rng.choice(["complete", "failed", "cancelled"]))
            elif op < 0.33:
                rec = cached.load(job_id)
                cached.renew(job_id, rec.lease.epoch, 30)  # allowed on a terminal record [JOB-T6]
            elif op < 0.58 and os.path.exists(path):
                rec = cached.load(job_id)
                size = os.path.getsize(path)
                state = rng.choice(["pending", "running", "complete", "failed", "cancelled"])
                foreign_replace(path, same_size(rec, state, size), keep_mtime=rng.random() < 0.7)
            elif op < 0.62 and os.path.exists(path):
                foreign_replace(path, b'{"broken": ', keep_mtime=False)
            elif op < 0.66 and os.path.exists(path):
                os.unlink(path)
            elif op < 0.7:
                rec = Record(id=f"9{step:012d}-{'f' * 20}", kind="k", spec={}, state="complete")
                rec.created_at = rec.updated_at = cached.now()
                foreign_replace(os.path.join(cached.jobs_dir, rec.id + ".json"), encode(rec), keep_mtime=False)
                ids.append(rec.id)
            elif op < 0.85:
                shuffle = not shuffle
            elif os.path.exists(path):
                rec = cached.load(job_id)
                state = rng.choice(["pending", "complete", "failed", "cancelled"])
                rec.progress.done = rng.randrange(10**6)
                foreign_edit_in_place(path, same_size(rec, state, os.path.getsize(path)), cached.jobs_dir)
                edits += 1
        except jobctl.JobError:
            pass  # refused (terminal, held, broken, gone): the store said no, nothing changed
        after_op = os.stat(cached.jobs_dir)
        if coarse and after_op.st_ctime_ns != before_op.st_ctime_ns:
            same_tick += summary.cachefile._dir_identity(after_op) == summary.cachefile._dir_identity(before_op)
        if rng.random() < (0.1 if coarse else 0.25):
            time.sleep(racy / 1e9 + 0.01)  # past the racy window: what was just written may now be cached
        before = decoded
        got = answer(cached.list_open())
        decoded_total += decoded - before
        scanned_files += len(got[1]) + len(got[2])
        always_read += len(got[0]) + len(got[2])  # the open and the unreadable: read on every call
        assert got == answer(plain.list_open()) == reference(cached), f"step {step}"
        if step % 2:
            assert listed(cached) == listed(plain), f"step {step}"
        else:  # as a piped list reads: summaries handed over by list_open (made by the pieces, when shared)
            assert listed_briefly(cached) == listed(plain), f"step {step}"
        compared += 1
    assert compared == 200
    assert fresh_hits > 0, "the directory fast path was never taken"
    assert listed_hits > 0, "the listing's directory fast path was never taken"
    assert jumps > 0, "no entry was ever met out of the cache's order"
    assert edits > 10, "hardly any edit in place"
    # With a coarse tick the racy window is wide, and how many steps fall inside it depends on how
    # fast this machine runs them: there it is enough that the cache answered some of the time.
    # The open and unreadable records are read on every call; of the finished ones, the cache should
    # answer most. With a coarse tick the racy window is wide, and how many steps fall inside it
    # depends on how fast this machine runs them: there it is enough that it answered some of the time.
    finished_read = (decoded_total - always_read) / (scanned_files - always_read)
    assert finished_read < (0.6 if coarse else 0.35), f"the cache hardly ever answered ({finished_read:.0%} read)"
    if coarse:
        assert same_tick > 0, "no change ever fell within the tick of the one before"
    if shared:
        assert forks > 50, f"the scans were shared {forks} times"
        assert stat_forks > 20, f"the checks' stats were shared {stat_forks} times"


def test_a_worker_board_starts_from_the_cache(tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobctl import schedule
    from jobctl.board import Board

    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    done = [store.submit(Record(kind="k", spec={})) for _ in range(5)]
    for job_id in done:
        finish(store, job_id)
    waiting = store.submit(schedule.plan(Record(kind="k", spec={}), after=[done[0]]))
    store.list_open()  # an earlier command wrote the cache
    decoded = count_decodes(monkeypatch)
    board = Board(store, None, notices=False)
    assert decoded == [waiting]
    assert all(board.states[job_id] == "complete" for job_id in done)
    picked = board.pick(store.now()).record
    assert picked is not None and picked.id == waiting  # its dependency is complete, by the cache's word
    board.close()


def test_a_link_at_a_record_name_is_never_followed_nor_cached(tmp_path: Path, later: None) -> None:
    """Main's rule for every open under a store (jobctl.fsio): list_open and scan refuse the link, every call."""
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    kept = store.submit(Record(kind="k", spec={}))
    finish(store, kept)
    outside = FileStore(tmp_path / "elsewhere", summaries=False)
    target = outside.submit(Record(kind="k", spec={}, id="planted"))
    finish(outside, target)
    os.symlink(outside.path(target), store.path("planted"))
    for _ in range(2):  # cold, then warm
        listing = store.list_open()
        assert answer(listing) == ([], {kept: "complete"}, ["planted"])
        assert "symbolic link" in listing.unreadable[0][1].message
        unreadable: list[tuple[str, jobctl.errors.JobError]] = []
        assert [item.id for item in store.scan(unreadable)] == [kept]
        assert [job_id for job_id, _ in unreadable] == ["planted"]


# -- the unchanged-directory fast paths -----------------------------------------------------------


def test_lazy_states_answer_as_the_filled_dict() -> None:
    """summary.States: every reading method fills it first; what was set directly wins over the cache."""
    fills = 0

    def fill() -> dict[str, str]:
        nonlocal fills
        fills += 1
        return {"a": "complete", "b": "failed", "open": "complete"}

    def fresh() -> summary.States:
        states = summary.States(fill)
        states["open"] = "pending"  # read now: newer than the cache's word
        return states

    want = {"a": "complete", "b": "failed", "open": "pending"}
    states = fresh()
    assert states.get("open") == "pending" and states["open"] == "pending" and "open" in states
    assert fills == 0  # a directly set id needs no fill
    assert states.get("a") == "complete" and fills == 1
    assert fresh() == want and want == fresh()
    assert dict(fresh()) == want and {**fresh()} == want and fresh().copy() == want
    assert len(fresh()) == 3 and sorted(fresh()) == sorted(want) and sorted(fresh().items()) == sorted(want.items())
    assert sorted(fresh().keys()) == sorted(want) and sorted(fresh().values()) == sorted(want.values())
    assert fresh()["b"] == "failed" and "missing" not in fresh() and fresh().get("missing", "x") == "x"
    popped = fresh()
    assert popped.pop("a") == "complete" and "a" not in popped and len(popped) == 2
    with pytest.raises(KeyError):
        fresh()["missing"]


def test_states_filled_later_too_answer_as_the_filled_dict() -> None:
    """States.later: more states filled in with the cache's, when a look-up first needs one; none before."""
    asked: list[str] = []

    def cached() -> dict[str, str]:
        asked.append("cache")
        return {"a": "complete", "open": "complete"}

    def read_now() -> dict[str, str]:
        asked.append("pieces")
        return {"b": "failed", "c": "cancelled"}

    states = summary.States(cached)
    states["open"] = "pending"
    states.later(read_now)
    assert states["open"] == "pending" and asked == []
    assert states["c"] == "cancelled" and asked == ["cache", "pieces"]
    assert states == {"a": "complete", "b": "failed", "c": "cancelled", "open": "pending"}
    filled = summary.States()
    filled["x"] = "pending"
    len(filled)  # nothing to fill: filled already
    filled.later(read_now)
    assert dict(filled) == {"x": "pending", "b": "failed", "c": "cancelled"}


def test_orphans_of_an_unchanged_directory_build_no_finished_state(
    tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """orphans never looks at a finished record's state; claim --next only for a dependency."""
    from jobctl import schedule

    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    done = [store.submit(Record(kind="k", spec={})) for _ in range(4)]
    for job_id in done:
        finish(store, job_id)
    free = store.submit(Record(kind="free", spec={}))
    store.list_open()  # writes the cache
    built = 0
    real_states = summary.Summaries.states

    def counting(self: summary.Summaries) -> dict[str, str]:
        nonlocal built
        built += 1
        return real_states(self)

    monkeypatch.setattr(summary.Summaries, "states", counting)
    assert [rec.id for rec in store.orphans()] == [free]
    claimed = store.claim_next("w", 30, ["free"])
    assert claimed is not None and claimed.id == free
    assert built == 0
    waiting = store.submit(schedule.plan(Record(kind="k", spec={}), after=[done[0]]))
    moved_on = time.time_ns() + 10**12  # past the racy window of the submit (the clock is patched already)
    monkeypatch.setattr(time, "time_ns", lambda: moved_on)
    store.list_open()  # the directory changed: statted once more, and the cache rewritten
    built = 0
    claimed = store.claim_next("w", 30, ["k"])
    assert claimed is not None and claimed.id == waiting  # its dependency complete, by the cache's word
    assert built == 1


def test_a_listing_of_an_unchanged_directory_stats_only_what_it_reads(
    tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    plain = FileStore(tmp_path / "root", summaries=False)
    done = [store.submit(Record(kind="k", spec={"n": n})) for n in range(5)]
    for job_id in done:
        finish(store, job_id)
    pending = store.submit(Record(kind="k", spec={}))
    (Path(store.jobs_dir) / "1-broken.json").write_bytes(b"{")
    expected = listed(plain)
    assert listed(store) == expected  # cold: writes .list
    assert [p.suffix for p in cache_files(tmp_path / "cache")] == [".list"]
    statted: list[object] = []
    real_stat, real_scandir = os.stat, os.scandir

    def counting(path: object, *args: object, **kwargs: object) -> os.stat_result:
        statted.append(path)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]  # passed through as given

    def refuse(path: object) -> object:
        raise AssertionError("scandir on the fast path")

    monkeypatch.setattr(file_store.os, "stat", counting)
    monkeypatch.setattr(file_store.os, "scandir", refuse)
    assert listed(store) == expected
    assert sorted(statted) == sorted(["1-broken.json", pending + ".json"])  # the ones read whole, no other
    monkeypatch.setattr(file_store.os, "scandir", real_scandir)
    finish(store, pending)  # jobs/ changed: every file statted again, the answer follows
    want = listed(plain)
    statted.clear()
    assert listed(store) == want
    assert {str(p) for p in statted} >= {name + ".json" for name in [*done, pending, "1-broken"]}  # every name


# -- the cache's own format -----------------------------------------------------------------------


def test_a_cache_of_another_version_is_ignored_and_replaced(tmp_path: Path, later: None) -> None:
    """A version-3 cache (two files, one string per record) that would lie if believed; then one from the future."""
    cache = tmp_path / "cache"
    store = FileStore(tmp_path / "root", summaries=str(cache))
    done = [store.submit(Record(kind="k", spec={})) for _ in range(3)]
    for job_id in done:
        finish(store, job_id)
    pending = store.submit(Record(kind="k", spec={}))
    jobs = os.stat(store.jobs_dir)
    base = summary.Summaries.load(str(cache), store.jobs_dir, jobs, read=False).base
    real = os.path.realpath(store.jobs_dir)
    lines = []
    for job_id in done:
        st = os.stat(store.path(job_id))
        lines.append(f"{job_id} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}")
    cache.mkdir(mode=0o700)
    by_state = {"failed": "\n".join(done)}  # version 3's layout, every finished record said failed
    opened = (3, real, "t0", summary.cachefile._dir_identity(jobs), by_state, [pending])
    Path(base + ".open").write_bytes(marshal.dumps(opened))
    Path(base + ".stat").write_bytes(marshal.dumps((3, real, "t0", {"failed": "\n".join(lines)})))
    for p in cache.iterdir():
        p.chmod(0o600)
    expected = reference(store)
    assert answer(store.list_open()) == expected
    assert [p.name for p in cache_files(cache)] == [os.path.basename(base) + ".open"]  # .stat removed
    head, rows = read_cache(Path(base + ".open"))
    assert head[0] == 5
    assert answer(store.list_open()) == expected  # the new one believed
    # Version 4's layout (one marshalled tuple, the rows inline), every finished record said failed.
    table = tuple("failed" for _ in rows[1])  # type: ignore[attr-defined]
    four = (4, sys.byteorder, real, head[3], head[4], rows[0], table, *rows[2:])
    Path(base + ".open").write_bytes(marshal.dumps(four))
    assert answer(store.list_open()) == expected
    assert read_cache(Path(base + ".open"))[0][0] == 5
    future_head, future_rows = read_cache(Path(base + ".open"))
    future_head[0] = 6
    future_rows[1] = table  # a lie, were version 6 read as 5
    write_cache(Path(base + ".open"), future_head, future_rows)
    assert answer(store.list_open()) == expected
    assert read_cache(Path(base + ".open"))[0][0] == 5


def test_an_unchanged_directory_reads_the_head_alone(
    tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are read only when a state is needed; rows that cannot be read then cost time, not answers."""
    cache = tmp_path / "cache"
    store = FileStore(tmp_path / "root", summaries=str(cache))
    done = [store.submit(Record(kind="k", spec={})) for _ in range(4)]
    for job_id in done:
        finish(store, job_id, "failed")
    free = store.submit(Record(kind="free", spec={}))
    waiting = store.submit(schedule.plan(Record(kind="k", spec={}), after=[done[0]]))
    store.list_open()  # writes the cache
    expected = reference(store)
    reads = 0
    real_read = summary._Later.read

    def counting(self: summary._Later) -> object:
        nonlocal reads
        reads += self._fd >= 0  # a file still to be read
        return real_read(self)

    monkeypatch.setattr(summary._Later, "read", counting)
    assert [rec.id for rec in store.orphans()] == sorted([free, waiting])
    assert reads == 0
    assert answer(store.list_open()) == expected and reads == 1  # a whole answer needs the rows
    path = next(p for p in cache_files(cache) if p.suffix == ".open")
    data = path.read_bytes()
    end = 8 + int.from_bytes(data[:8], "little")
    for broken in (data[:end] + b"\x00" * (len(data) - end), data[: end + 5]):
        path.write_bytes(broken)  # the head whole and believed, the rows not: the records are read instead
        listing = store.list_open()
        assert listing.states[done[0]] == "failed"
        assert answer(listing) == expected
    path.write_bytes(data)
    store.finish(free, store.claim(free, "w", 30).lease.epoch, "complete")
    assert answer(store.list_open()) == reference(store)


def test_a_check_shares_its_stats_from_check_shared_from_rows(
    tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fewer rows than _CHECK_SHARED_FROM: statted here; that many: children take pieces too. The answer is one."""
    store, expected = cached_store(tmp_path, 12)  # 13 rows
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.setenv(fanout.PROCESSES_ENV, "2")
    real_fork = fanout._fork
    forks: list[str] = []

    def fork_counted(*args: Any) -> Any:
        forks.append(args[1].__name__)
        return real_fork(*args)

    monkeypatch.setattr(fanout, "_fork", fork_counted)
    for threshold, shared in ((14, False), (13, True)):
        monkeypatch.setattr(summary.scan, "_CHECK_SHARED_FROM", threshold)
        forks.clear()
        os.utime(store.jobs_dir)  # jobs/ looks changed: every file is statted
        assert answer(store.list_open()) == expected
        assert forks == (["changed"] if shared else []), threshold


@pytest.mark.parametrize("lie", [["x"], [10**6], None, "all"], ids=["not-ints", "outside", "no-list", "garbage"])
def test_a_shared_check_reads_the_whole_piece_of_an_answer_it_cannot_believe(
    tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch, lie: Any
) -> None:
    """A piece whose stats came back as anything but positions inside it: every record of it is read again."""
    store, expected = cached_store(tmp_path, 40)
    monkeypatch.setattr(summary.scan, "_CHECK_SHARED_FROM", 1)
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.setenv(fanout.PROCESSES_ENV, "2")
    real_share_out = fanout.share_out
    lied: list[range] = []

    def lying(items: Any, each: Any, keep: Any = (), *, count: Any = None) -> Any:
        for k, piece, got in real_share_out(items, each, keep, count=count):
            if k == 1:
                lied.append(piece)
                got = lie
            yield k, piece, got

    monkeypatch.setattr(fanout, "share_out", lying)
    decoded = count_decodes(monkeypatch)
    os.utime(store.jobs_dir)  # jobs/ looks changed: every file is statted
    assert answer(store.list_open()) == expected
    [piece] = lied
    listed = [name[:-5] for name in os.listdir(store.jobs_dir) if name.endswith(".json")]
    pending = expected[0]
    assert sorted(decoded) == sorted({*pending, *(listed[p] for p in piece)})
    assert 0 < len(piece) < 41


def test_entries_met_out_of_order_are_stored_in_the_order_met(
    tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next scan of a directory whose order changed walks the rows in sequence again: no look-up."""
    store, expected = cached_store(tmp_path, 20)
    jumps: list[int] = []
    real_finish = summary.Summaries.finish

    def finish_counted(self: summary.Summaries, st: os.stat_result) -> None:
        jumps.append(self._jumps)
        real_finish(self, st)

    real_scandir, real_listdir = os.scandir, os.listdir

    def backwards(path: Any) -> Entries:
        with real_scandir(path) as it:
            return Entries(reversed([Entry(entry, False) for entry in it]))

    monkeypatch.setattr(summary.Summaries, "finish", finish_counted)
    monkeypatch.setattr(os, "scandir", backwards)
    monkeypatch.setattr(os, "listdir", lambda path=".": real_listdir(path)[::-1])
    os.utime(store.jobs_dir)  # jobs/ looks changed: every file is statted
    assert answer(store.list_open()) == expected
    os.utime(store.jobs_dir)
    assert answer(store.list_open()) == expected
    assert jumps[0] > 0 and jumps[1] == 0


def rows_cache(tmp_path: Path, table: list[str]) -> summary.Summaries:
    """A cache ready to take rows (a scan begun 10 s ago, so nothing below is racy), its state table ``table``."""
    cache = summary.Summaries(str(tmp_path / "cache"), str(tmp_path / "jobs"))
    cache._table = list(table)
    cache._started = time.time_ns() + 10 * 10**9
    return cache


def test_rows_made_elsewhere_are_taken_with_their_codes_mapped(tmp_path: Path) -> None:
    # A child of a shared scan makes its rows with its own copy of the state table, and may add a
    # state this process has not met: the codes are read through the table sent with the rows.
    here = rows_cache(tmp_path, ["failed"])
    there = rows_cache(tmp_path, ["cancelled"])
    read = [("a", "complete", (1, 10, 5, 6)), ("b", None, (2, 11, 5, 6)), ("c", "cancelled", (3, 12, 5, 6))]
    rows = there.rows_of(read)
    assert rows[5] == ("cancelled", "complete")
    assert here.take_rows(rows)
    assert here._table == ["failed", "cancelled", "complete"]
    codes = list(here._new_codes)
    assert [here._table[codes[0]], codes[1], here._table[codes[2]]] == ["complete", summary._OTHER, "cancelled"]
    assert list(here._new_sizes) == [1, 10, 0, summary._NEVER, 3, 12]
    assert here._new_names == ["a.json", "b.json", "c.json"]
    assert (here._remembered, here._ended_other) == (2, 1)
    # The same rows made here one by one are these rows.
    alone = rows_cache(tmp_path, ["failed"])
    for job_id, state, (ino, size, mtime, ctime) in read:
        st: Any = SimpleNamespace(st_ino=ino, st_size=size, st_mtime_ns=mtime, st_ctime_ns=ctime)  # what remember reads
        alone.remember(job_id, st, state)

    def states(cache: summary.Summaries) -> list[str | None]:
        return [None if code == summary._OTHER else cache._table[code] for code in cache._new_codes]

    assert states(alone) == states(here) and alone._new_sizes == here._new_sizes


def test_rows_of_a_state_a_full_table_cannot_hold_are_read_every_time(tmp_path: Path) -> None:
    full = [f"s{n}" for n in range(summary._OTHER - 1)]
    here = rows_cache(tmp_path, full)
    rows = rows_cache(tmp_path, []).rows_of([("a", "complete", (1, 10, 5, 6)), ("b", "s3", (2, 11, 5, 6))])
    assert here.take_rows(rows)
    assert list(here._new_codes) == [summary._OTHER, 3]
    assert list(here._new_sizes) == [0, summary._NEVER, 2, 11]
    assert (here._remembered, here._ended_other) == (1, 1)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "rows",
        (["a.json"], b"\x00", b"\x00" * 16, b"\x00" * 16, 1),  # five parts
        (["a.json"], b"\x00\x00", b"\x00" * 16, b"\x00" * 16, 1, ("complete",)),  # two codes, one name
        (["a.json"], b"\x00", b"\x00" * 8, b"\x00" * 16, 1, ("complete",)),  # half a size
        (["a.json"], b"\x00", b"\x00" * 16, b"\x00" * 16, 2, ("complete",)),  # more remembered than rows
        ([1], b"\x00", b"\x00" * 16, b"\x00" * 16, 1, ("complete",)),  # a name that is no string
        (["a.json"], b"\x00", b"\x00" * 16, b"\x00" * 16, 1, (3,)),  # a state that is no string
    ],
)
def test_malformed_rows_are_refused_and_add_nothing(tmp_path: Path, bad: Any) -> None:
    here = rows_cache(tmp_path, [])
    assert not here.take_rows(bad)
    assert (len(here._new_names), len(here._new_codes), here._remembered, here._ended_other) == (0, 0, 0, 0)


def test_a_shared_listing_keeps_no_summary_of_a_file_changed_too_recently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pieces of a shared cold scan make the listing part's rows: one whose file changed within
    # RACY_NS of the scan (a chmod: its ctime alone, jobs/ untouched) is named among the others.
    monkeypatch.setattr(summary.cachefile, "RACY_NS", 100_000_000)
    monkeypatch.setattr(file_listing, "_SHARED_FROM", 2)
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.setattr(summary.listed, "_ASIDE_FROM", 1)
    monkeypatch.setenv(fanout.PROCESSES_ENV, "2")
    cache_dir = tmp_path / "cache"
    store = FileStore(tmp_path / "root", summaries=str(cache_dir))
    ids = [store.submit(Record(kind="k", spec={"n": n})) for n in range(8)]
    for job_id in ids:
        finish(store, job_id)
    time.sleep(0.3)  # every record and jobs/ older than the racy window
    os.chmod(store.path(ids[3]), 0o600)
    forks: list[int] = []
    real_fork = fanout._fork
    monkeypatch.setattr(fanout, "_fork", lambda *a: forks.append(1) or real_fork(*a))
    assert listed_briefly(store) == listed(FileStore(tmp_path / "root", summaries=False))
    assert forks, "the scan was not shared"
    jobs = os.stat(store.jobs_dir)
    part = summary.Listed.of(summary.Summaries.load(str(cache_dir), store.jobs_dir, jobs, read=False))
    assert part.others == [ids[3]]
    assert sorted(row[0] for row in part.rows) == sorted(ids[:3] + ids[4:])
    assert part.dir_id is not None  # jobs/ itself was old enough to trust
    # Walked from the part (jobs/ unchanged), the record named among the others is read again.
    assert listed_briefly(store) == listed(FileStore(tmp_path / "root", summaries=False))


def test_a_record_a_child_could_not_read_is_in_the_listing_part_all_the_same(
    tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A record a child could not read (say it was being edited in place) is read again here; if it
    # reads as finished now, the listing part must know it, or a listing of the unchanged jobs/
    # (which walks the part instead of the directory) would leave it out.
    monkeypatch.setattr(file_listing, "_SHARED_FROM", 2)
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.setattr(summary.listed, "_ASIDE_FROM", 1)
    monkeypatch.setenv(fanout.PROCESSES_ENV, "2")
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    ids = [store.submit(Record(kind="k", spec={"n": n})) for n in range(40)]
    for job_id in ids:
        finish(store, job_id)
    parent, real = os.getpid(), file_listing.record.summary_or_record
    here: list[str] = []

    def flaky(data: bytes, job_id: str = "", fields: bool = True) -> Any:
        if os.getpid() != parent:
            raise jobctl.errors.Invalid("being edited", job_id)  # every child: all it reads is re-read here
        here.append(job_id)
        time.sleep(0.005)  # the children take pieces meanwhile
        return real(data, job_id, fields)

    monkeypatch.setattr(file_listing.record, "summary_or_record", flaky)
    plain = listed(FileStore(tmp_path / "root", summaries=False))
    assert listed_briefly(store) == plain
    assert len(here) < len(ids), "no child took a piece"
    monkeypatch.setattr(file_listing.record, "summary_or_record", real)
    part = summary.Listed.of(
        summary.Summaries.load(str(tmp_path / "cache"), store.jobs_dir, os.stat(store.jobs_dir), read=False)
    )
    assert sorted(row[0] for row in part.rows) + part.others == sorted(ids)
    assert listed_briefly(store) == plain  # walked from the part: jobs/ is unchanged


def test_a_listing_part_left_waiting_is_written_at_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A part of thousands waits for the listing's write_aside(); a caller that never calls it (the library
    # used directly) has it written when the process exits, and a reader in the process finds it first.
    import atexit

    monkeypatch.setattr(summary.listed, "_ASIDE_FROM", 1)
    registered: list[Any] = []
    monkeypatch.setattr(atexit, "register", registered.append)
    cache = tmp_path / "cache"
    store = FileStore(tmp_path / "root", summaries=str(cache))
    ids = [store.submit(Record(kind="k", spec={"n": n})) for n in range(3)]
    for job_id in ids:
        finish(store, job_id)
    time.sleep(0.3)
    monkeypatch.setattr(summary.cachefile, "RACY_NS", 100_000_000)
    plain = listed(FileStore(tmp_path / "root", summaries=False))
    assert listed_briefly(store) == plain
    assert summary.listed._WAITING and not list(cache.rglob("*.list"))
    assert registered == [summary.listed._at_exit]
    registered[0]()  # as the exit runs it
    assert not summary.listed._WAITING
    (part,) = cache.rglob("*.list")
    jobs = os.stat(store.jobs_dir)
    loaded = summary.Listed.of(summary.Summaries.load(str(cache), store.jobs_dir, jobs, read=False))
    assert sorted(row[0] for row in loaded.rows) == sorted(ids)
    # Left waiting again, a reader in this process writes it before it reads it (settle).
    part.unlink()
    assert listed_briefly(store) == plain and summary.listed._WAITING
    assert listed_briefly(store) == plain and not summary.listed._WAITING
    assert list(cache.rglob("*.list"))
