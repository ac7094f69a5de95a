"""The summary cache (jobctl.summary) behind FileStore.list_open: faster, never different."""

from __future__ import annotations

import os
import random
import stat
import time
from pathlib import Path

import pytest

import jobctl
from jobctl import FileStore, Record, summary
from jobctl.record import decode, encode
from jobctl.store import file as file_store


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


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scans believe they start 10 s from now: nothing written by the test looks racy."""
    real = time.time_ns
    monkeypatch.setattr(summary.time, "time_ns", lambda: real() + 10 * 10**9)


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
    assert [p.suffix for p in cache_files(cache)] == [".open", ".stat"]
    assert answer(store.list_open()) == expected  # warm, directory unchanged
    assert store.orphans()[0].id == ids[3]


def test_a_warm_scan_decodes_no_finished_record(tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    ids = [store.submit(Record(kind="k", spec={})) for _ in range(6)]
    for job_id in ids[:5]:
        finish(store, job_id)
    store.list_open()
    decoded: list[str] = []

    def counting(data: bytes, job_id: str = "") -> Record:
        decoded.append(job_id)
        return decode(data, job_id)

    monkeypatch.setattr(file_store, "decode", counting)
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
        raise AssertionError("scandir on the fast path")

    monkeypatch.setattr(file_store.os, "scandir", refuse)
    assert answer(store.list_open()) == expected
    monkeypatch.undo()
    store.submit(Record(kind="k", spec={}))  # the directory changed: the scan must look
    monkeypatch.setattr(file_store.os, "scandir", refuse)
    with pytest.raises(AssertionError, match="scandir"):
        store.list_open()


def test_a_racy_entry_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file changed within RACY_NS of the scan is not remembered, nor is the directory (git's racy index)."""
    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    job_id = store.submit(Record(kind="k", spec={}))
    finish(store, job_id)
    changed = os.stat(store.path(job_id)).st_ctime_ns
    monkeypatch.setattr(summary.time, "time_ns", lambda: changed + 1_000_000)  # the same tick, near enough
    store.list_open()
    cache = summary.Summaries.load(str(tmp_path / "cache"), store.jobs_dir, os.stat(store.jobs_dir))
    assert cache.others == [job_id] and cache.dir_id is None
    # Past the racy window of the record and of jobs/ (whose rename came after the record's temporary
    # was written and fsynced: on a busy machine, milliseconds later).
    jobs = os.stat(store.jobs_dir)
    settled = max(changed, jobs.st_mtime_ns, jobs.st_ctime_ns)
    monkeypatch.setattr(summary.time, "time_ns", lambda: settled + summary.RACY_NS + 1)
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


def poison(store: FileStore, cache: Path, state: str) -> None:
    """A cache that says every finished record is ``state``."""
    st = os.stat(store.jobs_dir)
    c = summary.Summaries.load(str(cache), store.jobs_dir, st)
    c.begin()
    c.table = {k: state for k in c.table}
    c.seen = list(c.table.items())
    c.dirty = True
    c.finish(st)
    c.save()


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


#: The simulated timestamp tick of jobs/ in the coarse run, and the racy window then: the window must
#: span a tick and the lag of the kernel's coarse clock behind time.time_ns() (a jiffy, <= 10 ms).
TICK_NS = 200_000_000
COARSE_RACY_NS = 250_000_000


