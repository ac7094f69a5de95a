"""The record codec: fields, timestamps, opaque values, refusals, derivation (DIGEST §3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from jobctl import record, wire
from jobctl.errors import Invalid, UnknownSchema
from jobctl.record import (
    Delegation,
    Envelope,
    Intent,
    Lease,
    Progress,
    Recall,
    Record,
    Step,
    decode,
    encode,
)

UTC = timezone.utc
BASE = "abstraction.job/base@1"
INTENT = "abstraction.job/intent@1"
DELEGATION = "abstraction.job/delegation@1"
ENVELOPE = "abstraction.job/envelope@1"
STEP = "abstraction.job/step@1"
TERMINAL = "abstraction.job/terminal@1"
RECALL = "abstraction.job/recall@1"
RANGES = "abstraction.download/ranges@1"
T0 = "2026-09-06T05:44:05.494626Z"

ORDER = [
    "content",
    "critical",
    "schema",
    "id",
    "kind",
    "envelope",
    "state",
    "spec",
    "checkpoint",
    "progress",
    "lease",
    "delegation",
    "requires",
    "error",
    "intent",
    "extensions",
    "created_at",
    "updated_at",
]


def make(**fields: str | None) -> str:
    """A record as compact JSON text; each keyword is a field's raw JSON (None drops it).

    Known fields go in the written order; unknown ones after ``updated_at``.
    """
    parts = {
        "content": f'["{BASE}"]',
        "critical": f'["{BASE}"]',
        "id": '"1788673445494-d76944a8b5a24268cd6d"',
        "kind": '"download"',
        "state": '"pending"',
        "spec": '{"a":1}',
        "progress": f'{{"done":0,"updated_at":"{T0}"}}',
        "lease": '{"owner":"","epoch":0,"expires_at":"0001-01-01T00:00:00.000000Z"}',
        "created_at": f'"{T0}"',
        "updated_at": f'"{T0}"',
    }
    parts.update(fields)  # type: ignore[arg-type]
    keys = [k for k in ORDER if k in parts] + [k for k in parts if k not in ORDER]
    return "{" + ",".join(f'"{k}":{parts[k]}' for k in keys if parts[k] is not None) + "}"


def names(*items: str) -> str:
    return json.dumps(list(items))


def fresh(**kw: Any) -> Record:
    kw.setdefault("id", "job-1")
    kw.setdefault("kind", "download")
    kw.setdefault("spec", {"a": 1})
    return Record(**kw)


def lines_of(data: bytes) -> list[str]:
    return data.decode("utf-8").split("\n")


def test_make_is_a_valid_record() -> None:
    rec = decode(make())
    assert rec.id == "1788673445494-d76944a8b5a24268cd6d"
    assert rec.state == "pending"
    assert rec.content == [BASE]


# -- layout [JOB-E1] [JOB-E2] --------------------------------------------------------------


def test_canonical_layout_of_a_minimal_record() -> None:
    got = encode(decode(make()))
    assert (
        got
        == (
            "{\n"
            '  "content": [\n'
            f'    "{BASE}"\n'
            "  ],\n"
            '  "critical": [\n'
            f'    "{BASE}"\n'
            "  ],\n"
            '  "id": "1788673445494-d76944a8b5a24268cd6d",\n'
            '  "kind": "download",\n'
            '  "state": "pending",\n'
            '  "spec": {\n'
            '    "a": 1\n'
            "  },\n"
            '  "progress": {\n'
            '    "done": 0,\n'
            f'    "updated_at": "{T0}"\n'
            "  },\n"
            '  "lease": {\n'
            '    "owner": "",\n'
            '    "epoch": 0,\n'
            '    "expires_at": "0001-01-01T00:00:00.000000Z"\n'
            "  },\n"
            f'  "created_at": "{T0}",\n'
            f'  "updated_at": "{T0}"\n'
            "}\n"
        ).encode()
    )


def test_every_field_in_the_written_order() -> None:
    rec = fresh(
        envelope=Envelope("nas.example/transfer@2", ["pause", "nas.example/transfer@2#verify"]),
        checkpoint={"n": 1},
        progress=Progress(5, 10, datetime(2026, 1, 1, tzinfo=UTC), Step("fetch", 1, 2, 3, 4)),
        lease=Lease(
            "w",
            3,
            datetime(2026, 1, 1, tzinfo=UTC),
            Recall("r", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC), "boss"),
        ),
        delegation=Delegation("bits", "{G}", True),
        requires=["gpu", "net"],
        error="boom",
        intent=Intent("pause", "op", datetime(2026, 1, 1, tzinfo=UTC)),
        extensions={"x.b/e@1": 1, "x.a/e@1": [True]},
        state="running",
    )
    text = encode(rec).decode()
    keys = [line.split('"')[1] for line in text.split("\n") if line.startswith('  "')]
    assert keys == [key for key in ORDER if key != "schema"]  # the legacy integer is never written
    sub = [line.strip().split('"')[1] for line in text.split("\n") if line.startswith('    "') and ":" in line]
    assert sub[:2] == ["schema", "actions"]
    assert '    "done": 5,\n    "total": 10,\n    "updated_at": "2026-01-01T00:00:00.000000Z",\n    "step": {' in text
    assert '      "name": "fetch",\n      "ordinal": 1,\n      "of": 2,\n      "done": 3,\n      "total": 4\n' in text
    assert (
        '    "recall": {\n      "reason": "r",\n      "by": "boss",\n'
        '      "at": "2026-01-01T00:00:00.000000Z",\n      "until": "2026-01-02T00:00:00.000000Z"\n    }'
    ) in text
    assert '  "delegation": {\n    "system": "bits",\n    "external_id": "{G}",\n    "delivered": true\n  },' in text
    assert '  "intent": {\n    "want": "pause",\n    "by": "op",\n    "at": "2026-01-01T00:00:00.000000Z"\n  },' in text
    assert text.index('"x.a/e@1": [') < text.index('"x.b/e@1": 1')  # extensions sorted
    assert decode(text.encode()).content[-2:] == ["x.a/e@1", "x.b/e@1"]


def test_empty_fields_are_omitted_never_null() -> None:
    rec = fresh(progress=Progress(0, 0, None, Step("s", 1)), delegation=Delegation("b", "e", False))
    text = encode(rec).decode()
    assert "null" not in text
    for absent in (
        '"total"',
        '"of"',
        '"checkpoint"',
        '"requires"',
        '"error"',
        '"intent"',
        '"extensions"',
        '"delivered"',
    ):
        assert absent not in text
    assert '"step": {\n      "name": "s",\n      "ordinal": 1\n    }' in text


def test_file_ends_with_one_newline_and_has_no_cr_or_bom() -> None:
    data = encode(fresh(error="a\r\nb"))
    assert data.endswith(b"}\n") and not data.endswith(b"\n\n")
    assert b"\r" not in data
    assert not data.startswith(b"\xef\xbb\xbf")


def test_record_owned_strings_take_the_escape_policy() -> None:
    rec = fresh(id="j\u00e9", kind="k<&>/", error='q"\\\x01\u2028\U0001f600\x7f', requires=["a\tb"])
    rec.lease.owner = "own\ud800er"
    text = encode(rec).decode("utf-8")
    assert '"id": "j\u00e9"' in text
    assert '"kind": "k<&>/"' in text
    assert '"error": "q\\"\\\\\\u0001\\u2028\U0001f600\x7f"' in text
    assert '"owner": "own\\ufffder"' in text
    assert '    "a\\tb"\n' in text


# -- timestamps [JOB-E5] ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-09-06T05:44:05.772865Z", datetime(2026, 9, 6, 5, 44, 5, 772865, tzinfo=UTC)),
        ("2026-09-06t05:44:05.772865z", datetime(2026, 9, 6, 5, 44, 5, 772865, tzinfo=UTC)),
        ("2026-09-06T05:44:05Z", datetime(2026, 9, 6, 5, 44, 5, tzinfo=UTC)),
        ("2026-09-06T05:44:05.5Z", datetime(2026, 9, 6, 5, 44, 5, 500000, tzinfo=UTC)),
        ("2026-09-06T05:44:05.123456789Z", datetime(2026, 9, 6, 5, 44, 5, 123456, tzinfo=UTC)),
        ("2026-09-06T05:44:05.9999999Z", datetime(2026, 9, 6, 5, 44, 5, 999999, tzinfo=UTC)),
        ("2026-09-06T07:44:05.5+02:00", datetime(2026, 9, 6, 5, 44, 5, 500000, tzinfo=UTC)),
        ("2026-09-06T04:14:05.000001-01:30", datetime(2026, 9, 6, 5, 44, 5, 1, tzinfo=UTC)),
        ("2026-09-06T05:44:05.772865+00:00", datetime(2026, 9, 6, 5, 44, 5, 772865, tzinfo=UTC)),
        ("0001-01-01T00:00:00.000000Z", datetime(1, 1, 1, tzinfo=UTC)),
    ],
)
def test_parse_time_is_lenient(text: str, expected: datetime) -> None:
    got = record.parse_time(text, "t")
    assert got == expected
    assert got is not None and got.utcoffset() == timedelta(0)


@pytest.mark.parametrize("unset", ["", None])
def test_parse_time_unset(unset: str | None) -> None:
    assert record.parse_time(unset, "t") is None


@pytest.mark.parametrize(
    "bad",
    [
        "2026-09-06 05:44:05Z",
        "2026-09-06T05:44:05",
        "2026-09-06T05:44:05.Z",
        "2026-09-06T05:44:05.1234567890Z",
        "2026-02-30T00:00:00Z",
        "2026-9-6T05:44:05Z",
        "yesterday",
        "1790000000",
        "2024-01-01T00:00:00+25:00",  # RFC 3339's offset: hours 00-23, minutes 00-59
        "2024-01-01T00:00:00+23:60",
        "2024-01-01T00:00:00-24:00",
    ],
)
def test_parse_time_refuses_non_rfc3339(bad: str) -> None:
    with pytest.raises(Invalid):
        record.parse_time(bad, "t")


def test_parse_time_refuses_a_number() -> None:
    with pytest.raises(Invalid):
        record.parse_time(1790000000, "t")


def test_format_time_six_digits_capital_t_z() -> None:
    assert record.format_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"
    assert record.format_time(datetime(2026, 1, 2, 3, 4, 5, 70, tzinfo=UTC)) == "2026-01-02T03:04:05.000070Z"
    assert record.format_time(datetime(999, 1, 1, tzinfo=UTC)) == "0999-01-01T00:00:00.000000Z"
    # An unset instant is written as the Unix epoch, which every upstream reader accepts;
    # year one is echoed only when it was read (DIGEST §10.4).
    assert record.format_time(None) == "1970-01-01T00:00:00.000000Z"
    assert record.format_time(record.parse_time("0001-01-01T00:00:00.000000Z", "t")) == "0001-01-01T00:00:00.000000Z"


def test_format_time_converts_to_utc() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert record.format_time(datetime(2026, 1, 1, 1, 0, 0, 5, tzinfo=plus2)) == "2025-12-31T23:00:00.000005Z"


def test_format_time_refuses_naive() -> None:
    with pytest.raises(Invalid):
        record.format_time(datetime(2026, 1, 1))


def test_timestamps_are_truncated_not_rounded_on_the_way_through() -> None:
    text = make(
        progress='{"done":0,"updated_at":"2026-09-06T05:44:05.9999999Z"}',
        created_at='"2026-09-06T07:44:05.1234569+02:00"',
        updated_at='"2026-09-06t05:44:05.5z"',
    )
    out = encode(decode(text)).decode()
    assert '"updated_at": "2026-09-06T05:44:05.999999Z"' in out
    assert '"created_at": "2026-09-06T05:44:05.123456Z"' in out
    assert '  "updated_at": "2026-09-06T05:44:05.500000Z"\n' in out


def test_empty_timestamp_reads_as_unset() -> None:
    rec = decode(make(lease='{"owner":"","epoch":0,"expires_at":""}'))
    assert rec.lease.expires_at is None


# -- opaque values kept token for token [JOB-E7] [JOB-E8] ----------------------------------------

AWKWARD = (
    '{"s":"a\\/b","e":"\\u00e9","E":"\\u00E9","n":[1.50,1e2,-0.0,123456789012345678901234567890],'
    '"zebra":{"y":1,"x":2},"apple":true,"nul":null}'
)


@pytest.mark.parametrize("slot", ["spec", "checkpoint", "extension"])
def test_opaque_tokens_survive(slot: str) -> None:
    spaced = AWKWARD.replace(",", " ,\n\t").replace(":", " : ")
    if slot == "spec":
        text = make(spec=spaced)
    elif slot == "checkpoint":
        text = make(checkpoint=spaced)
    else:
        text = make(content=names(BASE, "x.test/e@1"), extensions='{"x.test/e@1":' + spaced + "}")
    rec = decode(text)
    key = {"spec": "spec", "checkpoint": "checkpoint", "extension": "x:x.test/e@1"}[slot]
    assert rec.opaque_text(key) == AWKWARD
    out = encode(rec)
    again = decode(out)
    assert again.opaque_text(key) == AWKWARD
    assert encode(again) == out
    body = out.decode()
    for token in ('"a\\/b"', '"\\u00e9"', '"\\u00E9"', "1.50", "1e2", "-0.0", "123456789012345678901234567890"):
        assert token in body
    assert body.index('"zebra"') < body.index('"apple"')
    assert body.index('"y": 1') < body.index('"x": 2')


def test_opaque_raw_line_separator_becomes_its_escape() -> None:
    rec = decode(make(spec='{"a":"x\u2028y\u2029z"}'))
    out = encode(rec).decode()
    assert '"a": "x\\u2028y\\u2029z"' in out
    assert "\u2028" not in out and "\u2029" not in out


def test_opaque_escaped_key_spelling_kept() -> None:
    out = encode(decode(make(spec='{"a\\/b":1,"\\u0041":2}'))).decode()
    assert '    "a\\/b": 1,\n    "\\u0041": 2\n' in out


def test_opaque_value_reindented_relative_to_depth() -> None:
    text = make(content=names(BASE, "x.t/e@1"), extensions='{"x.t/e@1":{"a":[1,{"b":[]}]}}')
    out = encode(decode(text)).decode()
    assert (
        '  "extensions": {\n    "x.t/e@1": {\n      "a": [\n        1,\n        {\n          "b": []\n'
        "        }\n      ]\n    }\n  },\n"
    ) in out


def test_programmatic_values_serialised_compactly_with_escape_policy() -> None:
    rec = fresh(spec={"url": "a/b?x=<1>&y", "u": "é\u2028", "f": 1.5, "big": 10**30})
    out = encode(rec).decode()
    assert '"url": "a/b?x=<1>&y"' in out
    assert '"u": "é\\u2028"' in out
    assert '"f": 1.5' in out
    assert '"big": 1000000000000000000000000000000' in out


def test_in_place_mutation_is_noticed_and_untouched_values_keep_bytes() -> None:
    text = make(
        spec='{"n":1.50,"list":[1],"s":"a\\/b"}',
        checkpoint='{"c":1.50,"t":"\\u00e9"}',
        content=names(BASE, "x.t/e@1"),
        extensions='{"x.t/e@1":{"k":1e2}}',
    )
    rec = decode(text)
    rec.spec["list"].append(2)
    out = encode(rec).decode()
    again = decode(out.encode())
    assert again.spec["list"] == [1, 2]
    assert again.opaque_text("checkpoint") == '{"c":1.50,"t":"\\u00e9"}'
    assert again.opaque_text("x:x.t/e@1") == '{"k":1e2}'

    rec2 = decode(text)
    rec2.checkpoint["c"] = 2
    rec2.extensions["x.t/e@1"]["k"] = "changed"
    again2 = decode(encode(rec2))
    assert again2.checkpoint == {"c": 2, "t": "é"}
    assert again2.extensions == {"x.t/e@1": {"k": "changed"}}
    assert again2.opaque_text("spec") == '{"n":1.50,"list":[1],"s":"a\\/b"}'


def test_replacing_a_value_with_raw_keeps_the_new_spelling() -> None:
    rec = decode(make(checkpoint='{"n":1}'))
    rec.checkpoint = wire.Raw('{"n" : 1.0}')
    assert decode(encode(rec)).opaque_text("checkpoint") == '{"n":1.0}'


def test_in_place_change_of_a_boolean_to_a_number_is_noticed() -> None:
    """Python says True == 1 == 1.0; the record must not keep the old bytes (§3.4). Failed on 140c712."""
    rec = decode(make(spec='{"flag":true,"n":0}'))
    rec.spec["flag"] = 1
    rec.spec["n"] = False
    again = decode(encode(rec))
    assert type(again.spec["flag"]) is int and again.spec["flag"] == 1
    assert again.spec["n"] is False


def test_checkpoint_absent_or_null_is_none() -> None:
    assert decode(make()).checkpoint_text() is None
    rec = decode(make(checkpoint="null"))
    assert rec.checkpoint_text() is None
    assert '"checkpoint"' not in encode(rec).decode()


def test_null_checkpoint_given_as_raw_is_omitted() -> None:
    data = encode(fresh(checkpoint=wire.Raw("null")))
    assert b'"checkpoint"' not in data
    assert data == encode(fresh(checkpoint=None))


# -- refusals -------------------------------------------------------------------------------------


def _refused(text: str | bytes, cls: type[Exception] = Invalid) -> None:
    with pytest.raises(cls) as info:
        decode(text)
    if cls is Invalid:
        assert not isinstance(info.value, UnknownSchema)


@pytest.mark.parametrize(
    "text",
    [
        make(spec='{"x":1,"\\u0078":2}'),
        make(spec='{"a":{"b":[{"c":1,"c":2}]}}'),
        make(checkpoint='{"k":[{"z":1,"z":1}]}'),
        make(content=names(BASE, "x.t/e@1"), extensions='{"x.t/e@1":{"d":1,"d":2}}'),
        make(content=names(BASE, "x.t/e@1"), extensions='{"x.t/e@1":1,"x.t/\\u0065@1":2}'),
        make(progress=f'{{"done":0,"done":1,"updated_at":"{T0}"}}'),
        make(lease='{"owner":"","owner":"x","epoch":0,"expires_at":""}'),
        make()[:-1] + ',"kind":"other"}',
        make()[:-1] + ',"\\u0069d":"other"}',
    ],
    ids=["spec-escaped", "spec-deep", "checkpoint", "ext-value", "ext-key", "progress", "lease", "top", "top-escaped"],
)
def test_duplicate_names_refused_at_every_depth(text: str) -> None:
    _refused(text)


@pytest.mark.parametrize(
    "spec",
    ['{"a":1,"A":2}', '{"\\u00e9":1,"e\\u0301":2}', '{"a":{"x":1},"b":{"x":1}}', '{"\u00e9":1,"e\u0301":2}'],
)
def test_distinct_names_accepted(spec: str) -> None:
    decode(make(spec=spec))


SURROGATE_SITES = [
    "spec-value",
    "spec-name",
    "checkpoint",
    "ext-value",
    "ext-key",
    "id",
    "kind",
    "owner",
    "error",
    "content",
]


def _with_string_at(where: str, s: str) -> str:
    fields: dict[str, str] = {
        "spec-value": {"spec": f'{{"a":{s}}}'},
        "spec-name": {"spec": f"{{{s}:1}}"},
        "checkpoint": {"checkpoint": f"[{s}]"},
        "ext-value": {"content": names(BASE, "x.t/e@1"), "extensions": f'{{"x.t/e@1":{{"k":{s}}}}}'},
        "ext-key": {"extensions": f"{{{s}:1}}"},
        "id": {"id": s},
        "kind": {"kind": s},
        "owner": {"lease": f'{{"owner":{s},"epoch":1,"expires_at":""}}'},
        "error": {"error": s},
        "content": {"content": f'["{BASE}",{s}]'},
    }[where]
    return make(**fields)


@pytest.mark.parametrize("lone", ["\\ud800", "\\uDBFF", "\\udc00", "\\uDFFF"])
@pytest.mark.parametrize("where", SURROGATE_SITES)
def test_escaped_lone_surrogates_refused_anywhere(lone: str, where: str) -> None:
    _refused(_with_string_at(where, f'"x{lone}y"'))


@pytest.mark.parametrize("where", SURROGATE_SITES)
def test_same_sites_accept_a_proper_escape(where: str) -> None:
    """The control for the test above: the refusal is the surrogate's, not the site's."""
    decode(_with_string_at(where, '"x\\u00e9\\ud83d\\ude00y"'))


def test_escaped_surrogate_pair_accepted() -> None:
    rec = decode(make(spec='{"a":"\\ud83d\\ude00"}'))
    assert rec.spec == {"a": "\U0001f600"}
    assert rec.opaque_text("spec") == '{"a":"\\ud83d\\ude00"}'


def _nest_objects(depth: int) -> str:
    """A JSON value ``depth`` containers deep."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def test_depth_64_counts_the_record() -> None:
    decode(make(spec=_nest_objects(63)))  # 1 (record) + 63 = 64
    _refused(make(spec=_nest_objects(64)))  # 65
    decode(make(checkpoint="[" * 63 + "]" * 63))
    _refused(make(checkpoint="[" * 64 + "]" * 64))
    ext = "x.t/e@1"
    decode(make(content=names(BASE, ext), extensions=f'{{"{ext}":{_nest_objects(62)}}}'))  # 1 + 1 + 62
    _refused(make(content=names(BASE, ext), extensions=f'{{"{ext}":{_nest_objects(63)}}}'))


