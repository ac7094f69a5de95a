"""The one decision of how to draw (:class:`Screen`), and the writes of data lines on stdout."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from ...wire import dumps_compact
from ..output import echo_out

if TYPE_CHECKING:  # pragma: no cover - typing only; rich is imported where it draws
    from rich.console import Console


#: The version of every JSON shape jobctl prints; it rises only when a key
#: changes meaning or disappears. New keys may appear without a new version.
JSON_VERSION = 1


class Screen:
    """Where data goes and how much it can show.

    ``terminal`` chooses rich views over plain lines; it defaults to whether
    stdout is a TTY, and tests inject it. ``NO_COLOR`` (any non-empty value)
    turns colour off; ``TERM=dumb`` turns off colour and live redrawing;
    ``FORCE_COLOR`` turns colour back on for a dumb terminal. None of them
    ever turns a pipe into a terminal: piped output is the plain lines.
    """

    def __init__(self, terminal: bool, env: Mapping[str, str]) -> None:
        self.terminal = terminal
        self.env = env
        self.dumb = env.get("TERM", "").strip().lower() in ("dumb", "unknown")
        no_colour = env.get("NO_COLOR", "") != ""
        force = env.get("FORCE_COLOR", "") not in ("", "0")
        self.colour = terminal and not no_colour and (force or not self.dumb)
        #: redraw in place (a live table, a progress bar) rather than print anew
        self.live = terminal and not self.dumb

    def console(self) -> Console:
        """A rich console on stdout that does what this screen decided, not what it guesses."""
        from rich.console import Console

        environ = {k: self.env[k] for k in ("COLUMNS", "LINES", "COLORTERM") if self.env.get(k)}
        if not self.dumb and self.env.get("TERM"):
            environ["TERM"] = self.env["TERM"]
        system: Literal["auto", "standard"] | None = None
        if self.colour:
            system = "standard" if self.dumb else "auto"  # rich finds no colours in a dumb TERM itself
        return Console(
            file=sys.stdout,
            force_terminal=True,
            force_interactive=self.live,
            color_system=system,
            no_color=not self.colour,
            highlight=False,
            emoji=False,
            soft_wrap=False,
            _environ=environ,
        )


# -- output primitives --------------------------------------------------------


def out(line: str) -> None:
    """One line of data on stdout, UTF-8 with a bare LF whatever the platform or locale."""
    echo_out(line.encode("utf-8", "surrogateescape") + b"\n", nl=False)


def json_line(obj: Mapping[str, Any]) -> str:
    """One JSON object as one line, ``"v"`` first. Opaque values (:class:`Raw`) keep their spelling."""
    return dumps_compact({"v": JSON_VERSION, **obj})


def out_json(obj: Mapping[str, Any]) -> None:
    """One JSON object on one line (:func:`json_line`)."""
    out(json_line(obj))


class Lines:
    """Lines of data as :func:`out` writes them, for a long listing: the first at once, the rest in blocks.

    A reader sees the first line as soon as it exists; 100,000 more cost a
    write per 64 KiB instead of one per line. :meth:`flush` before anything
    else is written (stderr, an exit).
    """

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._size = 0
        self._first = True

    def out(self, line: str) -> None:
        data = line.encode("utf-8", "surrogateescape") + b"\n"
        self._pending.append(data)
        self._size += len(data)
        if self._first or self._size >= 1 << 16:
            self._first = False
            self.flush()

    def out_all(self, lines: list[str]) -> None:
        """:meth:`out` of each of ``lines``, written together (the first at once, if it is the first of all)."""
        if lines and self._first:
            self.out(lines[0])
            lines = lines[1:]
        if lines:
            self.flush()
            echo_out(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"), nl=False)

    def out_json(self, obj: Mapping[str, Any]) -> None:
        self.out(json_line(obj))

    def flush(self) -> None:
        if self._pending:
            echo_out(b"".join(self._pending), nl=False)  # as out() writes, flushed
            self._pending.clear()
            self._size = 0
