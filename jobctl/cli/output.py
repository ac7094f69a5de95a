"""The CLI's one write to stdout: below every command and every view, importing none of them."""

from __future__ import annotations

import sys
from typing import Any

import click

__all__ = ["echo_out"]


def echo_out(message: str | bytes, ctx: click.Context | None = None, **kwargs: Any) -> None:
    """``click.echo`` to stdout, but a closed stdout raises ``BrokenPipeError`` (exit 141).

    click writes nothing, and says nothing, when the process was started with
    stdout closed (``>&-``, ``sys.stdout`` is None): a submitted id would be
    lost with exit 0.
    """
    if sys.stdout is None:
        raise BrokenPipeError(32, "stdout is closed")
    click.echo(message, **kwargs)
