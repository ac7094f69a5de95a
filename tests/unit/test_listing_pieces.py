"""What the pieces of a shared cold listing send (jobctl.store.file_listing._read_share), and what is believed of it.

A piped ``jobctl list`` of a store without a summary cache reads its records
in forked children (jobctl.fanout); for each finished record a child sends its
summary's fields alone -- no identity, no file name, no state beside them --
and the listing part (written once the listing is out) takes each file's
identity from the cache's rows. An answer of any other shape is not believed:
its piece is read again in the listing's process, and the answer is the same.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobctl import FileStore, Record, fanout, summary
from jobctl.store import file_listing
from jobctl.store.file_listing import summary_of


def _finish(store: FileStore, job_id: str, state: str) -> None:
    rec = store.claim(job_id, "w", 30)
    store.finish(job_id, rec.lease.epoch, state)


def _store(root: Path, cache: Path, n: int) -> tuple[FileStore, list[str]]:
    store = FileStore(root, summaries=str(cache))
    ids = [store.submit(Record(kind="k", spec={"n": k})) for k in range(n)]
    for k, job_id in enumerate(ids):
        if k % 5:
            _finish(store, job_id, ("complete", "failed", "cancelled")[k % 3])
    return store, ids


def _brief_listing(store: FileStore) -> tuple[dict[str, tuple[Any, ...]], list[str], dict[str, str]]:
    """What a piped listing takes of list_open (then scan, which writes the listing part, and yields nothing
    more here): each finished record's summary, the open ids, every state."""
    ended: dict[str, tuple[Any, ...]] = {}
    taken: dict[str, Any] = {}

    def keep(item: Any, how: Any) -> None:
        brief = item if isinstance(item, summary.Summary) else summary_of(item)
        ended[brief.id] = tuple(brief)
        if how is not None:
            taken[brief.id] = (brief, how)

    opened = store.list_open(finished=keep, briefly=True)
    assert list(store.scan([], taken=taken, opened=opened)) == []
    return ended, [rec.id for rec in opened], dict(opened.states)


def _decoded(root: Path) -> tuple[dict[str, tuple[Any, ...]], list[str], dict[str, str]]:
    """The same, every record decoded in this process, no cache."""
    recs = FileStore(root, summaries=False).list()
    ended = {rec.id: tuple(summary_of(rec)) for rec in recs if rec.terminal}
    return ended, sorted(rec.id for rec in recs if not rec.terminal), {rec.id: rec.state for rec in recs}


