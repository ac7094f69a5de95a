"""The byte level of a record: string escaping, a validating scanner, opaque values.

Opaque values (``spec``, ``checkpoint``, every ``extensions`` value) are never
interpreted: they are validated against RFC 8259 and kept as their *compact*
text -- the original tokens with insignificant whitespace removed -- so that a
rewrite reproduces every number and escape exactly as the first writer spelled
it [JOB-E7] [JOB-E8]. Only the indentation is redone on write.

The scanner leans on the standard library's C scanner (``_json.make_scanner``,
what ``JSONDecoder.scan_once`` is) for grammar, and walks only the record's own top level and ``extensions`` by
hand, which is what gives the raw span of each opaque value. The checks the C
scanner does not make are added here: duplicate member names at every depth
[JOB-E9], escaped lone surrogates, ``NaN``/``Infinity``, the depth limit.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from .errors import Invalid

__all__ = [
    "lazy_pattern",
    "MAX_DEPTH",
    "Raw",
    "JsonText",
    "escape",
    "compact",
    "indent",
    "dumps_compact",
    "parse_value",
    "parse_object_members",
    "check_text",
]


class _LazyPattern:
    """A regular expression compiled on first use, then put in its module's place.

    Start-up is jobctl's latency (cron, shell loops); compiling patterns a
    command never uses is a measurable share of it.
    """

    __slots__ = ("_where", "_name", "_args")

    def __init__(self, where: dict[str, Any], name: str, args: tuple[Any, ...]) -> None:
        self._where, self._name, self._args = where, name, args

    def __getattr__(self, attr: str) -> Any:
        compiled = re.compile(*self._args)
        self._where[self._name] = compiled  # later look-ups find the pattern itself
        return getattr(compiled, attr)


def lazy_pattern(where: dict[str, Any], name: str, pattern: str | bytes, flags: int = 0) -> Any:
    """``where[name]``, a pattern compiled when first used (pass ``globals()``)."""
    return _LazyPattern(where, name, (pattern, flags))


#: Nesting limit, counting the record object itself [Bounds; go/limits_test.go].
MAX_DEPTH = 64

# -- string escaping (record-owned strings and programmatic opaque strings) ----

_PLAIN: re.Pattern[str] = lazy_pattern(globals(), "_PLAIN", r'[^\x00-\x1f"\\\u2028\u2029\ud800-\udfff]*\Z')
_SPECIAL = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _escape_char(ch: str) -> str:
    got = _SPECIAL.get(ch)
    if got is not None:
        return got
    code = ord(ch)
    if code < 0x20:
        return f"\\u{code:04x}"
    # A lone surrogate in a str (from surrogateescape, say) is not text:
    # replaced one-for-one by the escape of U+FFFD [JOB-E6].
    return "\\ufffd"


def escape(text: str) -> str:
    """The JSON string form of ``text`` under the record's escape policy [JOB-E6].

    RFC 8785's string form with two declared differences: U+2028 and U+2029 are
    escaped, and a lone surrogate becomes ``\\ufffd``. Non-ASCII is raw UTF-8.
    """
    # Printable ASCII with no quote or backslash is plain: said without _PLAIN, whose compiling
    # (its surrogate range) is a third of a millisecond of a command's start-up.
    if (text.isascii() and text.isprintable() and '"' not in text and "\\" not in text) or _PLAIN.match(text):
        return '"' + text + '"'
    return (
        '"'
        + "".join(_escape_char(c) if c in _SPECIAL or c < " " or "\ud800" <= c <= "\udfff" else c for c in text)
        + '"'
    )


# -- the validating scanner ---------------------------------------------------


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    got = dict(pairs)
    if len(got) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise Invalid(f"duplicate member name {name!r}")
            seen.add(name)
    return got


def _constant(name: str) -> Any:
    raise Invalid(f"{name} is not JSON")


def _big_int(text: str) -> Any:
    try:
        return int(text)
    except ValueError:  # past sys.int_max_str_digits: keep it exact anyway
        from decimal import Decimal  # only ever needed here: off the start-up path

        return Decimal(text)


class _Hooks:
    """What the C scanner reads off a ``json.JSONDecoder``, given without importing ``json``.

    ``json`` (its decoder, encoder and pure-Python scanner) costs about 1.2 ms
    of every start-up; a piped ``submit`` parses one spec and needs none of it.
    """

    def __init__(self, parse_int: Callable[[str], Any]) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = _pairs
        self.parse_float = float
        self.parse_int = parse_int
        self.parse_constant = _constant
        self.memo: dict[str, str] = {}


def _scanner(parse_int: Callable[[str], Any]) -> Callable[[str, int], tuple[Any, int]]:
    """The C scanner's ``scan_once`` with the record's hooks; json's own where ``_json`` is missing."""
    try:
        import _json
    except ImportError:  # an interpreter without json's C accelerator
        import json

        decoder = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant, parse_int=parse_int)
        return decoder.scan_once  # type: ignore[attr-defined,no-any-return]  # set by __init__, untyped
    return _json.make_scanner(_Hooks(parse_int))  # type: ignore[arg-type]  # it reads a JSONDecoder's attributes


