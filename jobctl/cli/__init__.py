"""The ``jobctl`` command line: click commands over the library, nothing else.

``main`` is the console script. The group lives in :mod:`jobctl.cli.main`;
each command family in its own module, loaded only when one of its commands
runs; :mod:`jobctl.cli.render` draws (and is the only module that imports
rich, and only for a terminal).
"""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """Run ``jobctl`` with ``sys.argv``; never returns (exits with the command's code)."""
    from .main import cli

    cli.main(prog_name="jobctl")
