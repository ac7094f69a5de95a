"""The file store: layout, lock, every operation of DIGEST §5 with its refusals in order.

Every refusal is checked with :func:`refused`, which also asserts that the
record file's bytes did not change and no staging temporary was left behind.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import jobctl
from jobctl import errors, layout, record
from jobctl.errors import (
    Exists,
    Invalid,
    LeaseExpired,
    LeaseHeld,
    NotFound,
    Refused,
    StaleEpoch,
    Terminal,
    UnknownSchema,
)
from jobctl.record import Delegation, Envelope, Record
from jobctl.store import Store

BASE = "abstraction.job/base@1"
INTENT = "abstraction.job/intent@1"
RECALL = "abstraction.job/recall@1"
TERMINAL_MODEL = "abstraction.job/terminal@1"
T = timedelta

# -- helpers ---------------------------------------------------------------------------------------


def data_of(store: Store, job_id: str) -> bytes | None:
    try:
        return store.load_bytes(job_id)
    except NotFound:
        return None


def overwrite(store: Store, job_id: str, data: bytes) -> None:
    """Put ``data`` where the record is, as a foreign writer (or a damaged disk) would."""
    if isinstance(store, jobctl.FileStore):
        Path(store.path(job_id)).write_bytes(data)
    else:
        try:
            store.replace_bytes(job_id, data)  # type: ignore[attr-defined]
        except NotFound:
            store.import_bytes(data)  # a record that was never submitted


def temporaries(store: Store) -> list[str]:
    if not isinstance(store, jobctl.FileStore):
        return []  # a database write leaves nothing staged beside the record
    return sorted(n for n in os.listdir(store.jobs_dir) if n.endswith(".tmp"))


def refused(store: Store, job_id: str, cls: type[errors.JobError], call: Callable[[], object]) -> errors.JobError:
    """``call`` must raise exactly ``cls`` and leave ``jobs/<id>.json`` byte for byte as it was."""
    before = data_of(store, job_id)
    temps = temporaries(store)
    with pytest.raises(errors.JobError) as info:
        call()
    assert type(info.value) is cls, f"expected {cls.__name__}, got {type(info.value).__name__}: {info.value}"
    assert data_of(store, job_id) == before, f"{cls.__name__} refusal changed the record"
    assert temporaries(store) == temps, "a refusal left a staging temporary behind"
    return info.value


def submit(store: Store, **kw: Any) -> str:
    kw.setdefault("kind", "download")
    kw.setdefault("spec", {"fetch": "x"})
    return store.submit(Record(**kw))


@pytest.fixture
def job(any_store: Store) -> str:
    return submit(any_store)


@pytest.fixture
def file_job(clocked_store: jobctl.FileStore) -> str:
    return submit(clocked_store)


# -- the README example ----------------------------------------------------------------------------


def test_readme_example(tmp_path: Path) -> None:
    root = tmp_path / "store"
    import jobctl

    store = jobctl.FileStore(root)
    job_id = store.submit(jobctl.Record(id="", kind="example", spec={"fetch": "anything at all"}))
    mine = store.claim(job_id, "worker-a", 60)

    def got_a_megabyte(r):
        r.progress.done = 1 << 20
        r.checkpoint = {"bytes": 1 << 20}

    store.update(job_id, mine.lease.epoch, got_a_megabyte)
    store.release(job_id, mine.lease.epoch)
    nxt = store.claim(job_id, "worker-b", 60)
    assert nxt.progress.done == 1 << 20 and nxt.checkpoint == {"bytes": 1 << 20}
    # and what the example implies
    assert nxt.lease.owner == "worker-b" and nxt.lease.epoch == mine.lease.epoch + 1 == 2
    assert nxt.state == "running"


# -- layout [JOB-W1]..[JOB-W3], §1 -----------------------------------------------------------------


def test_opening_creates_jobs_and_work_only(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "er" / "root"
    jobctl.FileStore(root)
    assert sorted(os.listdir(root)) == ["jobs", "work"]
    assert os.listdir(root / "jobs") == [] and os.listdir(root / "work") == []
    jobctl.FileStore(root)  # opening again is fine
    assert sorted(os.listdir(root)) == ["jobs", "work"]


def test_work_path_is_named_never_created(clocked_store: jobctl.FileStore, file_job: str) -> None:
    path = clocked_store.work_path(file_job)
    assert path == os.path.join(clocked_store.root, "work", file_job)
    rec = clocked_store.claim(file_job, "w", 60)
    clocked_store.progress(file_job, rec.lease.epoch, 1)
    clocked_store.release(file_job, rec.lease.epoch)
    assert not os.path.lexists(path)
    assert os.listdir(os.path.join(clocked_store.root, "work")) == []


def test_record_and_lock_files(clocked_store: jobctl.FileStore, file_job: str) -> None:
    rec_path = Path(clocked_store.path(file_job))
    lock_path = Path(str(rec_path) + ".lock")
    assert rec_path == Path(clocked_store.root) / "jobs" / f"{file_job}.json"
    assert stat.S_IMODE(rec_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(lock_path.stat().st_mode) == 0o600
    assert lock_path.read_bytes() == b""  # never written
    inode = lock_path.stat().st_ino
    rec = clocked_store.claim(file_job, "w", 60)
    clocked_store.progress(file_job, rec.lease.epoch, 5, {"k": 1})
    clocked_store.release(file_job, rec.lease.epoch)
    clocked_store.sweep(file_job)
    assert lock_path.stat().st_ino == inode  # never removed or replaced [JOB-L3]
    assert lock_path.read_bytes() == b""
    assert stat.S_IMODE(rec_path.stat().st_mode) == 0o600
    assert sorted(os.listdir(clocked_store.jobs_dir)) == [f"{file_job}.json", f"{file_job}.json.lock"]


def test_identical_bytes_are_not_rewritten(clocked_store: jobctl.FileStore, file_job: str) -> None:
    """§2.3 step 4: an edit that changes nothing writes nothing (no rename)."""
    rec = clocked_store.claim(file_job, "w", 60)
    path = Path(clocked_store.path(file_job))
    inode = path.stat().st_ino
    clocked_store.renew(file_job, rec.lease.epoch, 60)  # same clock, same ttl: same bytes
    assert path.stat().st_ino == inode
    clocked_store.renew(file_job, rec.lease.epoch, 61)
    assert path.stat().st_ino != inode


@pytest.mark.parametrize(
    ("owner", "rel", "expected"),
    [
        ("", "jobs", True),
        ("", "jobs/x.json", True),
        ("", "JOBS/x", True),
        ("", " jobs. /x", True),
        ("", "jobs...", True),
        ("", "./jobs", True),
        ("", "a/../jobs", True),
        ("", "jobs\\x.json.lock", True),
        ("", "work", True),
        ("", "work/anyone", True),
        ("alice", "work", True),
        ("alice", "work/alice", False),
        ("alice", "work/alice/part.bin", False),
        ("alice", "WORK/Alice./x", False),
        ("Alice ", "work/alice", False),
        ("alice", "work/bob", True),
        ("alice", "work/alice/../bob", True),
        ("alice", "work\\alice\\x", False),
        ("", "services.json", True),
        ("", "Services.JSON", True),
        ("", "services.json.", True),
        ("", "x/services.json", False),
        ("", "models/x.gguf", False),
        ("", "supervisor.json", False),
        ("", "", False),
        ("", ".", False),
        ("", "..", False),
        ("", "../jobs", False),
        ("", "a/../../jobs", False),
        ("", "jobsx", False),
        ("", "workshop/x", False),
    ],
)
def test_reserved(owner: str, rel: str, expected: bool) -> None:
    assert layout.reserved(owner, rel) is expected


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("services.json", "services.json"),
        ("Jobs. ", "jobs"),
        (" Work ", "work"),
        ("./x", "x"),
        ("x/", "x"),
        ("a/../b", "b"),
        ("a/b", ""),
        ("", ""),
        ("..", ""),
        ("...", "..."),
    ],
)
def test_root_name(rel: str, expected: str) -> None:
    assert layout.root_name(rel) == expected


# -- ids [§4] --------------------------------------------------------------------------------------

BAD_IDS = ["", " ", "\t", ".", "..", ".x", ".hidden.json", "a/b", "../x", "a\\b", "a\x00b", "a\nb", "a\x1fb", "a\x7fb"]


def _ops_taking_an_id(store: jobctl.FileStore, job_id: str) -> list[tuple[str, Callable[[], object]]]:
    return [
        ("load", lambda: store.load(job_id)),
        ("claim", lambda: store.claim(job_id, "w", 60)),
        ("renew", lambda: store.renew(job_id, 1, 60)),
        ("release", lambda: store.release(job_id, 1)),
        ("update", lambda: store.update(job_id, 1, lambda r: None)),
        ("progress", lambda: store.progress(job_id, 1, 1)),
        ("finish", lambda: store.finish(job_id, 1, "complete")),
        ("set_intent", lambda: store.set_intent(job_id, "pause", "me")),
        ("recall", lambda: store.recall(job_id, 1, "why", "me", 5)),
        ("cancel", lambda: store.cancel(job_id, "me")),
        ("work_path", lambda: store.work_path(job_id)),
        ("sweep", lambda: store.sweep(job_id)),
        ("path", lambda: store.path(job_id)),
    ]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_bad_ids_refused_before_touching_the_filesystem(store: jobctl.FileStore, bad: str) -> None:
    root = Path(store.root)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    for name, call in _ops_taking_an_id(store, bad):
        with pytest.raises(Invalid):
            call()
        assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before, name
    if bad:  # an empty id on submit means "mint one"
        with pytest.raises(Invalid):
            store.submit(Record(id=bad, kind="k", spec={}))
    assert os.listdir(store.jobs_dir) == []
    assert sorted(os.listdir(root)) == ["jobs", "work"]


@pytest.mark.parametrize("bad", ["a\x85b", "a\x9bb"], ids=repr)
def test_c1_control_characters_in_ids_refused(store: jobctl.FileStore, bad: str) -> None:
    """§4: any control character, C1 included. Failed on 140c712."""
    with pytest.raises(Invalid):
        store.load(bad)


@pytest.mark.parametrize("blank", ["\u00a0", "\u3000", "\u2003 ", "\u2028"], ids=repr)
def test_unicode_blank_ids_refused(store: jobctl.FileStore, blank: str) -> None:
    assert not blank.strip()
    with pytest.raises(Invalid):
        store.load(blank)


def test_supplied_unusual_but_safe_ids_accepted(store: jobctl.FileStore) -> None:
    for job_id in ("x", "job-1.v2", "caf\u00e9", "a b", "1788673445494-d76944a8b5a24268cd6d"):
        assert store.submit(Record(id=job_id, kind="k", spec={})) == job_id
        assert store.load(job_id).id == job_id


def test_ids_of_letters_digits_dash_and_underscore_are_taken_as_the_pattern_takes_them() -> None:
    """ids.check takes such an id without its pattern (not compiled at start-up): only ids the pattern takes."""
    from jobctl import ids

    plain = [chr(c) for c in range(128) if chr(c).isalnum() or chr(c) in "-_"]
    assert len(plain) == 64
    for ch in plain:
        for job_id in (ch, ch + "x", "x" + ch, "-" + ch, ch * ids.MAX_BYTES):
            assert ids._SAFE.match(job_id), job_id
            assert ids.check(job_id) == job_id
        with pytest.raises(Invalid, match="longer than 200 bytes"):
            ids.check(ch * (ids.MAX_BYTES + 1))
    for job_id in (".x", "..", "x/y", "x\\y", "", " ", "x\ny", "x\x7fy"):  # the others: the pattern decides
        assert not ids.safe(job_id), job_id


def test_minted_ids(store: jobctl.FileStore) -> None:
    import re

    first = submit(store)
    second = submit(store)
    for job_id in (first, second):
        assert re.fullmatch(r"[0-9]{13}-[0-9a-f]{20}", job_id)
    assert first != second


# -- verdict classes -------------------------------------------------------------------------------


def test_verdict_classes_are_distinct() -> None:
    classes = [NotFound, LeaseHeld, StaleEpoch, LeaseExpired, Terminal, UnknownSchema, Invalid, Refused]
    assert [c.verdict for c in classes] == [
        "not_found",
        "lease_held",
        "stale_epoch",
        "lease_expired",
        "terminal",
        "unknown_schema",
        "invalid",
        "refused",
    ]
    codes = [c.exit_code for c in classes]
    assert len(set(codes)) == 8 and not set(codes) & {0, 1, 2}
    for cls in classes:
        assert errors.verdict_class(cls.verdict) is cls
        assert errors.verdict_class(cls.legacy) is cls
    assert errors.verdict_class("unknown-model") is UnknownSchema


# -- submit ----------------------------------------------------------------------------------------


def test_submit_effects(any_store: Store, clock: Any) -> None:
    rec = Record(
        id="", kind="download", spec={"a": 1}, checkpoint={"c": 1}, requires=["gpu"], extensions={"x.t/e@1": 1}
    )
    rec.lease = record.Lease("sneaky", 7, clock.now + T(hours=1))
    rec.progress.done = 3
    job_id = any_store.submit(rec)
    got = any_store.load(job_id)
    assert got.id == job_id and rec.id == ""  # the caller's record was not touched
    assert got.state == "pending"
    assert got.created_at == got.updated_at == got.progress.updated_at == clock.now
    assert (got.lease.owner, got.lease.epoch) == ("", 0)
    assert record.format_time(got.lease.expires_at) == "1970-01-01T00:00:00.000000Z"
    assert b'"expires_at": "1970-01-01T00:00:00.000000Z"' in data_of(any_store, job_id)  # type: ignore[operator]
    assert got.progress.done == 3 and got.checkpoint == {"c": 1} and got.requires == ["gpu"]
    assert got.content == [BASE, "x.t/e@1"] and got.critical == [BASE]


def test_submit_refusals(any_store: Store, job: str) -> None:
    refused(any_store, job, Exists, lambda: any_store.submit(Record(id=job, kind="other", spec={"b": 2})))
    for spec in (None, [1], "s", 5, jobctl.Raw("[1]")):
        with pytest.raises(Invalid):
            any_store.submit(Record(id="new-one", kind="k", spec=spec))
    with pytest.raises(Invalid):
        any_store.submit(Record(id="new-one", kind=" ", spec={}))
    with pytest.raises(Invalid):
        any_store.submit(Record(id="new-one", kind="k", spec={}, intent=record.Intent("halt")))
    with pytest.raises(Invalid):
        any_store.submit(Record(id="new-one", kind="k", spec={}, envelope=Envelope("Not A Schema")))
    with pytest.raises(UnknownSchema):
        any_store.submit(Record(id="new-one", kind="k", spec={}, extensions={"x.t/c@1": 1}, critical=[BASE, "x.t/c@1"]))
    assert data_of(any_store, "new-one") is None


def test_submit_keeps_spec_spelling(any_store: Store) -> None:
    job_id = any_store.submit(Record(kind="k", spec=jobctl.Raw('{"n": 1.50, "s": "a\\/b"}')))
    assert any_store.load(job_id).opaque_text("spec") == '{"n":1.50,"s":"a\\/b"}'


def test_submit_refuses_a_spec_too_deep_for_the_record(any_store: Store) -> None:
    """§3.5 counts the record: refuse before writing a file nobody can load. Failed on 140c712."""
    deep = '{"a":' * 63 + "{}" + "}" * 63  # 64 containers; 65 with the record
    with pytest.raises(Invalid):
        any_store.submit(Record(id="deep", kind="k", spec=jobctl.Raw(deep)))
    assert data_of(any_store, "deep") is None


# -- load and list ---------------------------------------------------------------------------------


def plant(store: Store, job_id: str, name: str, critical: bool) -> None:
    """The scenario driver's textual forgery (§6.4 ``plant``)."""
    out = []
    for line in store.load_bytes(job_id).decode().split("\n"):
        out.append(line)
        if line == '  "content": [' or (critical and line == '  "critical": ['):
            out.append(f'    "{name}",')
    overwrite(store, job_id, "\n".join(out).encode())