def _string_scanner() -> Callable[[str, int, bool], tuple[str, int]]:
    """json's string scanner (a member name with an escape), C or, where ``_json`` is missing, Python."""
    try:
        import _json
    except ImportError:
        import json.decoder

        return json.decoder.scanstring  # type: ignore[attr-defined,no-any-return]  # public in practice, untyped
    return _json.scanstring


_scan = _scanner(int)
_scan_big = _scanner(_big_int)
_scanstring = _string_scanner()


def _reported(scan: Callable[..., Any], *args: Any) -> Any:
    """``scan(*args)``, its errors as ``json.JSONDecodeError`` on every Python.

    The C scanner raises a syntax error as the ``JSONDecodeError`` of
    ``json.decoder``; Python 3.10's and 3.11's look for that module only among
    those already imported and raise ``SystemError`` when it is not. ``json.decoder`` is
    imported on that first error and the scan, which changes nothing, made
    again: an error is then reported as json reports it.
    """
    try:
        return scan(*args)
    except SystemError:
        if "json.decoder" in sys.modules:
            raise
        import json.decoder  # noqa: F401  # the module the scanner reports through

        return scan(*args)


def _decode_error(exc: BaseException) -> bool:
    """Whether ``exc`` is json's syntax error (whose module is then loaded: no import here)."""
    decoder = sys.modules.get("json.decoder")
    return decoder is not None and isinstance(exc, decoder.JSONDecodeError)


