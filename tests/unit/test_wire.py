"""The byte level: string escaping (DIGEST §3.3), opaque values (§3.4), the scanner, depth (§3.5)."""

from __future__ import annotations

import json

import pytest

from jobctl import wire
from jobctl.errors import Invalid

# -- escaping [JOB-E6] ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"', r'"\""'),
        ("\\", r'"\\"'),
        ("\b", r'"\b"'),
        ("\t", r'"\t"'),
        ("\n", r'"\n"'),
        ("\f", r'"\f"'),
        ("\r", r'"\r"'),
        ('a"b\\c\nd', r'"a\"b\\c\nd"'),
    ],
)
def test_escape_short_forms(text: str, expected: str) -> None:
    assert wire.escape(text) == expected


@pytest.mark.parametrize("code", [c for c in range(0x20) if chr(c) not in "\b\t\n\f\r"])
def test_escape_other_controls_are_lower_case_u00xx(code: int) -> None:
    assert wire.escape(chr(code)) == '"\\u' + f"{code:04x}" + '"'
    assert wire.escape(chr(code)) == '"' + "\\u00" + format(code, "02x") + '"'


def test_escape_control_hex_is_lower_case() -> None:
    assert wire.escape("\x1b\x1f\x0b") == r'"\u001b\u001f\u000b"'


def test_escape_line_and_paragraph_separators() -> None:
    assert wire.escape("a\u2028b\u2029c") == r'"a\u2028b\u2029c"'


@pytest.mark.parametrize(
    "text",
    ["/", "&", "<", ">", "&<>/", "\x7f", "\u00e9", "\u00a0", "\u0085", "\u200b", "\ufeff", "\U0001f600", "日本"],
)
def test_escape_everything_else_is_raw_utf8(text: str) -> None:
    got = wire.escape(text)
    assert got == '"' + text + '"'


def test_escape_astral_is_four_raw_bytes_never_a_surrogate_pair() -> None:
    got = wire.escape("\U0001f600").encode("utf-8")
    assert got == b'"\xf0\x9f\x98\x80"'
    assert b"\\ud83d" not in got.lower()


@pytest.mark.parametrize(("lone", "where"), [("\ud800", "high"), ("\udfff", "low"), ("\udc80", "surrogateescape")])
def test_escape_lone_surrogate_becomes_ufffd_escape(lone: str, where: str) -> None:
    assert wire.escape("a" + lone + "b") == r'"a\ufffdb"', where
    assert wire.escape(lone + lone) == r'"\ufffd\ufffd"'  # one for one


def test_escape_says_plain_for_the_ascii_text_its_pattern_says_plain() -> None:
    """Printable ASCII with no quote or backslash is taken as plain without _PLAIN (not compiled at start-up);
    every ASCII character, in the middle of a text, is plain exactly when the pattern says so."""
    for code in range(128):
        text = f"a{chr(code)}b"
        plain = wire._PLAIN.match(text) is not None
        assert (wire.escape(text) == f'"{text}"') is plain, code
    assert wire.escape("\x7f") == '"\x7f"' and wire.escape("") == '""' and wire.escape(" ") == '" "'


def test_escape_differs_from_json_dumps_defaults() -> None:
    """Neither ensure_ascii nor HTML escaping: the two wrong defaults of §3.3."""
    text = "é<>&\u2028\x01"
    assert wire.escape(text) != json.dumps(text)
    assert wire.escape(text) == '"é<>&\\u2028\\u0001"'


# -- compact: tokens kept, whitespace removed [JOB-E7] -----------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{ "a" : "a\\/b" }', '{"a":"a\\/b"}'),
        ('[ "\\u00e9" , "\\u00E9" ]', '["\\u00e9","\\u00E9"]'),
        ("[1.50, 1e2, 1E+2, -0.0, -0, 0.1e-3]", "[1.50,1e2,1E+2,-0.0,-0,0.1e-3]"),
        ("[123456789012345678901234567890]", "[123456789012345678901234567890]"),
        ('{"zebra": 1,\n\t"apple": 2}', '{"zebra":1,"apple":2}'),
        ('"  spaces  inside  "', '"  spaces  inside  "'),
        ('{"k": "x \\" y , : { ["}', '{"k":"x \\" y , : { ["}'),
        ('"a\\\\"', '"a\\\\"'),
        ("[ true , false , null ]", "[true,false,null]"),
        (" {} ", "{}"),
    ],
)
def test_compact_keeps_tokens(text: str, expected: str) -> None:
    assert wire.compact(text) == expected


def test_compact_escapes_raw_line_separators_only() -> None:
    """A raw U+2028/U+2029 inside an opaque string becomes its escape: the one spelling change."""
    assert wire.compact('{"a": "x\u2028y\u2029z"}') == '{"a":"x\\u2028y\\u2029z"}'
    assert wire.compact('{"a": "\\u2028"}') == '{"a":"\\u2028"}'