def test_encode_refuses_what_decode_would_refuse_for_depth() -> None:
    """The 64 counts the record on write too (§3.5): never write what no reader loads. Failed on 140c712."""
    rec = fresh(spec=wire.Raw(_nest_objects(64)))
    with pytest.raises(Invalid):
        encode(rec)


def test_depth_of_a_record_that_encodes_is_readable() -> None:
    rec = fresh(spec=wire.Raw(_nest_objects(63)))
    assert decode(encode(rec)).opaque_text("spec") == _nest_objects(63)


@pytest.mark.parametrize("field", ["bogus", "Kind", "schema_version", "Content"])
def test_unknown_top_level_field_refused(field: str) -> None:
    _refused(make()[:-1] + f',"{field}":1}}')


@pytest.mark.parametrize(
    "fields",
    [
        {"progress": f'{{"done":0,"updated_at":"{T0}","percent":5}}'},
        {"progress": f'{{"done":0,"updated_at":"{T0}","step":{{"name":"s","ordinal":1,"eta":1}}}}'},
        {"lease": '{"owner":"","epoch":0,"expires_at":"","ttl":1}'},
        {
            "content": names(BASE, RECALL),
            "critical": names(BASE, RECALL),
            "lease": (
                f'{{"owner":"a","epoch":1,"expires_at":"{T0}",'
                f'"recall":{{"reason":"r","at":"{T0}","until":"{T0}","why":1}}}}'
            ),
        },
        {
            "content": names(BASE, DELEGATION),
            "critical": names(BASE, DELEGATION),
            "delegation": '{"system":"s","external_id":"e","url":"x"}',
        },
        {
            "content": names(BASE, ENVELOPE),
            "critical": names(BASE, ENVELOPE),
            "envelope": '{"schema":"a.b/c@1","resolve":"x"}',
        },
        {"content": names(BASE, INTENT), "critical": names(BASE, INTENT), "intent": '{"want":"run","why":"x"}'},
        {"progress": f'{{"Done":0,"updated_at":"{T0}"}}'},
    ],
    ids=["progress", "step", "lease", "recall", "delegation", "envelope", "intent", "case"],
)
def test_unknown_nested_field_refused(fields: dict[str, str]) -> None:
    _refused(make(**fields))