def test_load_refusals(any_store: Store) -> None:
    refused(any_store, "missing", NotFound, lambda: any_store.load("missing"))
    broken = submit(any_store, id="broken")
    overwrite(any_store, broken, b'{"content": [')
    refused(any_store, broken, Invalid, lambda: any_store.load(broken))
    overwrite(any_store, broken, b"")
    refused(any_store, broken, Invalid, lambda: any_store.load(broken))
    newer = submit(any_store, id="newer")
    plant(any_store, newer, "abstraction.test/hovercraft@7", critical=True)
    refused(any_store, newer, UnknownSchema, lambda: any_store.load(newer))


def test_list_sorted_and_names_the_unreadable(clocked_store: jobctl.FileStore) -> None:
    ids = [submit(clocked_store, id=i) for i in ("b-2", "a-1", "c-3", "d-4", "e-5")]
    Path(clocked_store.path("c-3")).write_bytes(b"not json")
    plant(clocked_store, "d-4", "abstraction.test/hovercraft@7", critical=True)
    plant(clocked_store, "e-5", "abstraction.test/hovercraft@7", critical=False)  # advisory: readable
    jobs = Path(clocked_store.jobs_dir)
    # things a reader must tolerate and ignore
    (jobs / "a-1.json.lock").touch()
    (jobs / "z-9.json.lock").touch()  # a lock with no record
    (jobs / "a-1.json.abc123.tmp").write_bytes(b"{")
    (jobs / "a-1.epoch.3").write_bytes(b"")
    (jobs / "a-1.tmp-77-beef").write_bytes(b"{")
    (jobs / "dir.json").mkdir()  # not a record, but at a record's name: named, never read
    (Path(clocked_store.root) / "services.json").write_text("{}")
    listing = clocked_store.list()
    assert [r.id for r in listing] == ["a-1", "b-2", "e-5"]
    assert isinstance(listing, jobctl.Listing)
    unreadable = {job_id: type(exc) for job_id, exc in listing.unreadable}
    assert unreadable == {"c-3": Invalid, "d-4": UnknownSchema, "dir": Invalid}
    assert sorted(ids) == ["a-1", "b-2", "c-3", "d-4", "e-5"]
    assert listing[2].content[0] == "abstraction.test/hovercraft@7"