# -- indent ----------------------------------------------------------------------------------


def test_indent_layout() -> None:
    got = wire.indent('{"a":[1,{"b":{}},[]],"c":"x:y,z"}', 1)
    assert got == (
        '{\n    "a": [\n      1,\n      {\n        "b": {}\n      },\n      []\n    ],\n    "c": "x:y,z"\n  }'
    )


def test_indent_scalars_and_empties() -> None:
    assert wire.indent("1.50", 3) == "1.50"
    assert wire.indent('"a"', 1) == '"a"'
    assert wire.indent("{}", 1) == "{}"
    assert wire.indent("[]", 1) == "[]"


def test_indent_leaves_brackets_inside_strings_alone() -> None:
    assert wire.indent('["[]","{}"]', 0) == '[\n  "[]",\n  "{}"\n]'


# -- the scanner: grammar refusals ---------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "[Infinity]",
        "[-Infinity]",
        '{"a":01}',
        "[-01]",
        "[+1]",
        "[0x10]",
        "[.5]",
        "[1.]",
        "[1e]",
        "[-]",
        "[1,]",
        '{"a":1,}',
        "[1 /* c */]",
        "[1] // c",
        "[1] # c",
        "{'a':1}",
        '["\\x"]',
        '["\\U0041"]',
        '["a\x01b"]',
        '["a\tb"]',
        '["a\nb"]',
        "[tru]",
        "[True]",
        "[nul]",
        '["abc',
        "[1",
        "[1] [2]",
        "",
        "   ",
        "[1]x",
        '{"a"}',
        '{"a" 1}',
        "{1:2}",
    ],
)
def test_scanner_refuses_what_rfc8259_does(text: str) -> None:
    with pytest.raises(Invalid):
        wire.parse_value(text)
    with pytest.raises(Invalid):
        wire.Raw(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"x":1,"\\u0078":2}',
        '{"a":{"b":[{"c":1,"c":2}]}}',
        '[{"k":1},{"k":1,"k":1}]',
        '{"\\u00e9":1,"\u00e9":2}',
    ],
)
def test_duplicate_member_names_refused_at_every_depth(text: str) -> None:
    with pytest.raises(Invalid):
        wire.parse_value(text)


@pytest.mark.parametrize(
    "text",
    ['{"a":1,"A":2}', '{"\\u00e9":1,"e\\u0301":2}', '{"a":{"x":1},"b":{"x":1}}', '[{"x":1},{"x":2}]'],
)
def test_distinct_names_accepted(text: str) -> None:
    wire.parse_value(text)


@pytest.mark.parametrize(
    "text",
    [
        '["\\ud800"]',
        '["\\uDBFF x"]',
        '["\\udc00"]',
        '["x\\uDFFF"]',
        '["\\ude00\\ud83d"]',
        '{"\\ud800":1}',
        '{"a":[{"b":"\\udc01"}]}',
        '["\\ud83d\\u0041"]',
    ],
)
def test_escaped_lone_surrogates_refused(text: str) -> None:
    with pytest.raises(Invalid):
        wire.parse_value(text)


def test_surrogate_pairs_and_look_alikes_accepted() -> None:
    assert wire.parse_value('["\\ud83d\\ude00"]') == ["\U0001f600"]
    assert wire.parse_value('["\\\\ud800"]') == ["\\ud800"]  # an escaped backslash, then text


def test_number_spellings_accepted_and_kept() -> None:
    raw = wire.Raw("[ 1.50, 1e2, -0.0, 123456789012345678901234567890, 1E-7, 0 ]")
    assert raw.text == "[1.50,1e2,-0.0,123456789012345678901234567890,1E-7,0]"
    assert raw.value[3] == 123456789012345678901234567890


def test_enormous_integer_survives() -> None:
    digits = "9" * 5000  # past Python's int-from-str digit limit
    raw = wire.Raw("[" + digits + "]")
    assert raw.text == "[" + digits + "]"


# -- depth [§3.5] ------------------------------------------------------------------------------


def _nested(n: int) -> str:
    return "[" * n + "]" * n


def test_depth_limit_standalone() -> None:
    wire.parse_value(_nested(64))
    with pytest.raises(Invalid):
        wire.parse_value(_nested(65))


def test_depth_limit_counts_enclosing_containers() -> None:
    wire.check_text(_nested(63), base_depth=1)
    with pytest.raises(Invalid):
        wire.check_text(_nested(64), base_depth=1)


def test_depth_ignores_brackets_inside_strings() -> None:
    text = '["' + "[" * 200 + '"]'
    assert wire.parse_value(text) == ["[" * 200]


# -- Raw and programmatic values ----------------------------------------------------------------


