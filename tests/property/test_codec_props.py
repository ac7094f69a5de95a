"""Opaque values under arbitrary spelling (DIGEST §3.4, [JOB-E7] [JOB-E8]).

A generator builds JSON texts token by token -- random insignificant
whitespace, every escape form, every number spelling, nesting up to 62 -- and
knows, independently of the library, what the compact form must be: the same
tokens with the whitespace gone (and a raw U+2028/U+2029 escaped, the one
spelling change allowed). Decoding a record that carries such a value and
encoding it again must keep exactly those bytes, and a second round trip must
be a fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobctl import record, wire

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T0 = "2026-09-06T05:44:05.494626Z"
EXT = "x.test/opaque@1"


@dataclass(frozen=True)
class Doc:
    text: str  # as written, whitespace and all
    compact: str  # what the binding must keep
    depth: int  # containers, counting its own outermost one (0 for a scalar)


ws = st.text(alphabet=" \t\n\r", max_size=3)

# -- strings -----------------------------------------------------------------------------

_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

chars = st.one_of(
    st.characters(codec="utf-8", exclude_categories=("Cs",)),  # anything but a surrogate
    st.sampled_from([*_SHORT, "\u2028", "\u2029", "\x7f", "\x00", "\x1f", "\U0001f600", "\u00e9", "\ufeff"]),
)


@st.composite
def spelled_char(draw: st.DrawFn, ch: str) -> tuple[str, str]:
    """One character spelled some legal way: (as written, as the compact form must keep it)."""
    code = ord(ch)
    options = ["u"]
    if code >= 0x20 and ch not in '"\\':
        options.append("raw")
    if ch in _SHORT:
        options.append("short")
    how = draw(st.sampled_from(options))
    if how == "raw":
        kept = {"\u2028": "\\u2028", "\u2029": "\\u2029"}.get(ch, ch)
        return ch, kept
    if how == "short":
        return _SHORT[ch], _SHORT[ch]
    upper = draw(st.booleans())
    if code > 0xFFFF:
        hi = 0xD800 + ((code - 0x10000) >> 10)
        lo = 0xDC00 + ((code - 0x10000) & 0x3FF)
        spelled = f"\\u{hi:04x}\\u{lo:04x}"
    else:
        spelled = f"\\u{code:04x}"
    if upper:
        spelled = spelled.replace("\\u", "\\U").upper().replace("\\U", "\\u")
    return spelled, spelled


@st.composite
def json_string(draw: st.DrawFn, value: str | None = None) -> tuple[str, str, str]:
    """(written, compact, decoded) of a string literal; ``value`` fixes the decoded text."""
    decoded = draw(st.lists(chars, max_size=8).map("".join)) if value is None else value
    written, kept = [], []
    for ch in decoded:
        w, k = draw(spelled_char(ch))
        written.append(w)
        kept.append(k)
    return '"' + "".join(written) + '"', '"' + "".join(kept) + '"', decoded


# -- numbers and literals ---------------------------------------------------------------

digits = st.text(alphabet="0123456789", min_size=1, max_size=6)


@st.composite
def json_number(draw: st.DrawFn) -> str:
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(
        st.one_of(
            st.just("0"),
            st.builds(lambda a, b: a + b, st.sampled_from("123456789"), st.text(alphabet="0123456789", max_size=5)),
            st.just("123456789012345678901234567890"),
            st.just("12345678901234567890"),
        )
    )
    frac = draw(st.one_of(st.just(""), digits.map(lambda d: "." + d)))
    exp = draw(
        st.one_of(
            st.just(""),
            st.builds(lambda e, s, d: e + s + d, st.sampled_from("eE"), st.sampled_from(["", "+", "-"]), digits),
        )
    )
    return sign + whole + frac + exp


@st.composite
def scalar(draw: st.DrawFn) -> Doc:
    kind = draw(st.sampled_from(["string", "number", "true", "false", "null"]))
    if kind == "string":
        written, kept, _ = draw(json_string())
        return Doc(written, kept, 0)
    if kind == "number":
        n = draw(json_number())
        return Doc(n, n, 0)
    return Doc(kind, kind, 0)


# -- containers -----------------------------------------------------------------------------


def _array(items: list[Doc], spaces: list[str]) -> Doc:
    if not items:
        return Doc("[" + spaces[0] + "]", "[]", 1)
    text = (
        "["
        + "".join(
            spaces[2 * i] + d.text + spaces[2 * i + 1] + ("," if i < len(items) - 1 else "")
            for i, d in enumerate(items)
        )
        + "]"
    )
    return Doc(text, "[" + ",".join(d.compact for d in items) + "]", 1 + max(d.depth for d in items))


@st.composite
def array_of(draw: st.DrawFn, children: st.SearchStrategy[Doc]) -> Doc:
    items = draw(st.lists(children, max_size=4))
    spaces = draw(st.lists(ws, min_size=2 * len(items) + 1, max_size=2 * len(items) + 1))
    return _array(items, spaces)


@st.composite
def object_of(draw: st.DrawFn, children: st.SearchStrategy[Doc]) -> Doc:
    names = draw(st.lists(st.lists(chars, max_size=5).map("".join), max_size=4, unique=True))
    if not names:
        return Doc("{" + draw(ws) + "}", "{}", 1)
    written, kept, depth = [], [], 1
    for name in names:
        n_text, n_kept, _ = draw(json_string(name))  # distinct decoded names, any spelling
        value = draw(children)
        a, b, c, d = draw(ws), draw(ws), draw(ws), draw(ws)
        written.append(a + n_text + b + ":" + c + value.text + d)
        kept.append(n_kept + ":" + value.compact)
        depth = max(depth, 1 + value.depth)
    return Doc("{" + ",".join(written) + "}", "{" + ",".join(kept) + "}", depth)


documents = st.recursive(scalar(), lambda kids: st.one_of(array_of(kids), object_of(kids)), max_leaves=25)


@st.composite
def deep_chain(draw: st.DrawFn) -> Doc:
    """A value nested up to 59 deep, each level an array or a one-member object."""
    depth = draw(st.integers(min_value=1, max_value=59))
    leaf = draw(scalar())
    doc = leaf
    for _ in range(depth):
        if draw(st.booleans()):
            doc = Doc("[" + draw(ws) + doc.text + "]", "[" + doc.compact + "]", doc.depth + 1)
        else:
            doc = Doc('{"k"' + draw(ws) + ":" + doc.text + "}", '{"k":' + doc.compact + "}", doc.depth + 1)
    return doc


values = st.one_of(documents, deep_chain())


def record_text(spec: Doc, checkpoint: Doc, extension: Doc, space: str) -> str:
    """A record carrying the three as spec (wrapped in an object), checkpoint (wrapped) and extension value."""
    parts = [
        f'"content":["abstraction.job/base@1","{EXT}"]',
        '"critical":["abstraction.job/base@1"]',
        '"id":"1788673445494-d76944a8b5a24268cd6d"',
        '"kind":"download"',
        '"state":"pending"',
        '"spec":{"v":' + spec.text + "}",
        '"checkpoint":{"w":' + checkpoint.text + "}",
        f'"progress":{{"done":0,"updated_at":"{T0}"}}',
        '"lease":{"owner":"","epoch":0,"expires_at":"0001-01-01T00:00:00.000000Z"}',
        f'"extensions":{{"{EXT}":' + extension.text + "}",
        f'"created_at":"{T0}"',
        f'"updated_at":"{T0}"',
    ]
    return "{" + space + ("," + space).join(parts) + space + "}" + space


# -- the generator is right about what it generates ----------------------------------------------


@SETTINGS
@given(doc=values)
def test_generated_texts_are_json_and_the_oracle_agrees_on_value(doc: Doc) -> None:
    import json

    assert json.loads(doc.text) == json.loads(doc.compact)
    assert wire.parse_value(doc.text) == wire.parse_value(doc.compact)


# -- the properties -------------------------------------------------------------------------------


@SETTINGS
@given(doc=values)
def test_raw_keeps_the_compact_spelling(doc: Doc) -> None:
    raw = wire.Raw(doc.text)
    assert raw.text == doc.compact
    assert wire.Raw(raw.text).text == doc.compact  # already compact: a fixed point


@SETTINGS
@given(spec=values, checkpoint=values, extension=values, space=ws)
def test_record_round_trip_keeps_opaque_bytes(spec: Doc, checkpoint: Doc, extension: Doc, space: str) -> None:
    text = record_text(spec, checkpoint, extension, space)
    rec = record.decode(text.encode("utf-8"))
    assert rec.opaque_text("spec") == '{"v":' + spec.compact + "}"
    assert rec.opaque_text("checkpoint") == '{"w":' + checkpoint.compact + "}"
    assert rec.opaque_text("x:" + EXT) == extension.compact

    first = record.encode(rec)
    again = record.decode(first)
    assert again.opaque_text("spec") == '{"v":' + spec.compact + "}"
    assert again.opaque_text("checkpoint") == '{"w":' + checkpoint.compact + "}"
    assert again.opaque_text("x:" + EXT) == extension.compact
    second = record.encode(again)
    assert second == first  # a fixed point
    assert record.encode(again, rederive=False) == first
    assert record.encode(record.decode(second)) == second
    # the file form never carries a raw line separator
    assert "\u2028" not in first.decode("utf-8") and "\u2029" not in first.decode("utf-8")


@SETTINGS
@given(spec=values)
def test_programmatic_raw_spec_round_trips(spec: Doc) -> None:
    rec = record.Record(id="job", kind="k", spec=wire.Raw('{"v":' + spec.text + "}"))
    data = record.encode(rec)
    assert record.decode(data).opaque_text("spec") == '{"v":' + spec.compact + "}"
    assert record.encode(record.decode(data)) == data
