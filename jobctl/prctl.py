"""The Linux process control jobctl sets on itself (``prctl(2)``, through libc).

* **non-dumpable** (:func:`seal`): a process that starts a job's command makes
  itself non-dumpable first, so the job -- the same user -- cannot read the
  secrets it holds: ``/proc/<pid>/environ``, ``mem``, ``maps``, ``fd/`` and
  the rest become root's and refuse every other user's process. The
  guardian process does the same as its first act (its program,
  :mod:`jobctl.guardian.program`, imports nothing of jobctl and repeats
  it). A child inherits the flag across ``fork`` and
  loses it at ``execve`` of an ordinary program, so the job's own
  processes stay as they would be: it can read its own ``/proc``, dump core,
  and be debugged. ``/proc/<pid>/cmdline`` stays readable by everyone, so
  jobctl puts no secret on a command line (docs/security.md). It also keeps
  core dumps and same-user debuggers (``gdb -p``, ``py-spy``) away from the
  worker: root still can.

Elsewhere than Linux (or with no ``prctl`` in libc) it is a no-op: there,
a job running as the worker's user can read what that user's tools can
(``ps eww`` on the BSDs and macOS shows other processes' environments).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

__all__ = ["PRCTL", "seal", "sealed"]

PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def _load() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The process's own symbols, libc's among them: find_library would run ldconfig to name it.
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


#: libc's ``prctl``, or None where there is none (not Linux).
PRCTL = _load()


def seal() -> bool:
    """Make this process non-dumpable; False where that cannot be done (not Linux).

    One system call, made before every start of a job's command: it is
    idempotent, and cheaper than remembering it was done (nothing in jobctl
    turns it back on, but a library in the same process might).
    """
    if PRCTL is None:
        return False
    return PRCTL(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def sealed() -> bool | None:
    """Whether this process is non-dumpable now; None where it cannot be known (not Linux)."""
    if PRCTL is None:
        return None
    return PRCTL(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