@pytest.mark.parametrize(
    "spec",
    [
        '{"a":NaN}',
        '{"a":Infinity}',
        '{"a":-Infinity}',
        '{"a":01}',
        '{"a":-00.5}',
        '{"a":1,}',
        '{"a":[1,2,]}',
        '{"a":1 /* c */}',
        '{"a":1 // c\n}',
        '{"a":"\\x41"}',
        '{"a":"raw\x01ctl"}',
        "{'a':1}",
        '{"a":+1}',
        '{"a":.5}',
        '{"a":1.}',
        '{"a":0x1F}',
    ],
)
def test_bad_json_in_opaque_values_refused(spec: str) -> None:
    _refused(make(spec=spec))
    _refused(make(checkpoint=spec))


def test_bom_refused() -> None:
    _refused(b"\xef\xbb\xbf" + make().encode())


@pytest.mark.parametrize("bad", [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\x80"])
def test_invalid_utf8_refused(bad: bytes) -> None:
    _refused(make(spec='{"a":"@@"}').encode().replace(b"@@", bad))


@pytest.mark.parametrize(
    "text",
    [
        make(spec="null"),
        make(spec=None),
        make(content="[]"),
        make(content=None, critical=None),
        make(id='""'),
        make(id='"   "'),
        make(kind='""'),
        make(state='"paused"'),
        make(state='"Running"'),
        make(state="null"),
        make(progress=f'{{"done":-1,"updated_at":"{T0}"}}'),
        make(progress=f'{{"done":1.5,"updated_at":"{T0}"}}'),
        make(progress=f'{{"done":1e2,"updated_at":"{T0}"}}'),
        make(progress=f'{{"done":0,"total":-4,"updated_at":"{T0}"}}'),
        make(lease='{"owner":"","epoch":-1,"expires_at":""}'),
        make(lease='{"owner":"","epoch":9223372036854775808,"expires_at":""}'),
        make(content=names(BASE, INTENT), critical=names(BASE, INTENT), intent='{"want":"halt"}'),
        make(content=names(BASE, INTENT), critical=names(BASE, INTENT), intent='{"want":"Run"}'),
        make(progress=f'{{"done":0,"updated_at":"{T0}","step":{{"name":" ","ordinal":1}}}}'),
        make(progress=f'{{"done":0,"updated_at":"{T0}","step":{{"name":"s","ordinal":0}}}}'),
        make(progress=f'{{"done":0,"updated_at":"{T0}","step":{{"name":"s","ordinal":3,"of":2}}}}'),
        make(progress=f'{{"done":0,"updated_at":"{T0}","step":{{"name":"s","ordinal":1,"done":-1}}}}'),
        make(
            content=names(BASE, DELEGATION),
            critical=names(BASE, DELEGATION),
            delegation='{"system":"","external_id":"e"}',
        ),
        make(content=names(BASE, DELEGATION), critical=names(BASE, DELEGATION), delegation='{"system":"s"}'),
        make(lease=f'{{"owner":"a","epoch":1,"expires_at":"{T0}","recall":{{"reason":" ","until":"{T0}"}}}}'),
        make(lease=f'{{"owner":"a","epoch":1,"expires_at":"{T0}","recall":{{"reason":"r"}}}}'),
        make(content=names(BASE, "x.t/e@1"), extensions='{" ":1}'),
        make(created_at='"not a time"'),
        make(requires='"gpu"'),
        make(error="5"),
        make(content='"abstraction.job/base@1"'),
        '[{"id":"x"}]',
        make() + "{}",
        make()[:-5],
    ],
)
def test_broken_records_refused_invalid(text: str) -> None:
    _refused(text)


def test_spec_need_not_be_an_object_on_read() -> None:
    """§10.7: any non-null spec is accepted on read and kept as written."""
    for spec in ("[1,2]", '"text"', "5", "false"):
        rec = decode(make(spec=spec))
        assert rec.opaque_text("spec") == spec
        assert decode(encode(rec)).opaque_text("spec") == spec


def test_encode_refuses_null_spec_given_as_raw() -> None:
    """spec not null is checked before every write (§3.1). Failed on 140c712."""
    with pytest.raises(Invalid):
        encode(fresh(spec=wire.Raw("null")))


def test_encode_refuses_missing_spec() -> None:
    with pytest.raises(Invalid):
        encode(fresh(spec=None))


def test_raw_text_with_a_lone_surrogate_is_a_verdict_not_a_crash() -> None:
    """A verdict or the \\ufffd replacement of §3.3, never UnicodeEncodeError. Failed on 140c712."""
    try:
        data = encode(fresh(spec=wire.Raw('{"a":"x\ud800y"}')))
    except Invalid:
        return
    assert b"\\ufffd" in data


# -- content / critical [JOB-D1]..[JOB-D10] ------------------------------------------------------


@pytest.fixture
def understood(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """A private copy of the reader's understood-model set, so ``record.understand`` leaks nothing."""
    copy = set(record.known_models())
    monkeypatch.setattr(record.roster, "_UNDERSTOOD", copy)
    yield copy


def test_derivation_order() -> None:
    rec = fresh(
        intent=Intent("pause", "op", datetime(2026, 1, 1, tzinfo=UTC)),
        delegation=Delegation("bits", "{G}"),
        envelope=Envelope("nas.example/transfer@2"),
        progress=Progress(0, 0, None, Step("s", 1)),
        state="failed",
        lease=Lease("w", 1, datetime(2026, 1, 1, tzinfo=UTC), Recall("r", None, datetime(2026, 1, 1, tzinfo=UTC))),
        extensions={"z.ext/b@1": 1, "a.ext/a@1": 2, "M.ext/c@1": 3},
        content=[BASE, "unknown.thing/x@1", RANGES],
    )
    content, critical = record.derive(rec, has_ranges=False)
    assert content == [
        BASE,
        INTENT,
        DELEGATION,
        ENVELOPE,
        STEP,
        TERMINAL,
        RECALL,
        RANGES,  # carried from the previous content
        "M.ext/c@1",  # extension keys sorted by code point
        "a.ext/a@1",
        "z.ext/b@1",
    ]
    assert critical == [BASE, INTENT, DELEGATION, ENVELOPE, TERMINAL, RECALL]
    written = decode(encode(rec))
    assert (written.content, written.critical) == (content, critical)


def test_derivation_minimal_and_ranges() -> None:
    assert record.derive(fresh(), False) == ([BASE], [BASE])
    assert record.derive(fresh(), True) == ([BASE, RANGES], [BASE])
    assert record.derive(fresh(content=[BASE, RANGES]), False) == ([BASE, RANGES], [BASE])
    assert record.derive(fresh(state="transferred"), False) == ([BASE], [BASE])
    for state in ("complete", "failed", "cancelled"):
        assert record.derive(fresh(state=state), False) == ([BASE, TERMINAL], [BASE, TERMINAL])


def test_unknown_content_names_dropped_on_write() -> None:
    rec = decode(make(content=names(BASE, "abstraction.test/hovercraft@7")))
    assert rec.content == [BASE, "abstraction.test/hovercraft@7"]
    assert decode(encode(rec)).content == [BASE]


def test_extension_writers_critical_marking_is_preserved(understood: set[str]) -> None:
    record.understand("z.ext/crit@1")
    record.understand("a.ext/crit@1")
    text = make(
        content=names(BASE, "a.ext/crit@1", "m.ext/plain@1", "z.ext/crit@1"),
        critical=names(BASE, "z.ext/crit@1", "a.ext/crit@1"),
        extensions='{"a.ext/crit@1":1,"m.ext/plain@1":2,"z.ext/crit@1":3}',
    )
    rec = decode(text)
    out = decode(encode(rec))
    assert out.content == [BASE, "a.ext/crit@1", "m.ext/plain@1", "z.ext/crit@1"]
    # appended in the previous critical's order, after the derived ones
    assert out.critical == [BASE, "z.ext/crit@1", "a.ext/crit@1"]
    # the marking goes with the extension
    del rec.extensions["z.ext/crit@1"]
    out = decode(encode(rec))
    assert out.critical == [BASE, "a.ext/crit@1"]
    assert "z.ext/crit@1" not in out.content


def test_understand_is_required_to_read_a_critical_extension(understood: set[str]) -> None:
    text = make(
        content=names(BASE, "q.ext/crit@1"), critical=names(BASE, "q.ext/crit@1"), extensions='{"q.ext/crit@1":1}'
    )
    with pytest.raises(UnknownSchema):
        decode(text)
    record.understand("q.ext/crit@1")
    assert decode(text).critical == [BASE, "q.ext/crit@1"]


def test_never_critical_names_are_stripped_before_the_checks() -> None:
    # step and ranges marked critical: stripped, no refusal, even when absent from content
    rec = decode(make(content=names(BASE, STEP), critical=names(BASE, STEP, RANGES)))
    assert rec.critical == [BASE]
    rec = decode(make(content=names(BASE), critical=names(BASE, STEP)))
    assert rec.critical == [BASE]
    # and the wrong marking is gone from the next write
    prog = f'{{"done":0,"updated_at":"{T0}","step":{{"name":"s","ordinal":1}}}}'
    rec = decode(make(content=names(BASE, STEP), critical=names(BASE, STEP), progress=prog))
    out = decode(encode(rec))
    assert (out.content, out.critical) == ([BASE, STEP], [BASE])


def test_unknown_critical_is_unknown_schema_before_the_subset_check() -> None:
    _refused(make(critical=names(BASE, "x.test/new@1")), UnknownSchema)  # not in content either: D1 first
    _refused(make(content=names(BASE, "x.test/new@1"), critical=names(BASE, "x.test/new@1")), UnknownSchema)


def test_known_critical_not_in_content_is_invalid() -> None:
    _refused(make(critical=names(BASE, INTENT)), Invalid)
    _refused(make(content=names(INTENT), critical=names(BASE, INTENT)), Invalid)


def test_unknown_only_in_content_is_carried_in_memory() -> None:
    rec = decode(make(content=names("abstraction.test/hovercraft@7", BASE)))
    assert rec.content == ["abstraction.test/hovercraft@7", BASE]


def test_encode_refuses_unknown_critical(understood: set[str]) -> None:
    rec = fresh(extensions={"x.ext/c@1": 1}, critical=[BASE, "x.ext/c@1"])
    with pytest.raises(UnknownSchema):
        encode(rec)


# -- legacy integer schema [JOB-D4] [JOB-D5] ---------------------------------------------------------

STEP_PROGRESS = f'{{"done":0,"updated_at":"{T0}","step":{{"name":"s","ordinal":1}}}}'


@pytest.mark.parametrize(
    ("schema", "content", "critical"),
    [
        (3, [BASE], [BASE]),
        (4, [BASE, INTENT], [BASE, INTENT]),
        (5, [BASE, INTENT, STEP], [BASE, INTENT]),
    ],
)
@pytest.mark.parametrize("delegated", [False, True])
def test_legacy_schema_mapping(schema: int, content: list[str], critical: list[str], delegated: bool) -> None:
    fields: dict[str, str | None] = {"content": None, "critical": None, "schema": str(schema)}
    if delegated:
        fields["delegation"] = '{"system":"bits","external_id":"{G}"}'
    rec = decode(make(**fields))
    extra = [DELEGATION] if delegated else []
    assert rec.content == content + extra
    assert rec.critical == critical + extra
    for data in (encode(rec), encode(rec, rederive=False)):
        assert b'"schema"' not in data  # never written back
        decode(data)


def test_legacy_schema_with_empty_content_list() -> None:
    rec = decode(make(content="[]", critical=None, schema="4"))
    assert rec.content == [BASE, INTENT]


def test_legacy_schema_rederived_on_write() -> None:
    rec = decode(make(content=None, critical=None, schema="5", progress=STEP_PROGRESS))
    out = decode(encode(rec))
    assert (out.content, out.critical) == ([BASE, STEP], [BASE])  # no intent present -> not derived


@pytest.mark.parametrize("schema", [1, 2, 6, 99, 0])
def test_other_legacy_schemas_are_unknown(schema: int) -> None:
    _refused(make(content=None, critical=None, schema=str(schema)), UnknownSchema)


def test_schema_ignored_when_content_present() -> None:
    rec = decode(make(schema="99"))
    assert rec.content == [BASE]
    assert b'"schema"' not in encode(rec)


def test_no_content_and_no_schema_is_invalid() -> None:
    _refused(make(content=None, critical=None), Invalid)
    _refused(make(content="[]"), Invalid)


# -- envelope [JOB-V1]..[JOB-V5] ---------------------------------------------------------------------


def _label(n: int) -> str:
    return "a" * n


def _schema_of_length(n: int) -> str:
    """``<63 a>.<k a>/b@1`` with k chosen so the whole is ``n`` bytes (labels stay <= 63)."""
    return _label(63) + "." + _label(n - 63 - 1 - 4) + "/b@1"


@pytest.mark.parametrize(
    ("schema", "ok"),
    [
        ("nas.example/transfer@2", True),
        ("a/b@1", True),
        ("a-b.c-d/e-f@123456789", True),
        ("a/b@1234567890", False),
        ("a/b@0", False),
        ("a/b@01", False),
        (_label(63) + "/b@1", True),
        (_label(64) + "/b@1", False),
        ("a/" + _label(63) + "@1", True),
        ("a/" + _label(64) + "@1", False),
        (_schema_of_length(128), True),
        (_schema_of_length(129), False),
        ("NAS.example/transfer@2", False),
        ("nas.example/Transfer@2", False),
        ("nas.example/transfer/v2@2", False),
        ("nas.example/transfer", False),
        ("https://example.invalid/transfer@2", False),
        ("\\\\host\\share\\transfer@2", False),
        ("../../etc/passwd@2", False),
        ("a..b/c@1", False),
        ("-a/b@1", False),
        ("a-/b@1", False),
        ("a/b_c@1", False),
        ("a/b@1@2", False),
        ("", False),
    ],
)
def test_envelope_schema_grammar(schema: str, ok: bool) -> None:
    assert record.valid_schema(schema) is ok
    env = Envelope(schema, [])
    if ok:
        record.check_envelope(env)
    else:
        with pytest.raises(Invalid):
            record.check_envelope(env)


def test_schema_length_boundary_is_what_it_claims() -> None:
    assert len(_schema_of_length(128)) == 128
    assert len(_schema_of_length(129)) == 129


@pytest.mark.parametrize(
    ("actions", "ok"),
    [
        (["pause", "resume", "cancel", "recall"], True),
        (["cancel", "nas.example/transfer@2#cancel", "nas.example/transfer@2#re-mirror"], True),
        (["nas.example/transfer@2#re_mirror"], True),
        (["nas.example/transfer@2#" + "a" * 64], True),
        (["nas.example/transfer@2#" + "a" * 65], False),
        (["remirror"], False),  # a bare action must be one of the base four
        (["Pause"], False),
        (["abstraction.job/base@1#pause"], False),  # base action spelled long
        (["someone.else/other@1#verify"], False),  # another schema
        (["nas.example/transfer@2#verify#now"], False),
        (["nas.example/transfer@2#"], False),
        (["#pause"], False),
        (["nas.example/transfer@2#_x"], False),
        (["nas.example/transfer@2#x-"], False),
        (["cancel", "cancel"], False),
    ],
)
def test_envelope_actions(actions: list[str], ok: bool) -> None:
    env = Envelope("nas.example/transfer@2", actions)
    if ok:
        record.check_envelope(env)
    else:
        with pytest.raises(Invalid):
            record.check_envelope(env)


def test_envelope_written_in_order_and_declared_critical() -> None:
    actions = ["nas.example/transfer@2#verify", "cancel", "pause"]
    rec = fresh(envelope=Envelope("nas.example/transfer@2", actions))
    out = encode(rec).decode()
    assert (
        '  "envelope": {\n    "schema": "nas.example/transfer@2",\n    "actions": [\n'
        '      "nas.example/transfer@2#verify",\n      "cancel",\n      "pause"\n    ]\n  },\n'
    ) in out
    back = decode(out.encode())
    assert back.envelope == Envelope("nas.example/transfer@2", actions)
    assert ENVELOPE in back.critical
    bare = encode(fresh(envelope=Envelope("a.b/c@1"))).decode()
    assert '  "envelope": {\n    "schema": "a.b/c@1"\n  },\n' in bare


def test_encode_refuses_a_bad_envelope() -> None:
    with pytest.raises(Invalid):
        encode(fresh(envelope=Envelope("Bad/Schema@1")))


def test_ask_rules() -> None:
    rec = fresh(envelope=Envelope("nas.example/transfer@2", ["cancel", "nas.example/transfer@2#verify"]))
    sup = ["nas.example/transfer@2"]
    assert record.ask(rec, "cancel", sup, ["cancel"]) == "ok"
    assert record.ask(rec, "cancel", [], ["cancel"]) == "unknown_schema"
    assert record.ask(rec, "pause", sup, ["pause"]) == "not_supported"
    assert record.ask(rec, "cancel", sup, []) == "not_supported"
    assert record.ask(rec, "Cancel", sup, ["cancel"]) == "invalid"
    assert record.ask(rec, "verify", sup, ["verify"]) == "invalid"
    assert record.ask(rec, "nas.example/transfer@2#verify", sup, ["nas.example/transfer@2#verify"]) == "ok"
    assert record.ask(fresh(), "pause", sup, ["pause"]) == "not_supported"


# -- checkpoint ranges [JOB-C1]..[JOB-C5] ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"verified":[[4,8],[0,4]]}', '{"verified_prefix":8,"verified":[[0,8]]}'),  # sort + touching merge
        ('{"verified":[[0,5],[3,7]]}', '{"verified_prefix":7,"verified":[[0,7]]}'),  # overlap
        (
            '{"verified":[[10,20],[2,5],[5,5],[30,30]]}',
            '{"verified_prefix":0,"verified":[[2,5],[10,20]]}',
        ),  # empty dropped
        ('{"verified":[[8,16]],"verified_prefix":8}', '{"verified_prefix":16,"verified":[[0,16]]}'),  # prefix union
        ('{"verified":[[2,4]],"verified_prefix":4}', '{"verified_prefix":4,"verified":[[0,4]]}'),
        ('{"verified":[[20,30]],"verified_prefix":10}', '{"verified_prefix":10,"verified":[[0,10],[20,30]]}'),
        ('{"verified":[],"verified_prefix":0}', '{"verified_prefix":0,"verified":[]}'),
        ('{"verified":[[6,9],[6,8]]}', '{"verified_prefix":0,"verified":[[6,9]]}'),
        (
            '{"zeta":{"b":1.50},"verified":[[0,4]],"alpha":"a\\/b","verified_prefix":0}',
            '{"verified_prefix":4,"verified":[[0,4]],"alpha":"a\\/b","zeta":{"b":1.50}}',  # others sorted, verbatim
        ),
    ],
)
def test_ranges_canonicalised(text: str, expected: str) -> None:
    assert record.canonical_ranges(text) == expected
    assert record.canonical_ranges(expected) == expected  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        '{"verified":[[0,1.5]]}',
        '{"verified":[[0.0,4]]}',
        '{"verified":[[-1,4]]}',
        '{"verified":[[8,4]]}',
        '{"verified":[[0,4]],"verified_prefix":1.5}',
        '{"verified":[[0,4]],"verified_prefix":-1}',
        '{"verified":[[0,"4"]]}',
        '{"verified":[[0,4,8]]}',
        '{"verified":[4]}',
        '{"verified":"0-4"}',
    ],
)
def test_ranges_refused(text: str) -> None:
    with pytest.raises(Invalid):
        record.canonical_ranges(text)
    with pytest.raises(Invalid):
        encode(fresh(checkpoint=wire.Raw(text)))


