"""Upstream's cross-writer check (DIGEST §3.4), as a test.

A seed whose spec is deliberately awkward is written, then claimed, progressed
and released; after every write the ``"spec": {`` block must be the seed's,
byte for byte [JOB-E7]. Then records written by upstream code are copied into a
fresh store and claimed by ``rewriter`` for 300 s: once the ``updated_at``,
``expires_at``, ``"epoch"`` and ``"owner"`` lines are dropped, the rewritten
file must be the original with at most its state line moved [JOB-E6].
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import jobctl
from jobctl import record

# The awkward spec, as a writer would hand it over: odd whitespace, every
# spelling a serialiser would "fix". The DEL byte, é and the emoji are raw.
SEED_SPEC = (
    '{ "url" : "https://example.invalid/get?a=1&b=2&c=<tag>",\n'
    '\t"raw": "caf\u00e9 \U0001f600",'
    '  "escapes": "\\u0001 \\u2028 \\u2029 \\t",'
    '"del": "x\x7fy",\r\n'
    '"plain": "a/b", "escaped": "a\\/b", "a\\/b": "member",'
    ' "numbers": [ 1.50 , 1e2, -0.0, 123456789012345678901234567890, 12345678901234567890 ],'
    ' "zebra": 1, "apple": 2 }'
)

# The same spec as the record must carry it: the record's indentation, every token as spelled.
SEED_BLOCK = (
    '  "spec": {\n'
    '    "url": "https://example.invalid/get?a=1&b=2&c=<tag>",\n'
    '    "raw": "caf\u00e9 \U0001f600",\n'
    '    "escapes": "\\u0001 \\u2028 \\u2029 \\t",\n'
    '    "del": "x\x7fy",\n'
    '    "plain": "a/b",\n'
    '    "escaped": "a\\/b",\n'
    '    "a\\/b": "member",\n'
    '    "numbers": [\n'
    "      1.50,\n"
    "      1e2,\n"
    "      -0.0,\n"
    "      123456789012345678901234567890,\n"
    "      12345678901234567890\n"
    "    ],\n"
    '    "zebra": 1,\n'
    '    "apple": 2\n'
    "  },\n"
).encode("utf-8")

DROPPED = (b"updated_at", b"expires_at", b'"epoch"', b'"owner"')


def spec_block(data: bytes) -> bytes:
    """The lines from ``  "spec": {`` to its closing ``  },``."""
    start = data.index(b'\n  "spec": {\n') + 1
    end = data.index(b"\n  },\n", start) + len(b"\n  },\n")
    return data[start:end]


def drop_volatile(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\n") if not any(word in line for word in DROPPED)]


def test_seed_bytes_are_what_the_spec_says() -> None:
    """The expected block is not circular: the raw bytes the check hinges on are in it."""
    for needle in (b"&b=2&c=<tag>", "caf\u00e9".encode(), "\U0001f600".encode(), b"x\x7fy", b'"a\\/b"'):
        assert needle in SEED_BLOCK
    for needle in (b"\\u0001", b"\\u2028", b"\\u2029", b"\\t", b"1.50", b"1e2", b"-0.0"):
        assert needle in SEED_BLOCK
    assert SEED_BLOCK.index(b'"zebra"') < SEED_BLOCK.index(b'"apple"')


def test_spec_survives_every_write(clocked_store: jobctl.FileStore, clock: Callable[[], Any]) -> None:
    job_id = clocked_store.submit(jobctl.Record(kind="download", spec=jobctl.Raw(SEED_SPEC)))
    path = Path(clocked_store.path(job_id))
    seed = path.read_bytes()
    assert spec_block(seed) == SEED_BLOCK

    def same_spec(step: str) -> None:
        assert spec_block(path.read_bytes()) == SEED_BLOCK, f"spec moved at {step}"

    mine = clocked_store.claim(job_id, "rewriter", 300)
    same_spec("claim")
    clocked_store.progress(job_id, mine.lease.epoch, 10, {"verified_prefix": 10, "verified": [[0, 10]]})
    same_spec("progress")

    def touch(r: jobctl.Record) -> None:
        r.error = "transient"
        r.extensions["x.test/note@1"] = jobctl.Raw('{"n": 1.0e-3}')

    clocked_store.update(job_id, mine.lease.epoch, touch)
    same_spec("update")
    clocked_store.set_intent(job_id, "pause", "operator")
    same_spec("intent")
    clocked_store.release(job_id, mine.lease.epoch)
    same_spec("release")
    # And the loaded value still decodes to what was given.
    assert clocked_store.load(job_id).spec == jobctl.Raw(SEED_SPEC).value


def test_our_seed_is_continued_by_a_fresh_store(tmp_path: Path, make_clock: Callable[[], Any]) -> None:
    """Copy our seed into a fresh store and claim it there: the upstream procedure, our side."""
    first = jobctl.FileStore(tmp_path / "first", clock=make_clock())
    job_id = first.submit(jobctl.Record(kind="download", spec=jobctl.Raw(SEED_SPEC)))
    seed = Path(first.path(job_id)).read_bytes()

    fresh = jobctl.FileStore(tmp_path / "fresh", clock=make_clock())
    shutil.copyfile(first.path(job_id), fresh.path(job_id))
    fresh.claim(job_id, "rewriter", 300)
    rewritten = Path(fresh.path(job_id)).read_bytes()
    assert spec_block(rewritten) == SEED_BLOCK
    expected = [line.replace(b'"state": "pending"', b'"state": "running"') for line in drop_volatile(seed)]
    assert drop_volatile(rewritten) == expected


def _upstream_claimable(contract_dir: Path) -> list[Path]:
    out = []
    for folder, prefix in (("records", "new-"), ("failures", "")):
        for path in sorted((contract_dir / "vectors" / folder).glob(prefix + "*.json")):
            if not record.decode(path.read_bytes()).terminal:
                out.append(path)
    return out


def test_upstream_seed_source_headers(contract_dir: Path, tmp_path: Path, make_clock: Callable[[], Any]) -> None:
    """The named example: records/new-source-headers.json, claimed by rewriter for 300 s."""
    _rewrite_and_compare(contract_dir / "vectors" / "records" / "new-source-headers.json", tmp_path, make_clock)


def test_upstream_seeds_all_claimable(contract_dir: Path, tmp_path: Path, make_clock: Callable[[], Any]) -> None:
    seeds = _upstream_claimable(contract_dir)
    assert len(seeds) >= 9
    for n, path in enumerate(seeds):
        _rewrite_and_compare(path, tmp_path / str(n), make_clock)


def _rewrite_and_compare(seed_path: Path, tmp_path: Path, make_clock: Callable[[], Any]) -> None:
    seed = seed_path.read_bytes()
    rec = record.decode(seed)
    store = jobctl.FileStore(tmp_path / "store", clock=make_clock())
    shutil.copyfile(seed_path, store.path(rec.id))
    claimed = store.claim(rec.id, "rewriter", 300)
    rewritten = Path(store.path(rec.id)).read_bytes()

    assert claimed.lease.owner == "rewriter"
    assert claimed.lease.epoch == rec.lease.epoch + 1
    assert spec_block(rewritten) == spec_block(seed), seed_path.name
    new_state = {"pending": "running", "running": "running", "transferred": "transferred"}[rec.state]
    old_line = f'"state": "{rec.state}"'.encode()
    expected = [line.replace(old_line, f'"state": "{new_state}"'.encode()) for line in drop_volatile(seed)]
    assert drop_volatile(rewritten) == expected, seed_path.name
    # The dropped lines really are the only other difference: updated_at did not move [§10.11].
    assert [line for line in rewritten.split(b"\n") if b'  "updated_at"' in line] == [
        line for line in seed.split(b"\n") if b'  "updated_at"' in line
    ]


def test_rewriter_line_values(tmp_path: Path, make_clock: Callable[[], Any]) -> None:
    """The volatile lines carry the new holder: owner, epoch + 1, expiry = now + 300 s [JOB-O4]."""
    clock = make_clock()
    store = jobctl.FileStore(tmp_path / "s", clock=clock)
    job_id = store.submit(jobctl.Record(kind="download", spec=jobctl.Raw(SEED_SPEC)))
    clock.advance(2.5)
    store.claim(job_id, "rewriter", 300)
    data = Path(store.path(job_id)).read_text(encoding="utf-8")
    expires = record.format_time(clock.now + timedelta(seconds=300))
    assert f'    "owner": "rewriter",\n    "epoch": 1,\n    "expires_at": "{expires}"\n' in data
