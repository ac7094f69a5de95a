"""The fast decode path against the strict one, input by input.

:func:`jobctl.record.decode` tries ``_fast_decode`` first and falls back to
``_decode`` whenever the fast path is unsure. The promise is exact: every text
the strict decoder refuses is refused with the same verdict and message, and
every text it accepts decodes to the same record -- every slot, opaque values
compared with their JSON types (``true`` is not ``1``), and the same bytes
when encoded again.

The inputs: the contract's record files (skipped, with one line, when the
contract is absent), and records jobctl writes, mutated at random with a fixed
seed -- duplicate members at every depth, whitespace anywhere, numbers past
64 bits and past Python's digit limit, escapes (lone surrogates among them),
timestamps that are nearly RFC 3339, missing, extra and mistyped fields, deep
nesting around the limit, a byte order mark, trailing data, truncation.
"""

from __future__ import annotations

import json
import random
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from jobctl import record, wire
from jobctl.errors import Invalid, JobError, UnknownSchema
from jobctl.record import Delegation, Envelope, Intent, Recall, Record, Step, encode
from jobctl.store.file import summary_fields

T0 = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone.utc)


def _canon(value: Any) -> Any:
    """A value with its types spelt out, so that ``==`` tells ``true`` from ``1`` and ``1`` from ``1.0``."""
    if isinstance(value, record._Model):
        return (type(value).__name__, tuple(_canon(getattr(value, name)) for name in value.__slots__))
    if isinstance(value, dict):
        return ("dict", tuple((k, _canon(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", tuple(_canon(v) for v in value))
    if isinstance(value, datetime):
        return ("datetime", value, value.utcoffset())
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


def _snapshot(rec: Record) -> Any:
    slots = tuple((name, _canon(getattr(rec, name))) for name in Record.__slots__)
    try:
        faithful: Any = encode(rec, rederive=False)
    except JobError as exc:
        faithful = (type(exc).__name__, str(exc))
    opaque = tuple(rec.opaque_text(slot) for slot in ("spec", "checkpoint", *("x:" + k for k in rec.extensions)))
    return slots, faithful, opaque


def _outcome(decoder: Any, data: bytes) -> Any:
    try:
        rec = decoder(data)
    except JobError as exc:
        return ("refused", type(exc).__name__, str(exc), exc.job_id, getattr(exc, "hint", None))
    return ("ok", _snapshot(rec))


def _strict(data: bytes, name: str = "j") -> Record:
    """What ``decode(data, name)`` was before the fast path: the strict decoder alone."""
    try:
        return record._decode(data)
    except JobError as exc:
        exc.job_id = name
        if isinstance(exc, Invalid):
            exc.hint = f"the record file jobs/{name}.json is damaged: look at it, restore or remove it"
        raise


#: How many times summary_or_record answered with a finished record's fields (not a record).
BRIEF = [0]


def _brief_outcome(data: bytes) -> Any:
    """summary_or_record's answer as the strict decoder's would read: a summary's fields stand for the record."""
    record._UNTIL_CANONICAL[0] = 0  # as in any process past its first records
    try:
        got = record.summary_or_record(data, _named(data))
    except JobError as exc:
        return ("refused", type(exc).__name__, str(exc), exc.job_id, getattr(exc, "hint", None))
    if isinstance(got, Record):
        return ("ok", _snapshot(got))
    BRIEF[0] += 1
    return ("summary", got)


def _state_outcome(data: bytes) -> Any:
    """summary_or_record's answer without fields, as the strict decoder's would read: a state stands for the record."""
    record._UNTIL_CANONICAL[0] = 0
    try:
        got = record.summary_or_record(data, _named(data), fields=False)
    except JobError as exc:
        return ("refused", type(exc).__name__, str(exc), exc.job_id, getattr(exc, "hint", None))
    if isinstance(got, Record):
        return ("ok", _snapshot(got))
    assert type(got) is str, got
    return ("state", got)


def _named(data: bytes) -> str:
    """The id ``data`` names, where it can be read (a store reads a record under its own name), else ``j``."""
    try:
        named = json.loads(data).get("id")
    except (ValueError, AttributeError, RecursionError):
        # Past what json reads (a number of thousands of digits, say): the id as the layout spells it.
        m = re.search(rb'\n  "id": "([0-9a-z-]+)",\n', data)
        named = m.group(1).decode() if m else None
    return named if isinstance(named, str) and named else "j"


def check(data: bytes) -> bool:
    """Assert that decode() answers as the strict decoder does; True when the fast path decided.

    And that summary_or_record refuses what it refuses, in its words, and
    answers with the record or with exactly the fields summary_fields takes
    of it (a finished record only).
    """
    name = _named(data)
    fast = _outcome(lambda d: record.decode(d, name), data)
    strict = _outcome(lambda d: _strict(d, name), data)
    assert fast == strict, data[:2000]
    brief = _brief_outcome(data)
    if brief[0] == "summary":
        rec = _strict(data)
        assert rec.terminal and brief[1] == summary_fields(rec), data[:2000]
        assert all(type(a) is type(b) for a, b in zip(brief[1], summary_fields(rec), strict=True))
    else:
        assert brief == strict, data[:2000]
    state = _state_outcome(data)
    if state[0] == "state":
        # Its state alone exactly where the fields would have been given, and the strict decoder's.
        assert brief[0] == "summary" and state[1] == brief[1][2] == _strict(data).state, data[:2000]
    else:
        assert brief[0] != "summary" and state == strict, data[:2000]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return record._fast_decode(text) is not None


# -- records jobctl writes ------------------------------------------------------------


def _records() -> list[Record]:
    def make(**fields: Any) -> Record:
        rec = Record(
            id="1787202430967-a752f9a9c2c77b123ffd",
            kind="backup",
            spec={"argv": ["rsync", "-a", "/srv/data/", "backup:/vol/"], "n": 1.5, "ok": True},
            created_at=T0,
            updated_at=T0 + timedelta(seconds=3),
        )
        rec.progress.updated_at = T0
        for name, value in fields.items():
            setattr(rec, name, value)
        return rec

    done = make(state="complete")
    done.lease.owner, done.lease.epoch, done.lease.expires_at = "host-1:4242", 3, T0 + timedelta(minutes=1)
    done.progress.done, done.progress.total = 7, 9
    running = make(state="running", checkpoint={"offset": 12, "verified": [[0, 12]]}, requires=["gpu"])
    running.lease.owner, running.lease.epoch, running.lease.expires_at = "w", 1, T0 + timedelta(hours=1)
    running.progress.step = Step("copy", 1, 2, 3, 4)
    paused = make(state="pending", intent=Intent("pause", "ops", T0), error="")
    failed = make(state="failed", error="exit 3: no space", extensions={"jobctl.run/result@1": {"a": [1, 2.0]}})
    recalled = make(state="running")
    recalled.lease.owner, recalled.lease.epoch = "w", 2
    recalled.lease.expires_at = T0 + timedelta(hours=1)
    recalled.lease.recall = Recall("drain", T0, T0 + timedelta(minutes=5), "ops")
    delegated = make(state="transferred", delegation=Delegation("s3", "x-1", True))
    enveloped = make(envelope=Envelope("nas.example/transfer@2", ["pause", "cancel"]))
    escaped = make(kind="k\u00e9\u2028\U0001f600", spec={"cmd": 'sh -c "echo \\\\ \\u0041"', "t": "\t"})
    escaped.error = 'exit 3: "no space"\n'
    cancelled = make(state="cancelled", intent=Intent("cancel"), extensions={"x.test/e@1": None, "y.t/z@1": []})
    resumed = make(state="running", checkpoint={"offset": 12, "parts": [1, {"to": 2}]})
    resumed.lease.owner, resumed.lease.epoch, resumed.lease.expires_at = "w", 4, T0 + timedelta(hours=1)
    required = make(requires=["gpu", "disk"])  # no step: the canonical path reads its requires
    return [
        done,
        running,
        paused,
        failed,
        recalled,
        delegated,
        enveloped,
        escaped,
        cancelled,
        resumed,
        required,
        make(),
    ]


BASES = [encode(rec) for rec in _records()]

# -- mutations ------------------------------------------------------------------------

_SCALAR = re.compile(rb'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null')
_REPLACEMENTS = [
    b"0",
    b"01",
    b"007",
    b"-1",
    b"1.0",
    b"1e3",
    b"-0",
    b"9223372036854775807",
    b"9223372036854775808",
    b"1" * 5000,
    b"true",
    b"false",
    b"null",
    b"NaN",
    b"-Infinity",
    b'""',
    b'" "',
    b'"x"',
    b'"pending"',
    b'"complete"',
    b'"abstraction.job/base@1"',
    b'"abstraction.job/step@1"',
    b'"abstraction.download/ranges@1"',
    b'"x.test/unknown@1"',
    b'"\\u0041"',
    b'"\\ud800"',
    b'"\\udc00x"',
    b'"\\ud83d\\ude00"',
    b'"a\\"b"',
    b'"\\/"',
    b'"\xe2\x80\xa8"',
    b"[]",
    b"{}",
    b'["a"]',
    b"[1]",
    b'{"a":1,"a":2}',
    b'{"a": {"b": 1, "b": 1}}',
    b'[{"x": 1, "y": 2, "x": 3}]',
    b'"2026-01-01T00:00:00.000000Z"',
    b'"2026-13-01T00:00:00.000000Z"',
    b'"2026-02-30T00:00:00.000000Z"',
    b'"2026-W01-1T00:00:00.000000Z"',
    b'"20260101T00:00:00.00000000Z"',
    b'"2026-01-01T00:00:00.000000z"',
    b'"2026-01-01t00:00:00.000000Z"',
    b'"2026-01-01T24:00:00.000000Z"',
    b'"2026-01-01T00:00:60.000000Z"',
    b'"2026-01-01T00:00:00.00000-Z"',
    b'"2026-01-01T00:00:0-.000000Z"',
    b'"2026-01-01T00:00:00+00:00:0Z"',
    b'"2026-01-01 00:00:00.000000Z"',
    b'"2026-01-01T00:00:00Z"',
    b'"2026-01-01T00:00:00.1234567890Z"',
    b'"2026-01-01T00:00:00.000000+01:00"',
    b'"2026-01-01T00:00:00.000000-00:30"',
    b'"0001-01-01T00:00:00.000000Z"',
    b'"0000-01-01T00:00:00.000000Z"',
    b'"2024-02-29T00:00:00.000000Z"',
    b'"2026-02-29T00:00:00.000000Z"',
    b'"1900-02-29T00:00:00.000000Z"',
    b'"2000-02-29T23:59:59.999999Z"',
    b'"2026-04-31T00:00:00.000000Z"',
    b'"2026-00-10T00:00:00.000000Z"',
    b'"9999-12-31T23:59:59.999999Z"',
    b'"\xef\xbc\x92026-01-01T00:00:00.000000Z"',
    *(b"[" * depth + b"0" + b"]" * depth for depth in (60, 61, 62, 63, 64)),
    b'{"a":' * 61 + b"{}" + b"}" * 61,
    b'"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["',
]
_WS = [b" ", b"\t", b"\n", b"\r", b"  \n", b"\xc2\xa0", b"\x0b"]
_NAMES = [b"content", b"critical", b"id", b"kind", b"state", b"spec", b"checkpoint", b"progress", b"lease"]
_NAMES += [b"error", b"intent", b"extensions", b"created_at", b"updated_at", b"schema", b"extra", b"done", b"owner"]


def _duplicate_line(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    members = [i for i, line in enumerate(lines) if b'": ' in line]
    if not members:
        return data
    i = rng.choice(members)
    copy = lines[i] if lines[i].endswith(b",") else lines[i] + b","
    return b"\n".join([*lines[:i], copy, *lines[i:]])


def _drop_line(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    members = [i for i, line in enumerate(lines) if b'": ' in line]
    if not members:
        return data
    i = rng.choice(members)
    del lines[i]
    if rng.random() < 0.5 and i > 0 and lines[i - 1].endswith(b","):
        lines[i - 1] = lines[i - 1][:-1]  # keep the JSON valid when it was the last member
    return b"\n".join(lines)


def _add_member(rng: random.Random, data: bytes) -> bytes:
    opens = [m.end() for m in re.finditer(rb"\{\n", data)] or [1]
    at = rng.choice(opens)
    member = b'"' + rng.choice(_NAMES) + b'": ' + rng.choice(_REPLACEMENTS) + b",\n"
    return data[:at] + member + data[at:]


def _replace_scalar(rng: random.Random, data: bytes) -> bytes:
    found = list(_SCALAR.finditer(data))
    if not found:
        return data
    m = rng.choice(found)
    return data[: m.start()] + rng.choice(_REPLACEMENTS) + data[m.end() :]


def _whitespace(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice(_WS) + data[at:]


def _around_colon(rng: random.Random, data: bytes) -> bytes:
    colons = [m.start() for m in re.finditer(rb'": ', data)]
    if not colons:
        return data
    at = rng.choice(colons) + 1
    return data[:at] + rng.choice(_WS[:4]) + data[at:]


def _flip(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data))
    return data[:at] + bytes([rng.choice(b'{}[],:"\\0a9 -.eE\x00\xff\xc3')]) + data[at + 1 :]


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def _nest(rng: random.Random, data: bytes) -> bytes:
    depth = rng.choice([1, 30, 61, 62, 63, 64, 65, 70, 2000])
    value = b"[" * depth + b"1" + b"]" * depth
    return data.replace(b"{\n", b'{\n  "checkpoint": ' + value + b",\n", 1)


def _ends(rng: random.Random, data: bytes) -> bytes:
    return rng.choice(
        [
            b"\xef\xbb\xbf" + data,
            b" \n" + data,
            data + b" \t\r\n",
            data + b"{}",
            data + b"x",
            data.rstrip(b"\n"),
            data.replace(b"\n", b"\r\n"),
            data.replace(b"\n", b""),
            data.replace(b"\n  ", b"\n\t"),
        ]
    )


MUTATIONS = [
    _duplicate_line,
    _duplicate_line,
    _drop_line,
    _add_member,
    _replace_scalar,
    _replace_scalar,
    _replace_scalar,
    _whitespace,
    _around_colon,
    _flip,
    _truncate,
    _nest,
    _ends,
]


# -- the tests --------------------------------------------------------------------------


def test_records_jobctl_writes_decode_alike_and_mostly_fast() -> None:
    before = BRIEF[0]
    fast = sum(check(data) for data in BASES)
    # Finished records without a checkpoint are summarised without a record built.
    assert BRIEF[0] - before >= 2
    # The common shapes take the fast path; were it never taken, this file would prove nothing.
    assert fast >= 6
    # And those in the canonical layout the quickest part of it (a checkpoint, an intent, an
    # error, extensions): the mutations below start from these.
    canonical = [data for data in BASES if record._canonical(data.decode()) is not None]
    assert len(canonical) >= 6
    assert any(b'"checkpoint"' in data for data in canonical)
    assert any(b'"extensions"' in data for data in canonical)
    assert any(b'"intent"' in data for data in canonical)
    assert any(b'"requires"' in data for data in canonical)


@pytest.mark.parametrize("seed", range(8))
def test_mutated_records_decode_alike(seed: int) -> None:
    rng = random.Random(seed)
    fast = refused = 0
    before = BRIEF[0]
    for _ in range(400):
        data = rng.choice(BASES)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            data = rng.choice(MUTATIONS)(rng, data)
        fast += check(data)
        try:
            record._decode(data)
        except JobError:
            refused += 1
    # Both sides of the promise are exercised: records the fast path took, and refusals.
    assert fast >= 20 and refused >= 40, (fast, refused)
    assert BRIEF[0] - before >= 4  # and mutated finished records summarised without a record


def test_duplicates_at_every_depth_are_refused_as_the_strict_decoder_refuses_them() -> None:
    for data in BASES:
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            if b'": ' not in line or line.rstrip().endswith((b"{", b"[")):
                continue
            copy = line if line.endswith(b",") else line + b","
            dup = b"\n".join([*lines[:i], copy, *lines[i:]])
            with pytest.raises(Invalid, match="duplicate member name"):
                record.decode(dup)
            check(dup)


def test_contract_records_decode_alike(contract_dir: Path) -> None:
    files = sorted((contract_dir / "vectors").rglob("*.json"))
    assert files
    rng = random.Random(12)
    fast = 0
    for path in files:
        data = path.read_bytes()
        fast += check(data)
        for _ in range(40):
            check(rng.choice(MUTATIONS)(rng, data))
    assert fast >= 10


@pytest.mark.parametrize("base", range(len(BASES)))
def test_every_value_replaced_by_every_odd_value_decodes_alike(base: int) -> None:
    # Systematic where the random mutations are sparse: each scalar of a record (a field of
    # the record's own, or inside an opaque value) swapped for each value of the pool.
    data = BASES[base]
    for m in _SCALAR.finditer(data):
        for value in _REPLACEMENTS:
            check(data[: m.start()] + value + data[m.end() :])


@pytest.mark.parametrize("base", range(len(BASES)))
def test_every_member_of_the_record_given_every_odd_value_decodes_alike(base: int) -> None:
    # Whole values swapped, not only scalars: a spec of null, a lease that is a list, content
    # that is a string, at every member of the record's own and of the objects in it.
    data = BASES[base]
    text = data.decode()
    spans = []
    members, _ = wire.parse_object_members(text, 0, "record")
    for name, value, start, end in members:
        spans.append((start, end))
        if isinstance(value, dict) and name != "spec":
            inner, _ = wire.parse_object_members(text, start, name)
            spans.extend((s, e) for _n, _v, s, e in inner)
    for start, end in spans:
        for value in _REPLACEMENTS:
            check(text[:start].encode() + value + text[end:].encode())


def test_models_are_judged_by_what_this_process_understands_now(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fast path remembers blocks of model names by their text; whether a critical one is
    # understood is still asked each time, so understand() -- and its undoing -- is honoured.
    name = b"x.test/late@1"
    tail = b'"abstraction.job/terminal@1"\n  ],'
    data = BASES[0].replace(tail, tail[:-5] + b',\n    "' + name + b'"\n  ],')
    assert data.count(name) == 2
    for _ in range(2):
        with pytest.raises(UnknownSchema):
            record.decode(data)
        check(data)
        with monkeypatch.context() as patch:
            patch.setattr(record.roster, "_UNDERSTOOD", set(record.known_models()))
            record.understand(name.decode())
            assert name.decode() in record.decode(data).critical
            assert check(data)
            assert record._canonical(data.decode()) is not None  # the path that remembers blocks


def test_a_head_seen_before_is_remembered_and_what_follows_it_still_judged() -> None:
    # The blocks of model names before "id" are remembered by their text; a record with the same
    # head has only its id, kind and state matched, and those exactly as the whole head's pattern would.
    data = next(d for d in BASES if record._canonical(d.decode()) is not None)
    text = data.decode()
    assert record._canonical(text) is not None
    head = text[: text.find(record._ID_AT)]
    assert head in record._HEADS_SEEN
    line = re.compile(r'\n  "(id|kind|state)": "([^"]*)",\n')
    odd = ['x\\"y', "a\tb", "", " ", "done", 'x", "y', "é"]
    for m in line.finditer(text):
        for value in odd:
            changed = text[: m.start(2)] + value + text[m.end(2) :]
            assert changed.startswith(head + record._ID_AT)
            check(changed.encode())
            parts = record._canonical_parts(changed)
            if parts is not None:  # taken: the value is one the layout allows, and read as it is
                assert getattr(parts, m.group(1)) == value
    # A head that differs by a byte is not the remembered one: matched whole again.
    other = text.replace('"content": [\n', '"content": [\n ', 1)
    assert record._canonical_parts(other) is None
    check(other.encode())


_INSTANT = re.compile(r'"(updated_at|expires_at|created_at)": "([^"]*)"')
_ODD_INSTANTS = [
    ("2026-13-01T00:00:00.000000Z", False),
    ("2026-00-01T00:00:00.000000Z", False),
    ("2026-02-29T00:00:00.000000Z", False),
    ("1900-02-29T00:00:00.000000Z", False),
    ("2026-04-31T00:00:00.000000Z", False),
    ("2026-01-01T24:00:00.000000Z", False),
    ("2026-01-01T00:00:60.000000Z", False),
    ("0000-01-01T00:00:00.000000Z", False),
    ("2024-02-29T00:00:00.000000Z", True),
    ("2000-02-29T23:59:59.999999Z", True),
    ("0001-01-01T00:00:00.000000Z", True),
    ("9999-12-31T23:59:59.999999Z", True),
]


def _ended(text: str) -> Any:
    """``_ended_fields`` of ``text`` under the id it names: its fields, None, or the exception it raised.

    (Whatever it raises sends the record to the decoder, as None does: ``summary_or_record``.)
    """
    try:
        return record.canonical._ended_fields(text, json.loads(text)["id"])
    except (ValueError, JobError) as exc:
        return exc


def test_a_finished_record_is_summarised_the_shorter_way_each_instant_judged_by_the_calendar() -> None:
    # A finished record without checkpoint or extensions: its fields read by _ended_fields (one
    # pattern after the spec, two instants made numbers, two only judged), exactly as summary_fields
    # takes them of the strict decoder's record; and an instant the calendar refuses (a 13th month,
    # the 29th of February of a common year), wherever it stands, is never summarised.
    done = next(d for d in BASES if b'"complete"' in d and b'"checkpoint"' not in d).decode()
    check(done.encode())  # its head met, as by any listing's first records
    assert _ended(done) == summary_fields(_strict(done.encode()))
    found = list(_INSTANT.finditer(done))
    assert [m.group(1) for m in found] == ["updated_at", "expires_at", "created_at", "updated_at"]
    for m in found:
        for value, valid in _ODD_INSTANTS:
            text = done[: m.start(2)] + value + done[m.end(2) :]
            got = _ended(text)
            if valid:
                assert got == summary_fields(_strict(text.encode())), (m.group(1), value)
            else:
                assert got is None or isinstance(got, ValueError | JobError), (m.group(1), value)
                with pytest.raises(Invalid):
                    _strict(text.encode())
            check(text.encode())


def test_a_spec_passed_before_is_passed_by_its_text_and_no_other_is() -> None:
    # The spec texts the scanner passed are remembered: the same text is not scanned again, a spec
    # that differs by a duplicate name is, and refused; so is one that holds the rest's opening.
    done = next(d for d in BASES if b'"complete"' in d and b'"checkpoint"' not in d).decode()
    check(done.encode())
    start = done.index('"spec": ') + len('"spec": ')
    end = done.index(record.canonical._REST_AT)
    assert done[start:end] in record.canonical._SPECS_PASSED
    for spec, refused in [
        ('{"a": 1, "a": 2}', True),
        ('{"a": [1, {"b": 2, "b": 3}]}', True),
        ('{"n": 12}', False),
        ('{\n  "a": 1,\n  "progress": {\n    "done": 1\n  }\n}', False),
        ('{\n  "a": 1,\n  "progress": {\n    "done": 1,\n    "done": 1\n  }\n}', True),
    ]:
        text = done[:start] + spec + done[end:]
        for _ in range(2):  # the second time, from what the first left (if anything)
            got = _ended(text)
            if refused:
                assert got is None or isinstance(got, ValueError | JobError)
                with pytest.raises(Invalid, match="duplicate member name"):
                    record.decode(text.encode(), json.loads(done)["id"])
            else:
                assert got == summary_fields(_strict(text.encode()))
            check(text.encode())
    assert '{"a": 1, "a": 2}' not in record.canonical._SPECS_PASSED