def test_list_of_an_empty_store(any_store: Store) -> None:
    listing = any_store.list()
    assert list(listing) == [] and listing.unreadable == []


# -- claim -----------------------------------------------------------------------------------------


def test_claim_effects(any_store: Store, clock: Any, job: str) -> None:
    before = any_store.load(job)
    clock.advance(5)
    rec = any_store.claim(job, "alpha", 90)
    assert (rec.lease.owner, rec.lease.epoch, rec.lease.expires_at) == ("alpha", 1, clock.now + T(seconds=90))
    assert rec.lease.recall is None
    assert rec.state == "running"
    assert rec.updated_at == before.updated_at  # §10.11: claim leaves updated_at
    assert rec.progress.updated_at == before.progress.updated_at
    assert any_store.load(job).lease.epoch == 1


def test_claim_keeps_everything_but_lease_and_state(any_store: Store, clock: Any) -> None:
    """[JOB-L4] [JOB-O5]: the record as found under the lock, lease and state aside."""
    job_id = submit(any_store, requires=["gpu"], extensions={"x.t/e@1": jobctl.Raw('{"v": 1.50}')})
    first = any_store.claim(job_id, "alpha", 60)

    def enrich(r: Record) -> None:
        r.checkpoint = jobctl.Raw('{"verified_prefix": 0, "etag": "\\u00e9"}')
        r.error = "transient"
        r.progress.done = 7
        r.progress.total = 9
        r.delegation = Delegation("bits", "{G}")

    clock.advance(1)
    any_store.update(job_id, first.lease.epoch, enrich)
    clock.advance(1)
    any_store.set_intent(job_id, "pause", "op")
    clock.advance(1)
    any_store.recall(job_id, first.lease.epoch, "make room", "boss", 30)
    clock.advance(1)
    any_store.release(job_id, first.lease.epoch)
    before = data_of(any_store, job_id)
    assert before is not None
    clock.advance(1)
    any_store.claim(job_id, "beta", 60)
    after = data_of(any_store, job_id)
    assert after is not None

    def strip(data: bytes) -> bytes:
        rec = record.decode(data)
        rec.lease = record.Lease()
        rec.state = "pending"
        rec.content = [n for n in rec.content if n != RECALL]
        rec.critical = [n for n in rec.critical if n != RECALL]
        return record.encode(rec, rederive=False)

    assert strip(after) == strip(before)
    got = record.decode(after)
    assert got.state == "running"  # delegated running stays running; claim makes it running anyway
    assert got.want == "pause" and got.error == "transient" and got.progress.done == 7
    assert got.opaque_text("x:x.t/e@1") == '{"v":1.50}'
    assert got.lease.recall is None and RECALL not in got.content  # [JOB-R7]


def test_claim_refusals_in_order(any_store: Store, clock: Any, job: str) -> None:
    # blank owner first, even before not-found [JOB-O3]
    for owner in ("", "  "):
        refused(any_store, "missing", Refused, lambda owner=owner: any_store.claim("missing", owner, 60))
        refused(any_store, job, Refused, lambda owner=owner: any_store.claim(job, owner, 60))
    refused(any_store, "missing", NotFound, lambda: any_store.claim("missing", "w", 60))
    mine = any_store.claim(job, "alpha", 60)
    # held by another owner [JOB-O1]
    refused(any_store, job, LeaseHeld, lambda: any_store.claim(job, "beta", 60))
    clock.advance(59.999999)
    refused(any_store, job, LeaseHeld, lambda: any_store.claim(job, "beta", 60))
    # held by the same owner under a recall [JOB-R5]
    any_store.recall(job, mine.lease.epoch, "yield", "boss", 30)
    refused(any_store, job, LeaseHeld, lambda: any_store.claim(job, "alpha", 60))
    # terminal is checked before "held by another"
    any_store.finish(job, mine.lease.epoch, "complete")
    refused(any_store, job, Terminal, lambda: any_store.claim(job, "beta", 60))
    refused(any_store, job, Terminal, lambda: any_store.claim(job, "alpha", 60))


def test_claim_lapsed_lease_at_the_instant_of_expiry(any_store: Store, clock: Any, job: str) -> None:
    any_store.claim(job, "alpha", 60)
    clock.advance(60)  # now == expires_at: no longer held
    rec = any_store.claim(job, "beta", 60)
    assert (rec.lease.owner, rec.lease.epoch) == ("beta", 2)


def test_claim_same_owner_live_bumps_epoch(any_store: Store, clock: Any, job: str) -> None:
    """[JOB-O2]: allowed while live and not recalled; the epoch still rises."""
    first = any_store.claim(job, "alpha", 60)
    clock.advance(10)
    again = any_store.claim(job, "alpha", 60)
    assert again.lease.epoch == first.lease.epoch + 1
    assert again.lease.expires_at == clock.now + T(seconds=60)
    refused(any_store, job, StaleEpoch, lambda: any_store.progress(job, first.lease.epoch, 1))