@pytest.fixture(params=["one batch", "streamed"])
def shared(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Every cold listing of two records or more shared among two processes; the forks counted, by way.

    ``one batch``: the names all listed before the children start (fanout.share_out); ``streamed``: the
    directory read three names at a time, the children started first and handed pieces of five as they
    are cut (fanout.share_stream). And a file or ``jobs/`` changed more than 30 ms before a scan is old
    enough to be remembered.
    """
    monkeypatch.setattr(file_listing, "_SHARED_FROM", 2)
    monkeypatch.setattr(fanout, "MIN_SHARE", 1)
    monkeypatch.setattr(summary.listed, "_ASIDE_FROM", 1)
    monkeypatch.setenv(fanout.PROCESSES_ENV, "2")
    monkeypatch.setattr(summary.cachefile, "RACY_NS", 30_000_000)
    if request.param == "streamed":
        monkeypatch.setattr(summary.cachefile, "_BATCH", 3)
        monkeypatch.setattr(fanout, "STREAM_PIECE", 5)
    forks: list[str] = []
    real_fork, real_streamed = fanout._fork, fanout._fork_streamed
    monkeypatch.setattr(fanout, "_fork", lambda *a: forks.append("one batch") or real_fork(*a))
    monkeypatch.setattr(fanout, "_fork_streamed", lambda *a: forks.append("streamed") or real_streamed(*a))
    yield forks
    assert set(forks) <= {request.param}


@pytest.mark.timeout(60)
def test_a_piece_sends_each_finished_record_as_its_fields_alone(
    tmp_path: Path, shared: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One object a finished record beside the cache's rows: the fields, which hold the id and the state.
    store, _ = _store(tmp_path / "root", tmp_path / "cache", 30)
    sent: list[Any] = []
    real = file_listing._read_share

    def recording(*args: Any) -> list[Any]:
        got = real(*args)
        sent.append(got)
        return got

    monkeypatch.setattr(file_listing, "_read_share", recording)
    assert _brief_listing(store) == _decoded(tmp_path / "root")
    assert shared, "the listing was not shared"
    assert sent  # this process's own pieces (the children's are the same code)
    for fin_ids, fin_states, briefs, _, _, rows in sent:
        assert fin_ids is None and fin_states is None
        assert all(type(fields) is tuple and len(fields) == len(summary.Summary._fields) for fields in briefs)
        assert [fields[0] for fields in briefs] == sorted(fields[0] for fields in briefs)
        assert rows is not None


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "lie",
    [
        "a short summary",
        "a summary with its identity",
        "ids beside the summaries",
        "summaries that are no list",
        "not a list",
    ],
)
def test_a_piece_answered_in_another_shape_is_read_again_here(
    tmp_path: Path, shared: list[str], monkeypatch: pytest.MonkeyPatch, lie: str
) -> None:
    store, _ = _store(tmp_path / "root", tmp_path / "cache", 30)
    lied: list[int] = []

    def lying(real: Any, items: Any, each: Any, keep: Any = (), *, count: Any = None) -> Any:
        for k, piece, got in real(items, each, keep, count=count):
            if not lied and type(got) is list and got[2]:  # the first piece with a finished record
                lied.append(k)
                got = list(got)
                briefs = got[2]
                if lie == "a short summary":
                    got[2] = [briefs[0][:-1], *briefs[1:]]
                elif lie == "a summary with its identity":
                    got[2] = [(briefs[0], (1, 2, 3, 4)), *briefs[1:]]
                elif lie == "ids beside the summaries":
                    got[0], got[1] = [b[0] for b in briefs], [b[2] for b in briefs]
                elif lie == "summaries that are no list":
                    got[2] = tuple(briefs)
                else:
                    got = tuple(got)
            yield k, piece, got

    monkeypatch.setattr(fanout, "share_out", functools.partial(lying, fanout.share_out))
    monkeypatch.setattr(fanout, "share_stream", functools.partial(lying, fanout.share_stream))
    assert _brief_listing(store) == _decoded(tmp_path / "root")
    assert lied and shared


@pytest.mark.timeout(60)
def test_the_listing_part_takes_each_identity_from_the_cache_rows(tmp_path: Path, shared: list[str]) -> None:
    # Made once the listing is out, from the pieces' fields and the rows' identities: each summary kept
    # beside the identity of the very file it was read from, and a listing of the unchanged jobs/ walks it.
    root, cache = tmp_path / "root", tmp_path / "cache"
    store, ids = _store(root, cache, 30)
    time.sleep(0.1)  # every record and jobs/ older than the racy window
    expected = _decoded(root)
    assert _brief_listing(store) == expected
    summary.listed.write_aside()
    summary.listed.settle()
    jobs = os.stat(store.jobs_dir)
    part = summary.Listed.of(summary.Summaries.load(str(cache), store.jobs_dir, jobs, read=False))
    ended = expected[0]
    assert sorted(row[0] for row in part.rows) == sorted(ended)
    for row, text in zip(part.rows, part.idents, strict=True):
        assert tuple(row) == ended[row[0]]
        assert text == summary.ident(os.stat(store.path(row[0]), follow_symlinks=False))
    assert part.others == sorted(set(ids) - set(ended))
    assert part.fresh(jobs)


def test_work_left_waiting_is_done_in_the_order_it_came() -> None:
    # The cache's own write waits for the listing to be out; the listing part's, made after it and
    # taking its identities from the rows that write makes, waits behind it however small it is.
    done: list[str] = []
    summary.listed.settle()
    summary.now_or_aside(lambda: done.append("rows"), summary.listed._ASIDE_FROM)
    summary.now_or_aside(lambda: done.append("part"), 1)
    assert done == []
    summary.listed.settle()
    assert done == ["rows", "part"]
    summary.now_or_aside(lambda: done.append("now"), 1)  # nothing waiting: done at once
    assert done == ["rows", "part", "now"]


@pytest.mark.timeout(60)
def test_a_shared_cold_listing_writes_the_cache_once_it_is_out_and_a_later_pass_here_reads_it(
    tmp_path: Path, shared: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    store, _ = _store(root, cache, 30)
    time.sleep(0.1)  # every record and jobs/ older than the racy window
    summary.listed.settle()
    ended, opened, states = _brief_listing(store)
    assert (ended, opened, states) == _decoded(root)
    assert summary.listed._WAITING and not list(cache.rglob("*.open"))  # written once the listing is out
    decoded: list[str] = []
    real = file_listing.record.decode
    monkeypatch.setattr(
        file_listing.record, "decode", lambda data, job_id, **kw: decoded.append(job_id) or real(data, job_id, **kw)
    )
    again = store.list_open()  # settles what waits first: the cache it then reads is this listing's
    assert not summary.listed._WAITING and list(cache.rglob("*.open")) and list(cache.rglob("*.list"))
    assert [rec.id for rec in again] == opened and dict(again.states) == states
    assert sorted(decoded) == opened  # the finished records vouched for by the rows written, none read


@pytest.mark.timeout(60)
def test_a_finished_with_many_is_handed_each_piece_s_summaries_at_once(tmp_path: Path, shared: list[str]) -> None:
    # list_open's finished.many: the summaries a shared cold scan's pieces made, a list a piece, none of
    # them also handed one by one; the open and re-read ones still come one at a time.
    root = tmp_path / "root"
    store, _ = _store(root, tmp_path / "cache", 30)

    class Taking:
        def __init__(self) -> None:
            self.lists: list[list[Any]] = []
            self.one_by_one: list[Any] = []

        def __call__(self, item: Any, how: Any) -> None:
            self.one_by_one.append(item)

        def many(self, summaries: list[Any]) -> None:
            self.lists.append(summaries)

    taking = Taking()
    opened = store.list_open(finished=taking, briefly=True)
    assert shared and taking.lists
    assert all(type(one) is summary.Summary for got in taking.lists for one in got)
    got = {one.id: tuple(one) for batch in taking.lists for one in batch}
    got.update(
        (one.id, tuple(one if isinstance(one, summary.Summary) else summary_of(one))) for one in taking.one_by_one
    )
    assert sum(map(len, taking.lists)) + len(taking.one_by_one) == len(got)
    ended, open_ids, states = _decoded(root)
    assert got == ended and [rec.id for rec in opened] == open_ids and dict(opened.states) == states


@pytest.mark.timeout(60)
def test_odd_files_among_the_pieces_are_named_as_one_process_names_them(
    tmp_path: Path, shared: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A link, a directory, a FIFO and a malformed record at record names, among thirty: a piece hands
    # each back, and this process reads it again, refusing it with the words of a listing done here alone.
    root = tmp_path / "root"
    store, _ = _store(root, tmp_path / "cache", 30)
    jobs = Path(store.jobs_dir)
    (tmp_path / "outside.json").write_text("{}")
    (jobs / "1-link.json").symlink_to(tmp_path / "outside.json")
    (jobs / "2-dir.json").mkdir()
    os.mkfifo(jobs / "3-fifo.json")
    (jobs / "4-bad.json").write_text('{"id": "4-bad"')
    opened = store.list_open(finished=lambda item, how: None, briefly=True)
    assert shared, "the listing was not shared"
    monkeypatch.setattr(file_listing, "_SHARED_FROM", 10**9)
    alone = FileStore(root, summaries=False).list_open()
    assert [(job_id, str(exc)) for job_id, exc in opened.unreadable] == [
        (job_id, str(exc)) for job_id, exc in alone.unreadable
    ]
    assert [job_id for job_id, _ in opened.unreadable] == ["1-link", "2-dir", "3-fifo", "4-bad"]
    assert [rec.id for rec in opened] == [rec.id for rec in alone] and dict(opened.states) == dict(alone.states)
