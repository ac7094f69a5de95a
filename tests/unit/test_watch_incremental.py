"""A watch re-reads only the records its notices name, and its notices stay what a full read gives [JOB-N1].

The first read, a read after lost notices, the insurance read and every poll
read the whole store (``list``); in between, a notice costs a ``load`` per
record named. Whatever was read, a ``changed`` notice carries the kind's
records exactly as ``store.list()`` would give them at that moment.
"""

from __future__ import annotations

import importlib
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobctl
from jobctl import FileStore, Record
from jobctl.errors import JobError
from jobctl.record import encode

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the file store's notices are inotify's"),
    pytest.mark.timeout(120),
]

# ``jobctl.watch`` is the function; the module is in sys.modules.
watch_module = importlib.import_module("jobctl.watch")

#: An insurance interval no test reaches: a full read it sees came for another reason.
NEVER = 3600.0


class Counted:
    """Count ``list`` and ``load`` calls on one store instance."""

    def __init__(self, store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lists = 0
        self.loads = 0
        real_list, real_load = store.list, store.load

        def counted_list() -> jobctl.Listing:
            self.lists += 1
            return real_list()

        def counted_load(job_id: str) -> Record:
            self.loads += 1
            return real_load(job_id)

        monkeypatch.setattr(store, "list", counted_list)
        monkeypatch.setattr(store, "load", counted_load)


def reference(root: Path, kind: str | None) -> tuple[list[Record], list[tuple[str, str, str]]]:
    """A fresh full read by another store object: the kind's records, and every unreadable one."""
    listing = FileStore(root).list()
    records = [r for r in listing if kind is None or r.kind == kind]
    return records, [named(job_id, exc) for job_id, exc in listing.unreadable]


def named(job_id: str, exc: JobError) -> tuple[str, str, str]:
    return job_id, type(exc).__name__, str(exc)


def view(records: list[Record], unreadable: list[tuple[str, str, str]]) -> tuple[str, ...]:
    """What a watcher sees of a read (the watch's own fingerprint, and the unreadable ids)."""
    return watch_module.fingerprint(records) + tuple(f"{job_id}|unreadable" for job_id, _, _ in unreadable)


def assert_same(got: list[Record], want: list[Record]) -> None:
    assert [r.id for r in got] == [r.id for r in want]
    assert [encode(r) for r in got] == [encode(r) for r in want]


def catch_up(w: jobctl.Watch, root: Path, kind: str | None, last: list[Record]) -> list[Record]:
    """Take the watch's notices until it shows what a full read shows; each one must match that read.

    The test writes nothing meanwhile, and inotify queues a notice before the write returns:
    every ``changed`` notice taken here must carry exactly the records of a full read now.
    """
    want, broken = reference(root, kind)
    deadline = time.monotonic() + 2.0
    timeout = 0.0
    while True:
        notice = w.next(timeout=timeout)
        if notice is not None:
            assert notice.what == "changed"
            assert_same(notice.records, want)
            assert [named(job_id, exc) for job_id, exc in w.unreadable] == broken
            last = notice.records
        if view(last, [named(job_id, exc) for job_id, exc in w.unreadable]) == view(want, broken):
            return last
        assert time.monotonic() < deadline, "the watch never caught up with the store"
        timeout = 0.05


def replace_raw(jobs: Path, job_id: str, data: bytes, rng: random.Random) -> None:
    """Put ``data`` at ``<id>.json`` by hand: through a rename (as a writer does) or in place."""
    target = jobs / f"{job_id}.json"
    if rng.random() < 0.5:
        tmp = jobs / f".by-hand-{rng.getrandbits(32):08x}"
        tmp.write_bytes(data)
        os.replace(tmp, target)
    else:
        target.write_bytes(data)


@pytest.mark.parametrize("kind", ["k", None])
def test_random_changes_give_the_notices_a_full_read_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str | None
) -> None:
    monkeypatch.setattr(watch_module, "INSURANCE_SECONDS", NEVER)
    root = tmp_path / "root"
    store = FileStore(root)
    jobs = Path(store.jobs_dir)
    rng = random.Random(20240611)
    for _ in range(5):
        store.submit(Record(kind=rng.choice(["k", "other"]), spec={"n": rng.randrange(100)}))
    counted = Counted(store, monkeypatch)
    w = jobctl.Watch(store, kind)
    last = catch_up(w, root, kind, [])
    epochs: dict[str, int] = {}
    saved: dict[str, bytes] = {}  # the good bytes of records turned to garbage
    done: dict[str, str] = {}

    def present() -> list[str]:
        return sorted(name[:-5] for name in os.listdir(jobs) if name.endswith(".json") and not name.startswith("."))

    def readable() -> list[str]:
        return [job_id for job_id in present() if job_id not in saved]

    def submit() -> None:
        store.submit(Record(kind=rng.choice(["k", "k", "other"]), spec={"n": rng.randrange(100)}))

    def claim() -> None:
        job_id = rng.choice(readable())
        epochs[job_id] = store.claim(job_id, "w", 30).lease.epoch

    def held() -> str:
        candidates = [job_id for job_id in readable() if job_id in epochs]
        if not candidates:
            raise LookupError
        return rng.choice(candidates)

    def progress() -> None:
        job_id = held()
        store.progress(job_id, epochs[job_id], rng.randrange(5), {"at": rng.randrange(1000)})

    def renew() -> None:  # moves nothing a watcher sees: no notice of its own, but the next one carries it
        job_id = held()
        store.renew(job_id, epochs[job_id], rng.choice([40, 50, 60]))

    def finish() -> None:
        job_id = held()
        state = rng.choice(["complete", "failed", "cancelled"])
        store.finish(job_id, epochs[job_id], state, error="broke" if state == "failed" else None)
        done[job_id] = state

    def release() -> None:
        job_id = held()
        store.release(job_id, epochs.pop(job_id))

    def gc() -> None:
        candidates = [job_id for job_id in readable() if job_id in done]
        if not candidates:
            raise LookupError
        store.remove(rng.choice(candidates))

    def unlink() -> None:
        job_id = rng.choice(present())
        os.unlink(jobs / f"{job_id}.json")
        saved.pop(job_id, None)

    def garble() -> None:
        job_id = rng.choice(readable())
        saved[job_id] = (jobs / f"{job_id}.json").read_bytes()
        replace_raw(jobs, job_id, rng.choice([b"{not json", b"\x00\xff\xfe", b"[]", b""]), rng)

    def mend() -> None:
        if not saved:
            raise LookupError
        job_id = rng.choice(sorted(saved))
        replace_raw(jobs, job_id, saved.pop(job_id), rng)

    def rekind() -> None:  # a hand edit: the record now belongs to another kind (or back)
        job_id = rng.choice(readable())
        rec = FileStore(root).load(job_id)
        rec.kind = "other" if rec.kind == "k" else "k"
        replace_raw(jobs, job_id, encode(rec), rng)

    actions: list[tuple[Callable[[], None], int]] = [
        (submit, 4),
        (claim, 3),
        (progress, 3),
        (renew, 2),
        (finish, 2),
        (release, 1),
        (gc, 1),
        (unlink, 1),
        (garble, 1),
        (mend, 1),
        (rekind, 1),
    ]
    chosen: dict[str, int] = {}
    for _ in range(150):
        action = rng.choices([a for a, _ in actions], weights=[n for _, n in actions])[0]
        try:
            action()
        except (LookupError, IndexError, JobError):
            pass  # nothing to do it to, or the store refused: the watch must agree all the same
        else:
            chosen[action.__name__] = chosen.get(action.__name__, 0) + 1
        last = catch_up(w, root, kind, last)
    # Every kind of change was made, and none of them needed a full read after the first.
    assert set(chosen) == {a.__name__ for a, _ in actions}, chosen
    assert counted.lists == 1
    assert counted.loads > 0
    w.close()
    assert (w.next() or jobctl.Notice("")).what == "closed"