def test_raw_keeps_spelling_and_compares_by_text() -> None:
    a = wire.Raw('{"n": 1.50, "s": "a\\/b"}')
    assert a.text == '{"n":1.50,"s":"a\\/b"}'
    assert a.value == {"n": 1.5, "s": "a/b"}
    assert a == wire.Raw('{ "n":1.50 , "s":"a\\/b" }')
    assert a != wire.Raw('{"n":1.5,"s":"a\\/b"}')
    assert a == {"n": 1.5, "s": "a/b"}


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf{}", b'{"a":"\xff"}', b'{"a":"\xc0\xaf"}', b'["\xed\xa0\x80"]'])
def test_raw_bytes_must_be_utf8_without_bom(data: bytes) -> None:
    with pytest.raises(Invalid):
        wire.Raw(data)


def test_dumps_compact_uses_the_record_escape_policy() -> None:
    value = {"é": "a/b<&>\u2028\x01", "n": [1, 1.5, True, False, None], "r": wire.Raw("[1.50]")}
    assert wire.dumps_compact(value) == '{"é":"a/b<&>\\u2028\\u0001","n":[1,1.5,true,false,null],"r":[1.50]}'


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {1: 2}, object(), {"a": {1, 2}}])
def test_dumps_compact_refuses_non_json(bad: object) -> None:
    with pytest.raises(Invalid):
        wire.dumps_compact(bad)


def test_lazy_pattern_compiles_on_first_use_and_takes_its_own_place() -> None:
    import re

    where: dict[str, object] = {}
    where["P"] = wire.lazy_pattern(where, "P", r"a(b+)")
    assert not isinstance(where["P"], re.Pattern)
    m = where["P"].match("abbb")  # type: ignore[attr-defined]
    assert m is not None and m.group(1) == "bbb"
    assert isinstance(where["P"], re.Pattern) and where["P"].pattern == r"a(b+)"


def test_lazy_patterns_of_the_library_are_compiled_only_when_used() -> None:
    import subprocess
    import sys

    probe = (
        "import re, jobctl.wire as w, jobctl.record.checks as r\n"
        "print(isinstance(r._SCHEMA, re.Pattern))\n"
        "r.valid_schema('nas.example/transfer@2')\n"
        "print(isinstance(r._SCHEMA, re.Pattern))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_a_missing_value_is_reported_where_it_is_missing() -> None:
    with pytest.raises(Invalid, match="line 2 column 8"):
        wire.parse_value('{"a": 1,\n "b": [}')


# -- the scanner without json loaded -------------------------------------------------------

SYNTAX_ERRORS = ['["\\x"]', '["a\x01b"]', '{"a":1,}', '["abc', '{"a" 1}', "[1 2]", '{"a":"\\u12"}']
NAME_ERRORS = ['{"a\\x": 1}', '{"\\u00e9\x01": 1}']

# Prints whether json was loaded before the first scan, then one refusal a line; no json of its own.
REFUSALS = """
import sys
if sys.argv[1] == "no _json":
    sys.modules["_json"] = None  # an interpreter without json's C accelerator
from jobctl import wire
from jobctl.errors import Invalid
print("json" in sys.modules or "json.decoder" in sys.modules)
for text in sys.argv[2:]:
    name, text = text[:1] == "N", text[1:]
    try:
        wire.parse_object_members(text, 0, "spec") if name else wire.parse_value(text)
    except Invalid as exc:
        print(exc.message.encode("unicode_escape").decode())
"""


@pytest.mark.parametrize("scanner", ["_json", "no _json"])
def test_a_fresh_interpreter_words_a_syntax_error_as_json_would(scanner: str) -> None:
    """wire imports no ``json``: a scan's first error loads ``json.decoder`` (without it, Python 3.10's
    and 3.11's C scanner raise SystemError), and every refusal is worded as with json loaded."""
    import subprocess
    import sys

    texts = ["V" + t for t in SYNTAX_ERRORS] + ["N" + t for t in NAME_ERRORS]
    proc = subprocess.run(
        [sys.executable, "-c", REFUSALS, scanner, *texts], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    loaded_at_start, *said = proc.stdout.splitlines()
    expected = []
    for text in texts:
        with pytest.raises(Invalid) as exc:
            if text[0] == "N":
                wire.parse_object_members(text[1:], 0, "spec")
            else:
                wire.parse_value(text[1:])
        expected.append(exc.value.message.encode("unicode_escape").decode())
    if scanner == "_json":
        assert said == expected
        assert loaded_at_start == "False"
    else:  # json's Python scanner words a few errors its own way (a column further on)
        assert len(said) == len(expected) and loaded_at_start == "True"  # json's own scanner is json's
    assert all(m.startswith(("bad JSON at line 1", "spec: bad member name at line 1")) for m in said), said
