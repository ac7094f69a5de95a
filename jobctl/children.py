"""A child process seen from its parent: its process group signalled, its exit seen without reaping it, a pipe fed.

Small system-call wrappers the runner's supervision loop uses; kept apart so
the runner holds what a run does, not how each call is made.
"""

from __future__ import annotations

import os
import signal

__all__ = ["write_all", "feed", "killpg", "exited", "sigkilled", "pidfd", "describe_status"]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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


def exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it.

    Not reaping keeps the zombie's pid, which is also the process group's id,
    from being reused while the group is still being signalled.
    """
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == pid


def sigkilled(pid: int) -> bool:
    """Whether the exited child was ended by SIGKILL, without reaping it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return info is not None and info.si_code == os.CLD_KILLED and info.si_status == signal.SIGKILL


def pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def describe_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit status {code}"