def test_a_notice_reads_only_the_record_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "INSURANCE_SECONDS", NEVER)
    root = tmp_path / "root"
    store = FileStore(root)
    made = [store.submit(Record(kind="k", spec={})) for _ in range(50)]
    counted = Counted(store, monkeypatch)
    w = jobctl.Watch(store, "k")
    first = w.next()
    assert first is not None and first.what == "changed" and [r.id for r in first.records] == sorted(made)
    assert (counted.lists, counted.loads) == (1, 0)
    epoch = store.claim(made[0], "w", 30).lease.epoch
    for n in range(20):
        if n % 2:
            made.append(store.submit(Record(kind="k", spec={"n": n})))
        else:
            store.progress(made[0], epoch, n)
        notice = w.next(timeout=5)
        assert notice is not None and notice.what == "changed"
        assert_same(notice.records, reference(root, "k")[0])
    assert counted.lists == 1
    assert 20 <= counted.loads <= 25
    w.close()
    w.next()


class Losing:
    """A store's notices that say, once when told, that notices were lost."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.recheck = real.recheck
        self.lose = False

    def fileno(self) -> int | None:
        return self.real.fileno()  # type: ignore[no-any-return]

    def read(self, *, sync: bool = True) -> tuple[set[str], set[str]] | None:
        got = self.real.read()
        if self.lose:
            self.lose = False
            return None
        return got  # type: ignore[no-any-return]

    def close(self) -> None:
        self.real.close()

    def miss(self) -> None:
        """Take away every notice waiting now, as a filesystem that drops them would."""
        while self.real.read() != (set(), set()):
            pass


def unnoticed(store: FileStore, notices: Losing) -> None:
    """Write the record ``9-hidden`` into ``store`` with its notice dropped, as a lost notice leaves it."""
    (Path(store.jobs_dir) / "9-hidden.json").write_bytes(encode(Record(id="9-hidden", kind="k", spec={})))
    notices.miss()


def found_by_a_full_read(store: FileStore, w: jobctl.Watch, counted: Counted, root: Path) -> None:
    """The next write's notice brings the second full read, which finds ``9-hidden``: as a fresh listing says."""
    store.submit(Record(kind="k", spec={}))
    notice = w.next(timeout=5)
    assert notice is not None and notice.what == "changed"
    assert counted.lists == 2
    assert "9-hidden" in [r.id for r in notice.records]
    assert_same(notice.records, reference(root, "k")[0])