_WS: re.Pattern[str] = lazy_pattern(globals(), "_WS", r"[ \t\n\r]*")
# Unrolled ("normal* (special normal*)*"): linear, and far faster than an
# alternation per character on long strings.
_STRING: re.Pattern[str] = lazy_pattern(globals(), "_STRING", r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_KEY: re.Pattern[str] = lazy_pattern(globals(), "_KEY", r'[ \t\n\r]*"([^"\\\x00-\x1f]*)"[ \t\n\r]*:[ \t\n\r]*')
_AFTER: re.Pattern[str] = lazy_pattern(globals(), "_AFTER", r"[ \t\n\r]*([,}])[ \t\n\r]*")
_BRACKETS: re.Pattern[str] = lazy_pattern(globals(), "_BRACKETS", r"[\[\]{}]")
_ESCAPED_SURROGATE: re.Pattern[str] = lazy_pattern(globals(), "_ESCAPED_SURROGATE", r"\\u[dD][89a-fA-F]")
_SURROGATE: re.Pattern[str] = lazy_pattern(globals(), "_SURROGATE", "[\ud800-\udfff]")


def _where(text: str, idx: int) -> str:
    line = text.count("\n", 0, idx) + 1
    col = idx - (text.rfind("\n", 0, idx) + 1) + 1
    return f"line {line} column {col}"


def scan_value(text: str, idx: int) -> tuple[Any, int]:
    """Scan one JSON value at ``text[idx]``; return (decoded value, end index)."""
    try:
        try:
            return _reported(_scan, text, idx)  # type: ignore[no-any-return]
        except ValueError as exc:
            if _decode_error(exc) or "digits" not in str(exc):
                raise
            return _reported(_scan_big, text, idx)  # type: ignore[no-any-return]
    except StopIteration as stop:
        # The scanner reports where the missing value should have been,
        # which may be deep inside the value that starts at idx.
        where = stop.value if isinstance(stop.value, int) else idx
        raise Invalid(f"expected a JSON value at {_where(text, where)}") from None
    except RecursionError:
        raise Invalid(f"nesting deeper than {MAX_DEPTH}") from None
    except ValueError as exc:
        if not _decode_error(exc):
            raise
        raise Invalid(f"bad JSON at {_where(text, exc.pos)}: {exc.msg}") from None  # type: ignore[attr-defined]


def utf8_text(data: bytes, what: str) -> str:
    """Bytes as text: UTF-8 without a byte order mark, or ``Invalid``."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise Invalid(f"{what} starts with a byte order mark")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"{what} is not UTF-8 (byte {exc.start})") from None


def check_text(text: str, base_depth: int = 0) -> None:
    """The checks the C scanner does not make: depth and escaped lone surrogates.

    ``base_depth`` is how many containers already enclose the text.
    """
    opens = text.count("{") + text.count("[")
    if opens + base_depth > MAX_DEPTH:
        depth = deepest = base_depth
        for ch in _BRACKETS.findall(_STRING.sub('""', text)):
            if ch in "{[":
                depth += 1
                if depth > deepest:
                    deepest = depth
            else:
                depth -= 1
        if deepest > MAX_DEPTH:
            raise Invalid(f"nesting deeper than {MAX_DEPTH}")


def check_surrogates(text: str, value: Any) -> None:
    """Refuse an escaped lone surrogate anywhere in ``value`` (decoded from ``text``).

    A well-formed pair decodes to one astral character, so any surrogate left in
    a decoded string was a lone one. The regex keeps this off the common path.
    """
    if "\\" not in text or _ESCAPED_SURROGATE.search(text) is None:  # no escape, no compiled pattern
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise Invalid("escaped lone surrogate")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_object_members(text: str, idx: int, what: str) -> tuple[list[tuple[str, Any, int, int]], int]:
    """Walk the object at ``text[idx]`` one member at a time.

    Returns ``[(name, decoded value, value start, value end)]`` in arrival
    order and the index after the closing brace. Duplicate names are refused.
    """
    if idx >= len(text) or text[idx] != "{":
        raise Invalid(f"{what} is not a JSON object")
    members: list[tuple[str, Any, int, int]] = []
    seen: set[str] = set()
    idx += 1
    closing = _WS.match(text, idx).end()  # type: ignore[union-attr]  # matches empty
    if closing < len(text) and text[closing] == "}":
        return members, closing + 1
    while True:
        m = _KEY.match(text, idx)
        if m is not None:  # the common case: a name with no escapes
            name, start = m.group(1), m.end()
        else:
            idx = _WS.match(text, idx).end()  # type: ignore[union-attr]
            if idx >= len(text) or text[idx] != '"':
                raise Invalid(f"{what}: expected a member name at {_where(text, idx)}")
            try:
                name, idx = _reported(_scanstring, text, idx + 1, True)
            except ValueError as exc:
                if not _decode_error(exc):
                    raise
                where = _where(text, exc.pos)  # type: ignore[attr-defined]
                raise Invalid(f"{what}: bad member name at {where}: {exc.msg}") from None  # type: ignore[attr-defined]
            idx = _WS.match(text, idx).end()  # type: ignore[union-attr]
            if idx >= len(text) or text[idx] != ":":
                raise Invalid(f"{what}: expected ':' at {_where(text, idx)}")
            start = _WS.match(text, idx + 1).end()  # type: ignore[union-attr]
        if name in seen:
            raise Invalid(f"{what}: duplicate member name {name!r}")
        seen.add(name)
        value, end = scan_value(text, start)
        members.append((name, value, start, end))
        m = _AFTER.match(text, end)
        if m is None:
            raise Invalid(f"{what}: expected ',' or '}}' at {_where(text, end)}")
        if m.group(1) == "}":
            return members, m.start(1) + 1
        idx = m.end()


def parse_value(text: str, base_depth: int = 0) -> Any:
    """Validate a whole JSON text and return its decoded value."""
    check_text(text, base_depth)
    start = len(text) - len(text.lstrip(" \t\n\r"))  # what _WS matches, without compiling it
    value, end = scan_value(text, start)
    if text[end:].strip(" \t\n\r"):
        raise Invalid(f"extra data after the JSON value at {_where(text, end)}")
    check_surrogates(text, value)
    return value


# -- layout -----------------------------------------------------------------

_TOKEN: re.Pattern[str] = lazy_pattern(
    globals(), "_TOKEN", r'[ \t\n\r]*("[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],:]|[^"{}\[\],: \t\n\r]+)', re.S
)


def compact(text: str) -> str:
    """``text`` with insignificant whitespace removed and every token kept as spelled.

    A raw U+2028/U+2029 inside a string becomes its escape: the one spelling
    change the contract allows, since both are line terminators to JavaScript.
    """
    parts = _STRING.split(text)
    strings = _STRING.findall(text)
    out = []
    for i, part in enumerate(parts):
        out.append("".join(part.split()))
        if i < len(strings):
            out.append(strings[i])
    joined = "".join(out)
    if "\u2028" in joined or "\u2029" in joined:
        joined = joined.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return joined


@lru_cache(maxsize=512)  # a holder rewrites the same spec on every write
def indent(text: str, level: int) -> str:
    """Lay out a valid JSON value with the record's two-space indentation.

    Whatever whitespace ``text`` has is dropped first. ``level`` is the
    nesting level of the line the value starts on; the first line is not
    indented (it follows ``"key": ``). Empty containers stay ``{}`` and ``[]``
    on one line, every other member or element on its own line. A raw
    U+2028/U+2029 inside a string becomes its escape.
    """
    if "\u2028" in text or "\u2029" in text:
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    tokens = _TOKEN.findall(text)
    if len(tokens) == 1:
        return tokens[0]  # type: ignore[no-any-return]
    out: list[str] = []
    depth = level
    i = 0
    n = len(tokens)
    while i < n:
        tok = tokens[i]
        if tok == "{" or tok == "[":
            if i + 1 < n and tokens[i + 1] in "}]" and len(tokens[i + 1]) == 1:
                out.append(tok + tokens[i + 1])
                i += 2
                continue
            depth += 1
            out.append(tok + "\n" + "  " * depth)
        elif tok == "}" or tok == "]":
            depth -= 1
            out.append("\n" + "  " * depth + tok)
        elif tok == ",":
            out.append(",\n" + "  " * depth)
        elif tok == ":":
            out.append(": ")
        else:
            out.append(tok)
        i += 1
    return "".join(out)


def dumps_compact(value: Any, _depth: int = 0) -> str:
    """Serialise a value supplied by our own code (not parsed from text), compactly.

    Strings take the record's escape policy; floats must be finite; a
    :class:`Raw` keeps its own spelling.
    """
    if _depth > MAX_DEPTH:
        raise Invalid(f"nesting deeper than {MAX_DEPTH}")
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, str):
        return escape(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise Invalid(f"{value!r} is not a JSON number")
        return float.__repr__(value)
    if type(value).__name__ == "Decimal" and type(value).__module__ == "decimal":  # without importing decimal
        if not value.is_finite():
            raise Invalid(f"{value!r} is not a JSON number")
        return str(value)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise Invalid(f"object member name {key!r} is not a string")
            items.append(escape(key) + ":" + dumps_compact(item, _depth + 1))
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps_compact(item, _depth + 1) for item in value) + "]"
    raise Invalid(f"a {type(value).__name__} cannot be written as JSON")


class Raw:
    """A JSON value given as text, kept token for token.

    ``Raw('{"n": 1.50}')`` validates the text and writes it back with ``1.50``
    intact; ``.value`` is the decoded form. Equal to another Raw with the same
    compact text, or to a plain value that decodes equal.
    """

    __slots__ = ("_value", "text")

    def __init__(self, text: str | bytes) -> None:
        if isinstance(text, bytes):
            text = utf8_text(text, "JSON text")
        if not text.isascii() and _SURROGATE.search(text):  # ASCII holds no surrogate: no pattern compiled
            # A str can hold a lone surrogate (surrogateescape, say); it is not
            # text. Inside a string it becomes the escape of U+FFFD [JOB-E6];
            # anywhere else the scanner refuses it.
            text = _SURROGATE.sub(lambda _m: "\\ufffd", text)
        self._value = parse_value(text)
        self.text = compact(text)

    @property
    def value(self) -> Any:
        return self._value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Raw):
            return self.text == other.text
        return bool(self._value == other)

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Raw({self.text!r})"


class JsonText:
    """JSON text a store step is handed unjudged: judged by the step, in the contract's order.

    A :class:`Raw` is judged when it is made, before any record is read; a
    checkpoint given as ``JsonText`` is judged by ``progress`` or ``finish``
    as the content of the mutation, after the record's own verdicts
    (terminal, stale epoch, lapsed lease: DIGEST §5), so a malformed
    checkpoint for a job that has ended is ``Terminal``, not ``Invalid``.
    What the command line hands the store. ``what`` names the value in a
    refusal (``--checkpoint``, ``CHECKPOINT (file.json)``).
    """

    __slots__ = ("data", "what")

    def __init__(self, data: str | bytes, what: str = "checkpoint") -> None:
        # A str may hold lone surrogates (argv, surrogateescape): kept as bytes no UTF-8 reader takes.
        self.data = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        self.what = what

    def raw(self, job_id: str = "") -> Raw:
        """The value as a :class:`Raw`; ``Invalid`` (naming ``what`` and ``job_id``) for text that is not JSON."""
        named = f"job {job_id}: {self.what}" if job_id else self.what
        try:
            text = utf8_text(self.data, named)
        except Invalid as exc:
            raise Invalid(exc.message, job_id) from None
        try:
            return Raw(text)
        except Invalid as exc:
            raise Invalid(f"{named} is not JSON: {exc.message}", job_id) from None

    def __repr__(self) -> str:
        return f"JsonText({self.data!r}, {self.what!r})"


def strict_equal(a: Any, b: Any) -> bool:
    """JSON equality that tells ``true`` from ``1`` and ``1`` from ``1.0``.

    Python's ``==`` says ``True == 1 == 1.0``; a record must not keep the old
    bytes of a value a caller changed from one to the other.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a == 0.0:
        return str(a) == str(b)  # -0.0 and 0.0 are different spellings a caller may mean
    return bool(a == b)