@pytest.mark.parametrize(
    "text", ['{"verified_prefix":16}', '{"b":1,"a":2}', '{"x":{"verified":[[4,8],[0,4]]}}', "[1]", '"verified"', "7"]
)
def test_checkpoint_without_verified_untouched(text: str) -> None:
    assert record.canonical_ranges(text) is None
    rec = decode(encode(fresh(checkpoint=wire.Raw(text))))
    assert rec.opaque_text("checkpoint") == text
    assert RANGES not in rec.content


def test_ranges_applied_on_encode_and_declared() -> None:
    rec = fresh(checkpoint=wire.Raw('{"etag":"x","verified":[[4,8],[0,4]]}'))
    out = decode(encode(rec))
    assert out.opaque_text("checkpoint") == '{"verified_prefix":8,"verified":[[0,8]],"etag":"x"}'
    assert out.content == [BASE, RANGES]
    assert out.critical == [BASE]  # never critical [JOB-C2]


def test_ranges_model_carried_until_withdrawn() -> None:
    rec = decode(encode(fresh(checkpoint={"verified": [[0, 4]]})))
    assert RANGES in rec.content
    rec.checkpoint = {"other": 1}
    kept = decode(encode(rec))
    assert RANGES in kept.content  # carried, not derived
    kept.content.remove(RANGES)
    assert RANGES not in decode(encode(kept)).content


def test_ranges_key_spelled_with_an_escape() -> None:
    """Names compare after decoding escapes (§3.4), so this checkpoint holds `verified` (§3.11). Failed on 140c712."""
    assert record.canonical_ranges('{"verifie\\u0064":[[4,8],[0,4]]}') is not None


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"garbage", "record is not valid JSON at byte 0"),
        (b"\n  \xc3\xa9t\xc3\xa9", "record is not valid JSON at byte 3"),
        (b"", "record is not valid JSON at byte 0 (the file is empty)"),
        (b"[1, 2]", "record is valid JSON but not a JSON object"),
    ],
)
def test_a_damaged_record_is_described_as_what_it_is(data: bytes, said: str) -> None:
    with pytest.raises(Invalid) as caught:
        record.decode(data, "1787202430967-a752f9a9c2c77b123ffd")
    assert caught.value.message == said