def losing_notices(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> list[Losing]:
    """Give ``store``'s listeners :class:`Losing` notices; the list collects them."""
    real_notices = store.notices
    made: list[Losing] = []

    def losing() -> Losing:
        made.append(Losing(real_notices()))
        return made[-1]

    monkeypatch.setattr(store, "notices", losing)
    return made


def losing_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, FileStore, list[Losing], Counted]:
    """A store of one record whose listeners get :class:`Losing` notices, its reads counted; no insurance read."""
    monkeypatch.setattr(watch_module, "INSURANCE_SECONDS", NEVER)
    root = tmp_path / "root"
    store = FileStore(root)
    store.submit(Record(kind="k", spec={}))
    return root, store, losing_notices(store, monkeypatch), Counted(store, monkeypatch)


def test_lost_notices_mean_a_full_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, store, made, counted = losing_store(tmp_path, monkeypatch)
    w = jobctl.Watch(store, "k")
    assert w.next() is not None and counted.lists == 1
    store.submit(Record(kind="k", spec={}))
    notice = w.next(timeout=5)
    assert notice is not None and counted.lists == 1  # by the notice alone
    # Lost: a write nobody was told about, then notices lost -- only a full read can find it.
    unnoticed(store, made[0])
    made[0].lose = True
    found_by_a_full_read(store, w, counted, root)
    # And back to notices alone.
    store.submit(Record(kind="k", spec={}))
    notice = w.next(timeout=5)
    assert notice is not None and counted.lists == 2
    assert_same(notice.records, reference(root, "k")[0])
    w.close()
    w.next()


def test_the_insurance_read_still_reads_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, store, made, counted = losing_store(tmp_path, monkeypatch)
    shift = [0.0]
    w = jobctl.Watch(store, "k", clock=lambda: time.monotonic() + shift[0])
    assert w.next() is not None and counted.lists == 1
    for _ in range(3):
        store.submit(Record(kind="k", spec={}))
        assert w.next(timeout=5) is not None
    assert counted.lists == 1
    # A change nobody is told about (its notice dropped without a word), found by the insurance read.
    unnoticed(store, made[0])
    assert w.next(timeout=0.2) is None  # nothing says it changed: the watch does not read
    assert counted.lists == 1
    shift[0] += NEVER
    # The interval has passed: the read a notice brings is a full one, whatever it names.
    found_by_a_full_read(store, w, counted, root)
    store.submit(Record(kind="k", spec={}))
    assert w.next(timeout=5) is not None and counted.lists == 2  # and the interval counts from there


def test_an_idle_watch_reads_everything_at_the_insurance_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch_module, "INSURANCE_SECONDS", 0.2)
    store = FileStore(tmp_path / "root")
    counted = Counted(store, monkeypatch)
    w = jobctl.Watch(store, "k")
    assert w.next() is not None and counted.lists == 1
    assert w.next(timeout=0.7) is None
    assert counted.lists >= 3


