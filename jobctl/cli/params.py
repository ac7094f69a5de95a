"""The option types: what a value on the command line may be (text, JSON, seconds, a count), and the refusal when not.

One type means one thing on every command; :mod:`jobctl.cli.main` re-exports them for the commands.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import click

from .. import limits
from ..errors import Invalid
from ..limits import Range
from ..record import STATES
from ..wire import JsonText, utf8_text

__all__ = [
    "TEXT",
    "PATH_TEXT",
    "JSON_TEXT",
    "not_utf8",
    "json_text",
    "json_given",
    "stdin_bytes",
    "SECONDS",
    "COUNT",
    "seconds",
    "count",
    "signed",
    "STATE_CHOICE",
    "STATES_HELP",
    "raw_json",
]


if TYPE_CHECKING:  # click 8.5 types ParamType by what it returns; older clicks are not generic
    _StrType = click.ParamType[str]
    _FloatType = click.ParamType[float]
    _IntType = click.ParamType[int]
else:
    _StrType = _FloatType = _IntType = click.ParamType


def not_utf8(text: str) -> int | None:
    """The offset of the first byte that is not UTF-8 in ``text``, else None.

    Python hands over argv (and anything read with ``surrogateescape``) with
    such bytes as lone surrogates; kept, they would be written as U+FFFD.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return len(text[: exc.start].encode("utf-8", "surrogateescape"))
    return None


class _Text(_StrType):
    """A string that must not be empty: ``--by "$WHO"`` with WHO unset is a usage error, as upstream.

    Nor hold bytes that are not UTF-8 (a usage error too, a value of the wrong
    form), unless ``paths``: a path is the one text that may be any bytes.
    """

    name = "text"

    def __init__(self, paths: bool = False) -> None:
        self.paths = paths

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if text == "":
            self.fail("wants a value, not an empty string", param, ctx)
        if not self.paths:
            byte = not_utf8(text)
            if byte is not None:
                self.fail(f"is not UTF-8 (byte {byte}); give it as UTF-8 text", param, ctx)
        return text


def stdin_bytes(what: str, instead: str) -> Any:
    """stdin's byte stream, or ``Invalid`` naming ``what`` when the process was started with it closed (``<&-``)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        exc = Invalid(f"{what}: stdin is closed, there is nothing to read")
        exc.hint = f"{instead}, or run it with stdin open"
        raise exc
    return stream


def json_given(text: str, what: str) -> JsonText:
    """JSON text given inline, as ``@FILE`` or as ``-`` (stdin), read but not judged; ``invalid`` if unreadable.

    The store judges it as a step's content, after the record's own verdicts.
    """
    if text == "-":
        return JsonText(stdin_bytes(f"{what} -", "give the JSON inline or as @FILE").read(), f"{what} (stdin)")
    if text.startswith("@"):
        try:
            with open(text[1:], "rb") as fh:
                return JsonText(fh.read(), f"{what} ({text[1:]})")
        except OSError as exc:
            # One line, as for JSON that does not parse, not a screen of usage.
            raise Invalid(f"{what}: cannot read {text[1:]}: {exc.strerror or exc}") from None
    return JsonText(text, what)


def json_text(text: str, what: str) -> str:
    """:func:`json_given`, judged UTF-8 now: text that is not is ``invalid``, as a record's bytes are."""
    given = json_given(text, what)
    return utf8_text(given.data, given.what)


class _JsonText(_Text):
    """JSON given inline, as ``@FILE``, or as ``-`` for stdin (:func:`json_text`); never re-spelled."""

    name = "json"

    def __init__(self) -> None:
        super().__init__(paths=True)  # "@FILE" names a path; the JSON itself is checked by json_text

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        return json_text(text, param.opts[0] if isinstance(param, click.Option) else "JSON")


class _Seconds(_FloatType):
    """A finite number of seconds (fractions allowed) within a :class:`jobctl.limits.Range`."""

    name = "seconds"

    def __init__(self, bounds: Range = limits.TIMEOUT) -> None:
        self.bounds = bounds

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float) and self.bounds.holds(value):
            return value
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not self.bounds.holds(seconds):
            self.fail(f"{value!r} is out of range ({self.bounds.text()})", param, ctx)
        return seconds


class _Count(_IntType):
    """A whole number within a :class:`jobctl.limits.Range` (an epoch, work done, a total)."""

    name = "count"

    def __init__(self, bounds: Range = limits.EPOCH) -> None:
        self.bounds = bounds

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and self.bounds.holds(value):
            return value
        text = str(value).strip()
        if not text.isdigit() or not text.isascii():
            self.fail(f"{value!r} is not a whole number ({self.bounds.text()})", param, ctx)
        number = int(text)
        if not self.bounds.holds(number):
            self.fail(f"{value!r} is out of range ({self.bounds.text()})", param, ctx)
        return number


class _Signed(_Count):
    """A whole number that may be negative (``-5``, ``+5``, ``5``), within a :class:`jobctl.limits.Range`."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and self.bounds.holds(value):
            return value
        text = str(value).strip()
        digits = text[1:] if text[:1] in ("-", "+") else text
        if not digits.isdigit() or not digits.isascii():
            self.fail(f"{value!r} is not a whole number ({self.bounds.text()})", param, ctx)
        number = int(text)
        if not self.bounds.holds(number):
            self.fail(f"{value!r} is out of range ({self.bounds.text()})", param, ctx)
        return number


def seconds(bounds: Range) -> _Seconds:
    """The option type for a duration in ``bounds``."""
    return _Seconds(bounds)


def count(bounds: Range) -> _Count:
    """The option type for a whole number in ``bounds``."""
    return _Count(bounds)


def signed(bounds: Range) -> _Signed:
    """The option type for a whole number in ``bounds`` that may be negative."""
    return _Signed(bounds)


#: The six states, for --state options; the list goes in the help text, not the metavar.
STATE_CHOICE = click.Choice(STATES)
STATES_HELP = ", ".join(STATES[:-1]) + " or " + STATES[-1]

TEXT = _Text()
#: A path (``--store``, ``init DIR``): any bytes the file system takes.
PATH_TEXT = _Text(paths=True)
JSON_TEXT = _JsonText()
SECONDS = _Seconds()
COUNT = _Count()


def raw_json(text: str, what: str) -> Any:
    """Validate JSON text and keep it token for token (an ``invalid`` refusal names ``what``)."""
    from ..wire import Raw

    try:
        return Raw(text)
    except Invalid as exc:
        raise Invalid(f"{what} is not JSON: {exc.message}") from None


class _KindLimit(_StrType):
    """``KIND=N`` (``worker --limit``): a kind and how many of its jobs at once, N a whole number of at least 1."""

    name = "kind_limit"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        text = _Text().convert(value, param, ctx)
        kind, eq, most = text.rpartition("=")
        if not eq or not kind:
            self.fail(f"{text!r} is not KIND=N (a kind, '=', how many of its jobs at once)", param, ctx)
        try:
            n = int(most, 10)
        except ValueError:
            self.fail(f"{text!r}: {most!r} is not a whole number", param, ctx)
        if n < 1:
            self.fail(f"{text!r}: N must be at least 1", param, ctx)
        return (kind, n)


KIND_LIMIT = _KindLimit()

#: ``--env NAME=VALUE`` of a command's job (``submit -- CMD``, ``schedule add NAME ... -- CMD``).
env_option = click.option(
    "--env",
    "env_pairs",
    multiple=True,
    type=TEXT,
    metavar="NAME=VALUE",
    help="With -- CMD: set NAME in the command's environment (repeatable).",
)
