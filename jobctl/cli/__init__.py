"""The ``jobctl`` command line: click commands over the library, nothing else.

``main`` is the console script. The group lives in :mod:`jobctl.cli.main`;
each command family in its own module, loaded only when one of its commands
runs; :mod:`jobctl.cli.render` draws (and is the only module that imports
rich, and only for a terminal).
"""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """Run ``jobctl`` with ``sys.argv``; never returns (exits with the command's code).

    The imports run with the cyclic garbage collector off: they allocate tens
    of thousands of objects (click's and jobctl's classes, functions and
    constants), none of them garbage, and each of the collector's passes the
    allocations alone set off would walk them all -- about a tenth of a piped
    command's start-up. They are then frozen (never walked again: they live
    as long as the process) and the collector is on again for the command.
    """
    import gc

    if gc.isenabled():
        gc.disable()
        try:
            from .main import cli
        finally:
            gc.freeze()
            gc.enable()
    else:
        from .main import cli

    cli.main(prog_name="jobctl")