def test_a_polling_watch_reads_everything_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path / "root")
    counted = Counted(store, monkeypatch)
    w = jobctl.Watch(store, "k", sleep=lambda seconds: None, poll=0.01)
    assert w.next() is not None
    store.submit(Record(kind="k", spec={}))
    notice = w.next(timeout=5)
    assert notice is not None and notice.what == "changed" and len(notice.records) == 1
    assert counted.lists == 2 and counted.loads == 0


def test_a_record_file_naming_another_id_is_named_unreadable_without_a_full_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of a record under another name is refused as any reader refuses it: no listing is needed."""
    monkeypatch.setattr(watch_module, "INSURANCE_SECONDS", NEVER)
    root = tmp_path / "root"
    store = FileStore(root)
    store.submit(Record(id="5-mid", kind="k", spec={}))
    counted = Counted(store, monkeypatch)
    w = jobctl.Watch(store, "k")
    assert w.next() is not None
    odd = FileStore(root).load("5-mid")
    (Path(store.jobs_dir) / "1-first.json").write_bytes(encode(odd))  # a copy under another name
    notice = w.next(timeout=5)
    assert notice is not None and notice.what == "changed"
    assert_same(notice.records, reference(root, "k")[0])
    assert [job_id for job_id, _ in w.unreadable] == ["1-first"]
    assert "names another id" in w.unreadable[0][1].message
    assert counted.lists == 1


def test_changes_keep_what_wait_read_for_take(store: FileStore) -> None:
    """Ids read by several waits come out of one take, the last word on each standing; lost means None."""
    from jobctl.notices import Changes

    changes = Changes(store, keep=True)
    a = store.submit(Record(kind="k", spec={}))
    assert changes.wait(0) is True
    b = store.submit(Record(kind="k", spec={}))
    assert changes.wait(0) is True
    epoch = store.claim(a, "w", 30).lease.epoch
    store.finish(a, epoch, "complete")
    assert changes.wait(0) is True
    assert store.remove(a)
    c = store.submit(Record(kind="k", spec={}))  # waiting, not yet read: take reads it too
    assert changes.take() == ({b, c}, {a})
    assert changes.take() == (set(), set())
    changes.close()
    plain = Changes(store)  # without keep, take cannot say which: look at everything
    assert plain.take() is None
    plain.close()


def test_coalesced_writes_come_as_one_notice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "INSURANCE_SECONDS", NEVER)
    root = tmp_path / "root"
    store = FileStore(root)
    counted = Counted(store, monkeypatch)
    w = jobctl.Watch(store, "k")
    assert w.next() is not None
    made = [store.submit(Record(kind="k", spec={})) for _ in range(5)]
    store.submit(Record(kind="other", spec={}))
    epoch = store.claim(made[2], "w", 30).lease.epoch
    store.progress(made[2], epoch, 3)
    notice = w.next(timeout=5)
    assert notice is not None and notice.what == "changed"
    assert_same(notice.records, reference(root, "k")[0])
    # By id: five ids minted in one millisecond sort by their random part, not in the order made.
    assert {r.id: r.progress.done for r in notice.records}[made[2]] == 3
    assert counted.lists == 1 and counted.loads == 6
    assert w.next(timeout=0.2) is None


class Scripted:
    """Notices that answer what they are told, one read at a time."""

    recheck = 5.0

    def __init__(self, reads: list[tuple[set[str], set[str]] | None]) -> None:
        self.reads = reads

    def fileno(self) -> int | None:
        return None

    def read(self, *, sync: bool = True) -> tuple[set[str], set[str]] | None:
        return self.reads.pop(0) if self.reads else (set(), set())

    def close(self) -> None:
        pass


class ScriptedStore:
    def __init__(self, reads: list[tuple[set[str], set[str]] | None]) -> None:
        self.reads = reads

    def notices(self, *, news_only: bool = False) -> Scripted:
        return Scripted(self.reads)


def test_take_keeps_the_last_word_on_an_id_and_looks_again_at_one_named_both_ways_at_once() -> None:
    from jobctl.notices import Changes

    reads: list[tuple[set[str], set[str]] | None] = [({"a", "b"}, set()), (set(), {"a"}), ({"c"}, {"c"})]
    changes = Changes(ScriptedStore(reads), keep=True)  # type: ignore[arg-type]
    assert changes.wait(0) and changes.wait(0)
    # a: written, then removed; c: both in one read (removed and made again, or the reverse): read it
    assert changes.take() == ({"b", "c"}, {"a"})
    assert changes.take() == (set(), set())
    reads[:] = [({"d"}, set()), None, ({"e"}, set())]
    assert changes.wait(0)
    assert changes.take() is None  # lost in between: look at everything
    assert changes.take() == ({"e"}, set())
