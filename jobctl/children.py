"""A child process's group signalled, a pipe fed, an exit status told.

Small system-call wrappers the runner's supervision loop uses; kept apart so
the runner holds what a run does, not how each call is made. A child's exit
is seen by its parent, the guardian process (:mod:`jobctl.guardian`).
"""

from __future__ import annotations

import os
import signal

__all__ = ["feed", "killpg", "describe_status"]


def feed(fd: int, left: memoryview) -> memoryview:
    """Write what the pipe takes now; what is left (empty when done, or when the child closed its stdin)."""
    while left:
        try:
            left = left[os.write(fd, left) :]
        except BlockingIOError:
            return left
        except OSError:
            return left[:0]
    return left


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        # A member changed its credentials (setuid); the rest still get it.
        pass


def describe_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit status {code}"