@pytest.mark.parametrize("coarse", [False, True], ids=["fine", "coarse-directory"])
def test_cached_answers_equal_uncached_ones_under_interleaved_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, coarse: bool
) -> None:
    """Library writes and raw foreign replacements (same size, same mtime too) between cached and uncached reads.

    Both list_open and a whole listing (scan) are compared. The racy window
    is shrunk to 30 ms (still several kernel timestamp ticks) and the test
    sleeps past it now and then, so that cached entries and the directory
    fast paths are really used -- which the counters prove.

    ``coarse``: jobs/ behaves as on a filesystem whose timestamps have a
    200 ms tick, so a replacement made within the tick of the one before
    leaves the directory's identity as it was -- git's racy case. The racy
    rule (a directory changed within the window of a scan is not
    remembered) must still make every such replacement seen; the counter
    proves that such replacements happened.
    """
    racy = COARSE_RACY_NS if coarse else 30_000_000
    monkeypatch.setattr(summary, "RACY_NS", racy)
    same_tick = 0
    if coarse:

        def coarse_identity(st: os.stat_result) -> tuple[int, ...]:
            return (st.st_dev, st.st_ino, st.st_mtime_ns // TICK_NS, st.st_ctime_ns // TICK_NS, st.st_nlink, st.st_size)

        monkeypatch.setattr(summary, "_dir_identity", coarse_identity)
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
    decoded = 0
    real_decode = file_store.decode

    def counting(data: bytes, job_id: str = "") -> Record:
        nonlocal decoded
        decoded += 1
        return real_decode(data, job_id)

    monkeypatch.setattr(file_store, "decode", counting)
    rng = random.Random(1212)
    cached = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    plain = FileStore(tmp_path / "root", summaries=False)
    ids = [cached.submit(Record(kind="k", spec={"n": n})) for n in range(12)]
    for job_id in ids[:8]:
        finish(cached, job_id, rng.choice(["complete", "failed", "cancelled"]))
    time.sleep(0.05)
    compared = 0
    scanned_files = 0
    decoded_total = 0
    for step in range(160):
        op = rng.random()
        job_id = rng.choice(ids)
        path = cached.path(job_id)
        before_op = os.stat(cached.jobs_dir)
        try:
            if op < 0.15:
                ids.append(cached.submit(Record(kind="k", spec={"step": step})))
            elif op < 0.3:
                finish(cached, job_id, rng.choice(["complete", "failed", "cancelled"]))
            elif op < 0.4:
                rec = cached.load(job_id)
                cached.renew(job_id, rec.lease.epoch, 30)  # allowed on a terminal record [JOB-T6]
            elif op < 0.7 and os.path.exists(path):
                rec = cached.load(job_id)
                size = os.path.getsize(path)
                state = rng.choice(["pending", "running", "complete", "failed", "cancelled"])
                foreign_replace(path, same_size(rec, state, size), keep_mtime=rng.random() < 0.7)
            elif op < 0.75 and os.path.exists(path):
                foreign_replace(path, b'{"broken": ', keep_mtime=False)
            elif op < 0.8 and os.path.exists(path):
                os.unlink(path)
            elif op < 0.85:
                rec = Record(id=f"9{step:012d}-{'f' * 20}", kind="k", spec={}, state="complete")
                rec.created_at = rec.updated_at = cached.now()
                foreign_replace(os.path.join(cached.jobs_dir, rec.id + ".json"), encode(rec), keep_mtime=False)
                ids.append(rec.id)
        except jobctl.JobError:
            pass  # refused (terminal, held, broken, gone): the store said no, nothing changed
        after_op = os.stat(cached.jobs_dir)
        if coarse and after_op.st_ctime_ns != before_op.st_ctime_ns:
            same_tick += summary._dir_identity(after_op) == summary._dir_identity(before_op)
        if rng.random() < (0.1 if coarse else 0.25):
            time.sleep(racy / 1e9 + 0.01)  # past the racy window: what was just written may now be cached
        before = decoded
        got = answer(cached.list_open())
        decoded_total += decoded - before
        scanned_files += len(got[1]) + len(got[2])
        assert got == answer(plain.list_open()) == reference(cached), f"step {step}"
        if step % 2:
            assert listed(cached) == listed(plain), f"step {step}"
        compared += 1
    assert compared == 160
    assert fresh_hits > 0, "the directory fast path was never taken"
    assert listed_hits > 0, "the listing's directory fast path was never taken"
    # With a coarse tick the racy window is wide, and how many steps fall inside it depends on how
    # fast this machine runs them: there it is enough that the cache answered some of the time.
    assert decoded_total < scanned_files * (0.8 if coarse else 0.5), "the cache hardly ever answered"
    if coarse:
        assert same_tick > 0, "no change ever fell within the tick of the one before"


def test_a_worker_board_starts_from_the_cache(tmp_path: Path, later: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobctl import schedule
    from jobctl.board import Board

    store = FileStore(tmp_path / "root", summaries=str(tmp_path / "cache"))
    done = [store.submit(Record(kind="k", spec={})) for _ in range(5)]
    for job_id in done:
        finish(store, job_id)
    waiting = store.submit(schedule.plan(Record(kind="k", spec={}), after=[done[0]]))
    store.list_open()  # an earlier command wrote the cache
    decoded: list[str] = []

    def counting(data: bytes, job_id: str = "") -> Record:
        decoded.append(job_id)
        return decode(data, job_id)

    monkeypatch.setattr(file_store, "decode", counting)
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
    monkeypatch.setattr(summary.time, "time_ns", lambda: moved_on)
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