def _blocked_on(lock_path: str) -> bool:
    """Whether some open file description waits for the flock on ``lock_path`` (Linux /proc/locks)."""
    st = os.stat(lock_path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open("/proc/locks", encoding="ascii") as fh:
        return any("->" in line and "FLOCK" in line and dev in line for line in fh)


def claim_against_an_interloper(
    store: jobctl.FileStore, job_id: str, owner: str, interloper: Callable[[], None]
) -> BaseException | Record:
    """Run ``claim`` so that ``interloper`` writes the record after claim's unlocked read.

    The test holds the record's flock, starts the claim in a thread, waits
    until the claim is queued on the lock (so its read is done), lets the
    interloper rewrite the file as another writer would, then lets go.
    """
    lock_path = store.path(job_id) + ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    outcome: list[BaseException | Record] = []

    def run() -> None:
        try:
            outcome.append(store.claim(job_id, owner, 60))
        except BaseException as exc:
            outcome.append(exc)

    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        for _ in range(20000):
            if _blocked_on(lock_path) or outcome:
                break
            time.sleep(0.001)
        assert not outcome, f"claim finished without waiting for the record's lock: {outcome}"
        assert _blocked_on(lock_path), "claim never queued on the record's lock"
        interloper()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    thread.join(60)
    assert outcome, "claim did not finish"
    return outcome[0]


def rewrite(store: jobctl.FileStore, job_id: str, change: Callable[[Record], None]) -> None:
    """Another writer's replace of the record (the caller holds the lock)."""
    path = store.path(job_id)
    rec = record.decode(Path(path).read_bytes())
    change(rec)
    Path(path + ".interloper.tmp").write_bytes(record.encode(rec))
    os.replace(path + ".interloper.tmp", path)


needs_proc_locks = pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux /proc/locks")


@needs_proc_locks
def test_claim_refused_when_the_record_moved_since_it_was_read(clocked_store: jobctl.FileStore, file_job: str) -> None:
    """[JOB-L4]: the epoch read before the lock differs under it -> lease_held, though nobody holds it."""

    def claimed_and_released(r: Record) -> None:
        r.lease = record.Lease("", r.lease.epoch + 1, clocked_store.now())

    got = claim_against_an_interloper(
        clocked_store, file_job, "alpha", lambda: rewrite(clocked_store, file_job, claimed_and_released)
    )
    assert type(got) is LeaseHeld, got
    rec = clocked_store.load(file_job)
    assert (rec.lease.owner, rec.lease.epoch, rec.state) == ("", 1, "pending")  # the interloper's record, untouched


@needs_proc_locks
def test_claim_moved_is_checked_before_terminal(clocked_store: jobctl.FileStore, file_job: str) -> None:
    def finished(r: Record) -> None:
        r.lease = record.Lease("other", r.lease.epoch + 1, clocked_store.now() + T(seconds=60))
        r.state = "failed"

    got = claim_against_an_interloper(
        clocked_store, file_job, "alpha", lambda: rewrite(clocked_store, file_job, finished)
    )
    assert type(got) is LeaseHeld, got


@needs_proc_locks
def test_claim_unmoved_record_under_contention_is_claimed(clocked_store: jobctl.FileStore, file_job: str) -> None:
    """The control: the same race with an interloper that changes nothing but the error -> the claim lands."""
    got = claim_against_an_interloper(
        clocked_store, file_job, "alpha", lambda: rewrite(clocked_store, file_job, lambda r: setattr(r, "error", "x"))
    )
    assert isinstance(got, Record) and got.lease.epoch == 1 and got.error == "x"


ODD_LAYOUT = (
    '{\n  "content": [\n    "abstraction.job/base@1"\n  ],\n  "critical": ["abstraction.job/base@1"],\n'
    '  "id": "odd", "kind": "k", "state": "pending",\n'
    '  "spec": {\n  "lease": {\n    "owner": "",\n    "epoch": 5,\n    "x": 1}},\n'
    '  "progress": {"done": 0, "updated_at": "2026-09-06T05:44:05.494626Z"},\n'
    '  "lease": {"owner": "", "epoch": 0, "expires_at": ""},\n'
    '  "created_at": "2026-09-06T05:44:05.494626Z", "updated_at": "2026-09-06T05:44:05.494626Z"\n}\n'
)


def test_claim_reads_the_epoch_of_any_valid_layout(any_store: Store) -> None:
    rec = record.decode(ODD_LAYOUT.encode())
    assert rec.lease.epoch == 0 and rec.spec == {"lease": {"owner": "", "epoch": 5, "x": 1}}
    overwrite(any_store, "odd", ODD_LAYOUT.encode())
    got = any_store.claim("odd", "alpha", 60)
    assert got.lease.epoch == 1 and got.spec == rec.spec


def test_claim_continues_a_compact_one_line_record(any_store: Store) -> None:
    """Layout is not the contract: a valid record on one line is claimed like any other."""
    one_line = record.encode(record.decode(ODD_LAYOUT.encode())).decode().replace("\n", "").replace("  ", "")
    overwrite(any_store, "odd", one_line.encode())
    got = any_store.claim("odd", "alpha", 60)
    assert got.lease.epoch == 1 and got.spec == {"lease": {"owner": "", "epoch": 5, "x": 1}}


def test_claim_of_transferred_stays_transferred(any_store: Store, clock: Any, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    any_store.finish(job, mine.lease.epoch, "transferred")
    clock.advance(61)
    rec = any_store.claim(job, "beta", 60)
    assert rec.state == "transferred" and rec.lease.epoch == 2  # [JOB-T2]


@pytest.mark.parametrize("ttl", [-1, float("nan"), float("inf"), "60", None, True])
def test_claim_refuses_a_bad_ttl(any_store: Store, job: str, ttl: Any) -> None:
    refused(any_store, job, Invalid, lambda: any_store.claim(job, "w", ttl))


# -- renew -----------------------------------------------------------------------------------------


def test_renew_effects(any_store: Store, clock: Any, job: str) -> None:
    mine = any_store.claim(job, "alpha", 10)
    updated = any_store.load(job).updated_at
    clock.advance(5)
    rec = any_store.renew(job, mine.lease.epoch, 100)
    assert rec.lease.expires_at == clock.now + T(seconds=100)
    assert rec.lease.epoch == mine.lease.epoch and rec.lease.owner == "alpha"
    assert rec.updated_at == updated  # §10.11


def test_renew_refusals_in_order(any_store: Store, clock: Any, job: str) -> None:
    # never held: right epoch (0) but no lease -> lease_expired (§10.17)
    refused(any_store, job, LeaseExpired, lambda: any_store.renew(job, 0, 60))
    refused(any_store, "missing", NotFound, lambda: any_store.renew("missing", 0, 60))
    mine = any_store.claim(job, "alpha", 60)
    refused(any_store, job, StaleEpoch, lambda: any_store.renew(job, mine.lease.epoch + 1, 60))
    refused(any_store, job, StaleEpoch, lambda: any_store.renew(job, 0, 60))
    clock.advance(61)
    # stale is checked before lapsed
    refused(any_store, job, StaleEpoch, lambda: any_store.renew(job, 0, 60))
    refused(any_store, job, LeaseExpired, lambda: any_store.renew(job, mine.lease.epoch, 60))


def test_renew_after_release_is_expired(any_store: Store, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    any_store.release(job, mine.lease.epoch)
    refused(any_store, job, LeaseExpired, lambda: any_store.renew(job, mine.lease.epoch, 60))


def test_renew_allowed_on_terminal(any_store: Store, clock: Any, job: str) -> None:
    """[JOB-T6]."""
    mine = any_store.claim(job, "alpha", 60)
    any_store.finish(job, mine.lease.epoch, "complete")
    clock.advance(30)
    rec = any_store.renew(job, mine.lease.epoch, 60)
    assert rec.state == "complete" and rec.lease.expires_at == clock.now + T(seconds=60)


def test_renew_capped_at_recall_until(any_store: Store, clock: Any, job: str) -> None:
    """[JOB-R4]."""
    mine = any_store.claim(job, "alpha", 60)
    any_store.recall(job, mine.lease.epoch, "yield", "boss", 10)
    until = clock.now + T(seconds=10)
    clock.advance(2)
    assert any_store.renew(job, mine.lease.epoch, 300).lease.expires_at == until
    assert any_store.renew(job, mine.lease.epoch, 3).lease.expires_at == clock.now + T(seconds=3)
    clock.advance(5)  # past the 3 s renewal, before until
    refused(any_store, job, LeaseExpired, lambda: any_store.renew(job, mine.lease.epoch, 300))


# -- update / progress / finish --------------------------------------------------------------------


def test_update_effects(any_store: Store, clock: Any, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    clock.advance(3)

    def mutate(r: Record) -> None:
        r.progress.done = 10
        r.error = "retrying"
        r.requires = ["gpu", "net"]
        r.extensions["x.t/e@1"] = {"k": 1}

    rec = any_store.update(job, mine.lease.epoch, mutate)
    assert rec.updated_at == clock.now
    assert rec.progress.done == 10 and rec.error == "retrying" and rec.requires == ["gpu", "net"]
    assert rec.content == [BASE, "x.t/e@1"]
    assert rec.lease.epoch == mine.lease.epoch and rec.state == "running"


def test_update_refusals_in_order(any_store: Store, clock: Any, job: str) -> None:
    calls: list[int] = []

    def harmless(r: Record) -> None:
        calls.append(1)

    def moves_id(r: Record) -> None:
        calls.append(1)
        r.id = "other"

    refused(any_store, "missing", NotFound, lambda: any_store.update("missing", 0, harmless))
    # never held: epoch 0 matches, lease not held
    refused(any_store, job, LeaseExpired, lambda: any_store.update(job, 0, harmless))
    mine = any_store.claim(job, "alpha", 60)
    refused(any_store, job, StaleEpoch, lambda: any_store.update(job, mine.lease.epoch + 1, moves_id))
    clock.advance(61)
    refused(any_store, job, StaleEpoch, lambda: any_store.update(job, 0, moves_id))  # stale before lapsed
    refused(any_store, job, LeaseExpired, lambda: any_store.update(job, mine.lease.epoch, moves_id))
    assert calls == []  # mutate never ran for a refused holder
    mine = any_store.claim(job, "alpha", 60)

    class Boom(Exception):
        pass

    def fails(r: Record) -> None:
        r.progress.done = 99
        raise Boom("mutation failed")

    before = data_of(any_store, job)
    with pytest.raises(Boom):
        any_store.update(job, mine.lease.epoch, fails)
    assert data_of(any_store, job) == before
    refused(any_store, job, Invalid, lambda: any_store.update(job, mine.lease.epoch, moves_id))
    # terminal first: even a stale epoch and an id move are reported as terminal
    any_store.finish(job, mine.lease.epoch, "failed")
    calls.clear()
    refused(any_store, job, Terminal, lambda: any_store.update(job, mine.lease.epoch, moves_id))
    refused(any_store, job, Terminal, lambda: any_store.update(job, 0, moves_id))
    assert calls == []


@pytest.mark.parametrize(
    ("name", "mutate"),
    [
        ("id", lambda r: setattr(r, "id", "other-id")),
        ("kind", lambda r: setattr(r, "kind", "other-kind")),
        ("spec replaced", lambda r: setattr(r, "spec", {"fetch": "y"})),
        ("spec in place", lambda r: r.spec.__setitem__("extra", 1)),
        ("spec respelled", lambda r: setattr(r, "spec", jobctl.Raw('{"fetch":"\\u0078"}'))),
        ("created_at", lambda r: setattr(r, "created_at", r.created_at + T(seconds=1))),
        ("envelope added", lambda r: setattr(r, "envelope", Envelope("a.b/c@1"))),
    ],
)
def test_immutables_refused_invalid(any_store: Store, job: str, name: str, mutate: Any) -> None:
    """[JOB-M1] (and [JOB-V4] for the envelope)."""
    mine = any_store.claim(job, "alpha", 60)
    refused(any_store, job, Invalid, lambda: any_store.update(job, mine.lease.epoch, mutate))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: setattr(r, "envelope", None),
        lambda r: setattr(r, "envelope", Envelope("nas.example/transfer@4", ["cancel"])),
        lambda r: setattr(r, "envelope", Envelope("nas.example/transfer@3", ["cancel", "pause"])),
    ],
    ids=["removed", "other-schema", "other-actions"],
)
def test_envelope_never_moves(any_store: Store, mutate: Any) -> None:
    job_id = submit(any_store, envelope=Envelope("nas.example/transfer@3", ["cancel"]))
    mine = any_store.claim(job_id, "alpha", 60)
    refused(any_store, job_id, Invalid, lambda: any_store.update(job_id, mine.lease.epoch, mutate))


@pytest.mark.parametrize(
    "mutate",
    [lambda r: r.envelope.actions.append("pause"), lambda r: setattr(r.envelope, "schema", "nas.example/transfer@4")],
    ids=["actions-in-place", "schema-in-place"],
)
def test_envelope_edited_in_place_is_a_move(any_store: Store, mutate: Any) -> None:
    """[JOB-V4]/[JOB-M1] hold for in-place edits too. Failed on 140c712 (snapshot by reference)."""
    job_id = submit(any_store, envelope=Envelope("nas.example/transfer@3", ["cancel"]))
    mine = any_store.claim(job_id, "alpha", 60)
    refused(any_store, job_id, Invalid, lambda: any_store.update(job_id, mine.lease.epoch, mutate))


def test_spec_compared_compact(any_store: Store) -> None:
    """Whitespace is not a change; an equal value is not a change."""
    job_id = any_store.submit(Record(kind="k", spec=jobctl.Raw('{"n":1.50,"s":"a\\/b"}')))
    mine = any_store.claim(job_id, "alpha", 60)
    any_store.update(job_id, mine.lease.epoch, lambda r: setattr(r, "spec", jobctl.Raw('{ "n" : 1.50 , "s":"a\\/b" }')))
    any_store.update(job_id, mine.lease.epoch, lambda r: setattr(r, "spec", {"n": 1.5, "s": "a/b"}))
    assert any_store.load(job_id).opaque_text("spec") == '{"n":1.50,"s":"a\\/b"}'
    refused(
        any_store,
        job_id,
        Invalid,
        lambda: any_store.update(
            job_id, mine.lease.epoch, lambda r: setattr(r, "spec", jobctl.Raw('{"n":1.5,"s":"a/b"}'))
        ),
    )


def test_update_may_make_the_record_terminal(any_store: Store, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    rec = any_store.update(job, mine.lease.epoch, lambda r: setattr(r, "state", "complete"))
    assert rec.state == "complete" and TERMINAL_MODEL in rec.critical


def test_update_may_move_state_backwards(any_store: Store, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    any_store.finish(job, mine.lease.epoch, "transferred")
    assert any_store.finish(job, mine.lease.epoch, "pending").state == "pending"  # §10.17


def test_progress_effects(any_store: Store, clock: Any, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    clock.advance(2)
    rec = any_store.progress(job, mine.lease.epoch, 16, jobctl.Raw('{"verified_prefix":16}'))
    assert rec.progress.done == 16 and rec.progress.updated_at == clock.now and rec.updated_at == clock.now
    assert rec.checkpoint_text() == '{"verified_prefix":16}'
    clock.advance(2)
    rec = any_store.progress(job, mine.lease.epoch, 20)  # checkpoint left as it is
    assert rec.progress.done == 20 and rec.checkpoint_text() == '{"verified_prefix":16}'
    rec = any_store.progress(job, mine.lease.epoch, 24, {"verified": [[16, 24], [0, 16]]})
    assert rec.checkpoint_text() == '{"verified_prefix":24,"verified":[[0,24]]}'
    assert "abstraction.download/ranges@1" in rec.content


def test_progress_refusals(any_store: Store, clock: Any, job: str) -> None:
    refused(any_store, "missing", NotFound, lambda: any_store.progress("missing", 0, 1))
    mine = any_store.claim(job, "alpha", 60)
    refused(any_store, job, StaleEpoch, lambda: any_store.progress(job, 5, 1))
    refused(any_store, job, Invalid, lambda: any_store.progress(job, mine.lease.epoch, -1))
    refused(any_store, job, Invalid, lambda: any_store.progress(job, mine.lease.epoch, 1, {"verified": [[4, 2]]}))
    refused(any_store, job, Invalid, lambda: any_store.progress(job, mine.lease.epoch, 1, {"x": float("nan")}))
    clock.advance(60)
    refused(any_store, job, LeaseExpired, lambda: any_store.progress(job, mine.lease.epoch, 1))


def test_progress_too_deep_checkpoint_leaves_the_record_alone(any_store: Store, job: str) -> None:
    """A refusal writes nothing (§2.3 step 3). On 140c712 the file was replaced, then the re-read refused."""
    mine = any_store.claim(job, "alpha", 60)
    deep = jobctl.Raw("[" * 64 + "]" * 64)
    refused(any_store, job, Invalid, lambda: any_store.progress(job, mine.lease.epoch, 1, deep))
    any_store.load(job)


def test_finish_effects_and_refusals(any_store: Store, clock: Any, job: str) -> None:
    refused(any_store, "missing", NotFound, lambda: any_store.finish("missing", 0, "complete"))
    mine = any_store.claim(job, "alpha", 60)
    refused(any_store, job, Invalid, lambda: any_store.finish(job, mine.lease.epoch, "done"))
    refused(any_store, job, StaleEpoch, lambda: any_store.finish(job, 9, "done"))  # state word checked later
    clock.advance(1)
    rec = any_store.finish(job, mine.lease.epoch, "failed", error="no fetcher", checkpoint={"c": 1}, done=3)
    assert (rec.state, rec.error, rec.checkpoint, rec.progress.done) == ("failed", "no fetcher", {"c": 1}, 3)
    assert rec.updated_at == clock.now == rec.progress.updated_at
    assert rec.content == [BASE, TERMINAL_MODEL] and rec.critical == [BASE, TERMINAL_MODEL]
    refused(any_store, job, Terminal, lambda: any_store.finish(job, mine.lease.epoch, "done"))
    refused(any_store, job, Terminal, lambda: any_store.finish(job, mine.lease.epoch, "pending"))


@pytest.mark.parametrize("state", ["pending", "running", "transferred", "complete", "failed", "cancelled"])
def test_finish_accepts_every_state(any_store: Store, job: str, state: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    assert any_store.finish(job, mine.lease.epoch, state).state == state


# -- release ---------------------------------------------------------------------------------------


def test_release_effects(any_store: Store, clock: Any, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    clock.advance(4)
    rec = any_store.release(job, mine.lease.epoch)
    assert (rec.lease.owner, rec.lease.epoch, rec.lease.expires_at) == ("", mine.lease.epoch, clock.now)
    assert rec.state == "pending" and rec.updated_at == clock.now  # [JOB-L6]


def test_release_keeps_recall(any_store: Store, clock: Any, job: str) -> None:
    """[JOB-R6]."""
    mine = any_store.claim(job, "alpha", 60)
    any_store.recall(job, mine.lease.epoch, "make room", "boss", 30)
    rec = any_store.release(job, mine.lease.epoch)
    assert rec.lease.recall is not None and rec.lease.recall.reason == "make room"
    assert rec.state == "pending" and RECALL in rec.critical
    refused(any_store, job, LeaseExpired, lambda: any_store.recall(job, mine.lease.epoch, "again", "b", 5))
    assert any_store.claim(job, "beta", 60).lease.recall is None  # [JOB-R7]


def test_release_leaves_delegated_running(any_store: Store, job: str) -> None:
    """§10.10: a delegated record stays running on release."""
    mine = any_store.claim(job, "alpha", 60)
    any_store.update(job, mine.lease.epoch, lambda r: setattr(r, "delegation", Delegation("bits", "{G}")))
    rec = any_store.release(job, mine.lease.epoch)
    assert rec.state == "running" and rec.lease.owner == ""


def test_release_of_transferred_stays(any_store: Store, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    any_store.finish(job, mine.lease.epoch, "transferred")
    assert any_store.release(job, mine.lease.epoch).state == "transferred"


def test_release_refusals_in_order(any_store: Store, clock: Any, job: str) -> None:
    refused(any_store, "missing", NotFound, lambda: any_store.release("missing", 0))
    refused(any_store, job, LeaseExpired, lambda: any_store.release(job, 0))
    mine = any_store.claim(job, "alpha", 60)
    refused(any_store, job, StaleEpoch, lambda: any_store.release(job, 2))
    clock.advance(60)
    refused(any_store, job, StaleEpoch, lambda: any_store.release(job, 2))
    refused(any_store, job, LeaseExpired, lambda: any_store.release(job, mine.lease.epoch))
    mine = any_store.claim(job, "alpha", 60)
    any_store.release(job, mine.lease.epoch)
    refused(any_store, job, LeaseExpired, lambda: any_store.release(job, mine.lease.epoch))  # twice
    mine = any_store.claim(job, "alpha", 60)
    any_store.finish(job, mine.lease.epoch, "cancelled")
    refused(any_store, job, Terminal, lambda: any_store.release(job, mine.lease.epoch))  # [JOB-T5]
    refused(any_store, job, Terminal, lambda: any_store.release(job, 0))


# -- set_intent ------------------------------------------------------------------------------------


def test_intent_effects(any_store: Store, clock: Any, job: str) -> None:
    assert any_store.load(job).intent is None and any_store.load(job).want == "run"  # [JOB-I2]
    clock.advance(1)
    rec = any_store.set_intent(job, "pause", "op")
    assert rec.intent == record.Intent("pause", "op", clock.now)
    assert rec.updated_at == clock.now
    assert rec.content == [BASE, INTENT] and rec.critical == [BASE, INTENT]
    assert rec.lease.epoch == 0  # no epoch involved [JOB-I3]
    clock.advance(1)
    again = any_store.set_intent(job, "pause", "op")  # idempotent [JOB-I4]
    assert again.want == "pause"
    rec = any_store.set_intent(job, "run", "op")
    assert rec.intent is not None and rec.want == "run"  # recorded, never deleted [JOB-I7]
    assert INTENT in rec.critical


def test_intent_accepted_while_held_and_on_transferred(any_store: Store, job: str) -> None:
    mine = any_store.claim(job, "alpha", 60)
    assert any_store.set_intent(job, "cancel", "op").lease.owner == "alpha"
    any_store.finish(job, mine.lease.epoch, "transferred")
    assert any_store.set_intent(job, "pause", "op").want == "pause"  # [JOB-I6]


def test_intent_refusals_in_order(any_store: Store, job: str) -> None:
    # the word is checked before reading: a missing record with a bad word is invalid [JOB-I1]
    refused(any_store, "missing", Invalid, lambda: any_store.set_intent("missing", "halt", "me"))
    for word in ("halt", "", "Run", "PAUSE", "stop"):
        refused(any_store, job, Invalid, lambda word=word: any_store.set_intent(job, word, "me"))
    refused(any_store, "missing", NotFound, lambda: any_store.set_intent("missing", "pause", "me"))
    assert any_store.load(job).want == "run"
    mine = any_store.claim(job, "alpha", 60)
    any_store.finish(job, mine.lease.epoch, "complete")
    for word in ("run", "pause", "cancel"):
        refused(any_store, job, Terminal, lambda word=word: any_store.set_intent(job, word, "me"))  # [JOB-I5]
    refused(any_store, job, Invalid, lambda: any_store.set_intent(job, "halt", "me"))


# -- recall ----------------------------------------------------------------------------------------


def test_recall_effects(any_store: Store, clock: Any, job: str) -> None:
    any_store.set_intent(job, "pause", "op")
    mine = any_store.claim(job, "alpha", 60)
    clock.advance(1)
    rec = any_store.recall(job, mine.lease.epoch, "make room", "boss", 10)
    assert rec.lease.recall == record.Recall("make room", clock.now, clock.now + T(seconds=10), "boss")
    assert rec.lease.expires_at == clock.now + T(seconds=10)  # lowered [JOB-R3]
    assert rec.updated_at == clock.now
    assert rec.want == "pause"  # intent untouched [JOB-R8]
    assert rec.lease.owner == "alpha" and rec.lease.epoch == mine.lease.epoch
    assert rec.content == [BASE, INTENT, RECALL] and rec.critical == [BASE, INTENT, RECALL]
    # a longer grace does not extend the lease; a repeated recall rewrites at/until
    clock.advance(1)
    rec = any_store.recall(job, mine.lease.epoch, "later", "boss", 100)
    assert rec.lease.recall == record.Recall("later", clock.now, clock.now + T(seconds=100), "boss")
    assert rec.lease.expires_at == clock.now - T(seconds=1) + T(seconds=10)
    # the holder may still checkpoint before the lowered expiry, then it is evicted
    clock.advance(8.999999)
    assert any_store.progress(job, mine.lease.epoch, 8).progress.done == 8
    clock.advance(0.000001)
    refused(any_store, job, LeaseExpired, lambda: any_store.progress(job, mine.lease.epoch, 16))


def test_recall_grace_beyond_expiry_keeps_expiry(any_store: Store, clock: Any, job: str) -> None:
    mine = any_store.claim(job, "alpha", 5)
    rec = any_store.recall(job, mine.lease.epoch, "r", "", 60)
    assert rec.lease.expires_at == clock.now + T(seconds=5)
    assert rec.lease.recall is not None and rec.lease.recall.by == ""
    assert b'"by"' not in data_of(any_store, job)  # type: ignore[operator]


def test_recall_refusals_in_order(any_store: Store, clock: Any, job: str) -> None:
    # a blank reason is refused before reading
    refused(any_store, "missing", Invalid, lambda: any_store.recall("missing", 0, "", "b", 5))
    refused(any_store, job, Invalid, lambda: any_store.recall(job, 0, "  ", "b", 5))
    refused(any_store, "missing", NotFound, lambda: any_store.recall("missing", 0, "r", "b", 5))
    refused(any_store, job, LeaseExpired, lambda: any_store.recall(job, 0, "r", "b", 5))  # never held
    mine = any_store.claim(job, "alpha", 60)
    refused(any_store, job, StaleEpoch, lambda: any_store.recall(job, 0, "r", "b", 5))  # [JOB-R1]
    refused(any_store, job, Invalid, lambda: any_store.recall(job, mine.lease.epoch, "", "b", 5))
    clock.advance(60)
    refused(any_store, job, StaleEpoch, lambda: any_store.recall(job, 0, "r", "b", 5))
    refused(any_store, job, LeaseExpired, lambda: any_store.recall(job, mine.lease.epoch, "r", "b", 5))
    mine = any_store.claim(job, "alpha", 60)
    any_store.finish(job, mine.lease.epoch, "complete")
    refused(any_store, job, Terminal, lambda: any_store.recall(job, mine.lease.epoch, "r", "b", 5))
    refused(any_store, job, Terminal, lambda: any_store.recall(job, 0, "r", "b", 5))  # terminal first


# -- cancel ----------------------------------------------------------------------------------------


def test_cancel_unheld_job_is_cancelled_and_kept_leased(any_store: Store, clock: Any, job: str) -> None:
    """[JOB-S4]: the asker takes the lease for 15 s, cancels, and does not release."""
    rec = any_store.cancel(job, "ctl")
    assert rec.state == "cancelled" and rec.want == "cancel"
    assert (rec.lease.owner, rec.lease.epoch, rec.lease.expires_at) == ("ctl", 1, clock.now + T(seconds=15))
    assert rec.critical == [BASE, INTENT, TERMINAL_MODEL]


def test_cancel_held_job_records_intent_only(any_store: Store, job: str) -> None:
    any_store.claim(job, "alpha", 60)
    rec = any_store.cancel(job, "ctl")
    assert rec.state == "running" and rec.want == "cancel"
    assert rec.lease.owner == "alpha" and rec.lease.epoch == 1


def test_cancel_twice_is_a_success_and_writes_nothing(any_store: Store, clock: Any, job: str) -> None:
    any_store.cancel(job, "ctl")
    before = data_of(any_store, job)
    clock.advance(100)
    assert any_store.cancel(job, "other").state == "cancelled"
    assert data_of(any_store, job) == before


def test_cancel_refusals(any_store: Store, job: str) -> None:
    refused(any_store, "missing", NotFound, lambda: any_store.cancel("missing", "ctl"))
    mine = any_store.claim(job, "alpha", 60)
    any_store.finish(job, mine.lease.epoch, "complete")
    refused(any_store, job, Terminal, lambda: any_store.cancel(job, "ctl"))


def test_a_cancel_that_ends_the_job_names_who_asked_and_why(any_store: Store, job: str) -> None:
    rec = any_store.cancel(job, "alice", reason="wrong voice")
    assert rec.state == "cancelled" and rec.error == "cancelled at the request of alice: wrong voice"
    assert rec.intent is not None and rec.intent.by == "alice"
    other = submit(any_store)
    assert any_store.cancel(other, "bob").error == "cancelled at the request of bob"


def test_a_held_job_is_leased_to_its_canceller_before_it_is_asked_to_cancel(any_store: Store, job: str) -> None:
    """A job waiting for approval never reads runnable on the way: claimed first, then given the intent."""
    any_store.set_intent(job, "pause", "gatekeeper")
    seen: list[bool] = []
    ask = any_store._ask_cancel  # type: ignore[attr-defined]

    def watched(job_id: str, by: str, reason: str) -> Record:
        rec = any_store.load(job_id)
        seen.append(record.held(rec.lease, any_store.now()) and rec.lease.owner == by and rec.want == "pause")
        return ask(job_id, by, reason)  # type: ignore[no-any-return]

    any_store._ask_cancel = watched  # type: ignore[attr-defined]
    try:
        rec = any_store.cancel(job, "alice", reason="rejected")
    finally:
        del any_store._ask_cancel  # type: ignore[attr-defined]
    assert seen == [True]  # the intent went on a job the canceller held already
    assert (rec.state, rec.want, rec.error) == ("cancelled", "cancel", "cancelled at the request of alice: rejected")


def test_the_reason_is_written_with_the_intent_and_is_that_intents_alone(any_store: Store, job: str) -> None:
    from jobctl.store.contract import CANCEL_REASON, cancel_reason_of

    any_store.claim(job, "worker-1", 60)
    rec = any_store.cancel(job, "alice", reason="rejected")  # held: only the intent (and why) is written
    assert rec.extensions[CANCEL_REASON] == {"by": "alice", "reason": "rejected"}
    assert cancel_reason_of(any_store.load(job)) == "rejected"
    again = any_store.set_intent(job, "cancel", "bob")  # another's intent: alice's reason is not bob's
    assert cancel_reason_of(again) == ""


def test_a_held_job_another_claimed_first_gets_the_intent_for_its_holder(any_store: Store, job: str) -> None:
    any_store.set_intent(job, "pause", "gatekeeper")
    any_store.claim(job, "worker-1", 60)  # a paused job is claimed only by hand; its holder honours the cancel
    rec = any_store.cancel(job, "alice", reason="rejected")
    assert (rec.state, rec.want, rec.lease.owner) == ("running", "cancel", "worker-1")


@pytest.mark.parametrize(
    ("reason", "says"),
    [("two\nlines", "not printable"), ("x" * 1001, "at most 1000"), ("\x1b[31m", "not printable")],
)
def test_a_cancel_reason_that_is_not_one_short_line_is_refused_before_anything_is_written(
    any_store: Store, job: str, reason: str, says: str
) -> None:
    error = refused(any_store, job, Invalid, lambda: any_store.cancel(job, "alice", reason=reason))
    assert says in error.message and job in error.message


# -- orphans ---------------------------------------------------------------------------------------


def test_orphans_rules(any_store: Store, clock: Any) -> None:
    s = any_store
    fresh = submit(s, id="a-fresh")  # freshly submitted pending: an orphan
    held_ = submit(s, id="b-held")
    s.claim(held_, "w", 100)
    lapsed = submit(s, id="c-lapsed")
    s.claim(lapsed, "w", 10)
    paused = submit(s, id="d-paused")  # pending + pause: not stranded [JOB-I11]
    s.set_intent(paused, "pause", "op")
    dead_paused = submit(s, id="e-dead-paused")  # running + pause under a dead owner [JOB-I12]
    s.claim(dead_paused, "w", 10)
    s.set_intent(dead_paused, "pause", "op")
    transferred = submit(s, id="f-transferred")  # [JOB-T2]
    m = s.claim(transferred, "w", 10)
    s.finish(transferred, m.lease.epoch, "transferred")
    done = submit(s, id="g-done")
    m = s.claim(done, "w", 10)
    s.finish(done, m.lease.epoch, "complete")
    delegated = submit(s, id="h-delegated")  # delegation not consulted [JOB-O6]
    m = s.claim(delegated, "w", 10)
    s.update(delegated, m.lease.epoch, lambda r: setattr(r, "delegation", Delegation("bits", "{G}")))
    cancel_wanted = submit(s, id="i-cancel-wanted")
    s.set_intent(cancel_wanted, "cancel", "op")
    released_paused = submit(s, id="j-released-paused")
    m = s.claim(released_paused, "w", 100)
    s.release(released_paused, m.lease.epoch)
    s.set_intent(released_paused, "pause", "op")
    newer = submit(s, id="k-newer")
    plant(s, newer, "abstraction.test/hovercraft@7", critical=True)

    assert [r.id for r in s.orphans()] == [fresh, cancel_wanted]
    clock.advance(10)
    got = s.orphans()
    assert [r.id for r in got] == [fresh, lapsed, dead_paused, delegated, cancel_wanted]
    assert [(job_id, type(exc)) for job_id, exc in got.unreadable] == [(newer, UnknownSchema)]
    clock.advance(100)
    assert [r.id for r in s.orphans()] == [fresh, held_, lapsed, dead_paused, delegated, cancel_wanted]


def test_orphan_predicate_at_the_expiry_instant(any_store: Store, clock: Any, job: str) -> None:
    any_store.claim(job, "w", 10)
    clock.advance(9.999999)
    assert [r.id for r in any_store.orphans()] == []
    clock.advance(0.000001)
    assert [r.id for r in any_store.orphans()] == [job]


# -- copies [JOB-M2] -------------------------------------------------------------------------------


def test_returned_records_are_copies(any_store: Store) -> None:
    job_id = submit(any_store, spec={"nested": {"list": [1]}}, extensions={"x.t/e@1": {"k": [1]}})
    on_disk = data_of(any_store, job_id)
    for rec in (any_store.load(job_id), any_store.list()[0], any_store.orphans()[0]):
        rec.spec["nested"]["list"].append(2)
        rec.extensions["x.t/e@1"]["k"].append(2)
        rec.progress.done = 99
        rec.lease.owner = "ghost"
        rec.content.append("x")
        rec.state = "complete"
    assert data_of(any_store, job_id) == on_disk
    again = any_store.load(job_id)
    assert again.spec == {"nested": {"list": [1]}} and again.progress.done == 0 and again.state == "pending"

    claimed = any_store.claim(job_id, "alpha", 60)
    claimed.spec["nested"]["list"].append(3)
    claimed.lease.epoch = 42
    kept: list[Record] = []

    def keep(r: Record) -> None:
        kept.append(r)
        r.progress.done = 1

    returned = any_store.update(job_id, 1, keep)
    on_disk = data_of(any_store, job_id)
    kept[0].progress.done = 1000  # the record handed to mutate, used after the write
    kept[0].checkpoint = {"late": True}
    returned.progress.done = 2000
    assert data_of(any_store, job_id) == on_disk
    final = any_store.load(job_id)
    assert final.progress.done == 1 and final.checkpoint is None and final.lease.epoch == 1
    assert final.spec == {"nested": {"list": [1]}}


def test_returned_record_does_not_alias_what_mutate_handed_in(any_store: Store, job: str) -> None:
    """[JOB-M2] no aliasing across the API. Failed while the write path returned the edited object."""
    mine = any_store.claim(job, "alpha", 60)
    requires = ["gpu"]
    delegation = Delegation("bits", "{G}")

    def hand_in(r: Record) -> None:
        r.requires = requires
        r.delegation = delegation

    returned = any_store.update(job, mine.lease.epoch, hand_in)
    requires.append("net")
    delegation.system = "other"
    assert returned.requires == ["gpu"]
    assert returned.delegation is not None and returned.delegation.system == "bits"


def test_submitted_record_is_not_aliased(any_store: Store) -> None:
    spec = {"list": [1]}
    rec = Record(kind="k", spec=spec, requires=["a"], extensions={"x.t/e@1": [1]})
    job_id = any_store.submit(rec)
    spec["list"].append(2)
    rec.requires.append("b")
    rec.extensions["x.t/e@1"].append(2)
    loaded = any_store.load(job_id)
    assert loaded.spec == {"list": [1]} and loaded.requires == ["a"] and loaded.extensions == {"x.t/e@1": [1]}


# -- sweep [§2.4] ----------------------------------------------------------------------------------


def test_sweep_removes_only_stale_temporaries(clocked_store: jobctl.FileStore, file_job: str) -> None:
    jobs = Path(clocked_store.jobs_dir)
    stale = [f"{file_job}.json.abc123.tmp", f"{file_job}.json.A_9.tmp", f"{file_job}.json.1234567890.tmp"]
    kept = [
        f"{file_job}.json.lock.x.tmp",  # a further dot in the unique part
        f"{file_job}.json.tmp",  # no unique part
        f"{file_job}.json.a-b.tmp",  # '-' is not in [A-Za-z0-9_]
        f"{file_job}.json.abc.tmp.bak",
        f"{file_job}.tmp-123-beef",  # older C++ leftover
        f"{file_job}.epoch.3",
        "other.json.abc123.tmp",  # another record's
        "notes.txt",
    ]
    for name in stale + kept:
        (jobs / name).write_bytes(b"{")
    (jobs / f"{file_job}.json.dir.tmp").mkdir()  # not a regular file
    assert clocked_store.sweep(file_job) == 3
    left = set(os.listdir(jobs))
    assert not left & set(stale)
    assert left >= set(kept) | {f"{file_job}.json", f"{file_job}.json.lock", f"{file_job}.json.dir.tmp"}
    assert clocked_store.load(file_job).id == file_job
    assert clocked_store.sweep(file_job) == 0


def test_sweep_everything(clocked_store: jobctl.FileStore) -> None:
    a, b = submit(clocked_store, id="a"), submit(clocked_store, id="b")
    jobs = Path(clocked_store.jobs_dir)
    for name in (f"{a}.json.x1.tmp", f"{b}.json.y_2.tmp", f"{b}.json.z3.tmp", f"{a}.json.lock.q.tmp"):
        (jobs / name).write_bytes(b"")
    assert clocked_store.sweep() == 3
    assert sorted(os.listdir(jobs)) == ["a.json", f"{a}.json.lock", "a.json.lock.q.tmp", "b.json", "b.json.lock"]


def test_sweep_takes_no_lock_a_record_id_could_not_have(clocked_store: jobctl.FileStore) -> None:
    """A temporary beside a name ids.check refuses ("..json", ".hidden.json") is nobody's: no lock made for it."""
    jobs = Path(clocked_store.jobs_dir)
    planted = ["..json.x1.tmp", ".hidden.json.y2.tmp"]
    for name in planted:
        (jobs / name).write_bytes(b"")
    assert clocked_store.sweep() == 0
    assert sorted(os.listdir(jobs)) == sorted(planted)


# -- every verdict class is reachable --------------------------------------------------------------


def test_every_verdict_class_is_reached(any_store: Store, clock: Any) -> None:
    """One record, every verdict class, each refusal leaving the file as it was."""
    s = any_store
    job_id = submit(s, id="every")
    other = submit(s, id="newer")
    plant(s, other, "abstraction.test/hovercraft@7", critical=True)
    got = set()
    got.add(type(refused(s, "absent", NotFound, lambda: s.load("absent"))))
    got.add(type(refused(s, job_id, Refused, lambda: s.claim(job_id, "", 60))))
    mine = s.claim(job_id, "a", 60)
    got.add(type(refused(s, job_id, LeaseHeld, lambda: s.claim(job_id, "b", 60))))
    got.add(type(refused(s, job_id, StaleEpoch, lambda: s.renew(job_id, 7, 60))))
    got.add(type(refused(s, job_id, Invalid, lambda: s.set_intent(job_id, "halt", "x"))))
    got.add(type(refused(s, other, UnknownSchema, lambda: s.claim(other, "a", 60))))
    got.add(type(refused(s, other, UnknownSchema, lambda: s.set_intent(other, "cancel", "x"))))
    clock.advance(61)
    got.add(type(refused(s, job_id, LeaseExpired, lambda: s.progress(job_id, mine.lease.epoch, 1))))
    mine = s.claim(job_id, "a", 60)
    s.finish(job_id, mine.lease.epoch, "failed")
    got.add(type(refused(s, job_id, Terminal, lambda: s.claim(job_id, "b", 60))))
    assert got == {NotFound, LeaseHeld, StaleEpoch, LeaseExpired, Terminal, UnknownSchema, Invalid, Refused}
    assert [type(e) for _, e in s.list().unreadable] == [UnknownSchema]


# -- watch [§5.3] (clock and sleep injected) -------------------------------------------------------


class FakeMonotonic:
    def __init__(self, on_sleep: Callable[[], None] | None = None) -> None:
        self.t = 0.0
        self.slept: list[float] = []
        self.on_sleep = on_sleep

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds
        if self.on_sleep is not None:
            self.on_sleep()


def test_watch_first_notice_is_the_present(any_store: Store) -> None:
    job_id = submit(any_store)
    submit(any_store, kind="other")
    mono = FakeMonotonic()
    w = jobctl.Watch(any_store, "download", 0, clock=mono, sleep=mono.sleep)
    first = w.next()
    assert first is not None and first.what == "changed"
    assert [r.id for r in first.records] == [job_id]
    assert w.next(timeout=3) is None  # nothing changed, no budget: no quiet
    w.close()
    assert w.next() is not None and w.next().what == "closed"  # type: ignore[union-attr]


def test_watch_ignores_renewal_and_sees_progress(any_store: Store, clock: Any) -> None:
    job_id = submit(any_store)
    mine = any_store.claim(job_id, "a", 60)
    mono = FakeMonotonic()
    w = jobctl.Watch(any_store, "download", 2.0, clock=mono, sleep=mono.sleep)
    assert w.next().what == "changed"  # type: ignore[union-attr]
    clock.advance(1)
    any_store.renew(job_id, mine.lease.epoch, 120)  # not visible
    quiet = w.next()
    assert quiet is not None and quiet.what == "quiet" and mono.t == pytest.approx(2.0)
    any_store.progress(job_id, mine.lease.epoch, 5)
    any_store.progress(job_id, mine.lease.epoch, 6)  # coalesces
    changed = w.next()
    assert changed is not None and changed.what == "changed"
    assert [r.progress.done for r in changed.records] == [6]


def test_independent_watchers_share_nothing(any_store: Store) -> None:
    submit(any_store)
    mono = FakeMonotonic()
    a = jobctl.Watch(any_store, "download", 0, clock=mono, sleep=mono.sleep)
    b = jobctl.Watch(any_store, "download", 0, clock=mono, sleep=mono.sleep)
    assert a.next().what == "changed"  # type: ignore[union-attr]
    assert b.next().what == "changed"  # type: ignore[union-attr]


# -- list_open and scan (every backend) ------------------------------------------------------------


def _ended(store: Store, job_id: str, state: str) -> None:
    rec = store.claim(job_id, "w", 30)
    store.finish(job_id, rec.lease.epoch, state, error="boom" if state == "failed" else None)


def test_list_open_gives_the_open_records_and_every_state(any_store: Store) -> None:
    done = submit(any_store, id="a-done")
    failed = submit(any_store, id="b-failed")
    pending = submit(any_store, id="c-pending")
    running = submit(any_store, id="d-running")
    _ended(any_store, done, "complete")
    _ended(any_store, failed, "failed")
    any_store.claim(running, "w", 30)
    listing = any_store.list_open()
    assert [rec.id for rec in listing] == [pending, running]
    assert listing.states == {done: "complete", failed: "failed", pending: "pending", running: "running"}
    assert listing.unreadable == []


def test_scan_gives_every_record_in_id_order_across_pages(any_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    if not isinstance(any_store, jobctl.FileStore):
        from jobctl.store.postgres import reads as pg

        monkeypatch.setattr(pg, "SCAN_PAGE", 2)  # pages of 2: the boundaries are crossed
    made = [submit(any_store, id=f"job-{n}") for n in (3, 1, 4, 5, 2)]
    _ended(any_store, made[0], "complete")
    unreadable: list[tuple[str, errors.JobError]] = []
    got = list(any_store.scan(unreadable, summaries=False))
    assert [item.id for item in got] == sorted(made)
    assert all(isinstance(item, Record) for item in got)
    assert [item.state for item in got] == [rec.state for rec in any_store.list()]
    assert unreadable == []


def test_postgres_list_open_and_scan_name_a_row_this_reader_cannot_decode(pg_store: Store) -> None:
    from jobctl.store.postgres import PostgresStore

    assert isinstance(pg_store, PostgresStore)
    good = submit(pg_store, id="a-good")
    bad = submit(pg_store, id="b-bad")
    pg_store.replace_bytes(bad, b"{")  # another writer's bytes; the derived columns stay
    listing = pg_store.list_open()
    assert [rec.id for rec in listing] == [good]
    assert [job_id for job_id, _ in listing.unreadable] == [bad]
    assert bad not in listing.states
    unreadable: list[tuple[str, errors.JobError]] = []
    assert [item.id for item in pg_store.scan(unreadable)] == [good]
    assert [job_id for job_id, _ in unreadable] == [bad]


def test_threads_listing_one_store_at_once_each_get_every_record(tmp_path: Path) -> None:
    """A threaded server lists one FileStore from several requests at once: each listing is whole.

    Read through the store's one kept ``jobs/`` descriptor, the threads' directory reads shared one
    position and each came back short (a retry of a failed pipeline then found no dependents).
    """
    import threading

    store = jobctl.FileStore(str(tmp_path / "store"), summaries=str(tmp_path / "cache"))
    made = {store.submit(jobctl.Record(kind="k", spec={})) for _ in range(400)}
    short: list[str] = []
    start = threading.Barrier(6)
    ways = {
        "list": lambda: {rec.id for rec in store.list()},
        "list_open": lambda: {rec.id for rec in store.list_open()},
        "ids": lambda: set(store.ids()),
    }

    def read(way: str) -> None:
        start.wait()
        for _ in range(8):
            got = ways[way]()
            if got != made:
                short.append(f"{way}: {len(got)} of {len(made)}")

    threads = [threading.Thread(target=read, args=(way,)) for way in [*ways, *ways]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert short == []


@pytest.mark.parametrize("by", ["x\ny", "\x1b[31m", " ", "x" * 201, 5])
def test_a_by_that_is_no_name_is_refused_by_every_call_that_takes_one(any_store: Store, by: Any) -> None:
    """The library checks ``by`` (set_intent, recall, cancel, retry) as HTTP does, on every backend."""
    from jobctl.lifecycle import retry

    store = any_store
    job_id = store.submit(Record(kind="k", spec={}))
    held = store.claim(job_id, "w", 30)
    before = store.load_bytes(job_id)
    for call in (
        lambda: store.set_intent(job_id, "pause", by),
        lambda: store.recall(job_id, held.lease.epoch, "r", by),
        lambda: store.cancel(job_id, by),
        lambda: retry(store, job_id, by=by),
    ):
        with pytest.raises(Invalid):
            call()
    assert store.load_bytes(job_id) == before
    assert store.set_intent(job_id, "pause", "").intent.by == ""  # nobody named: as before
