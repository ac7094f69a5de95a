"""How a child starts: its executable found as ``exec`` would, and the margins its lease is kept by.

Every child is started by the :class:`~jobctl.guardian.Guardian` process,
its parent: it spawns the command itself, in its own process group, already
registered, so no code of the job runs unguarded and no start gate is needed.
The supervisor looks the executable up first (:func:`executable`), so a
command that cannot start fails as it always did, with ``exec``'s error. The
margins here say how early the run, and the guardian after it, kill a child
whose lease runs out.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping

__all__ = ["executable", "own_margin", "guard_margin", "read_every"]


def executable(argv0: str, env: Mapping[str, str], cwd: str | None) -> str:
    """The absolute path ``exec`` would run for ``argv0`` (looked up as execvpe does, in ``env``'s ``PATH``).

    Raises what ``exec`` would (``FileNotFoundError``, ``PermissionError``):
    the guardian spawns the path without a lookup of its own. A path to a
    directory is ``IsADirectoryError`` (exit 126 "Is a directory", as a shell
    says), not "No such file or directory"; a directory met in the ``PATH``
    lookup is passed over, as a shell passes it (not found, 127).
    """
    if "/" in argv0:
        candidates = [os.path.join(cwd or "", argv0)]
    else:
        candidates = [os.path.join(cwd or "", d or ".", argv0) for d in os.get_exec_path(dict(env))]
    denied = False
    for path in candidates:
        if os.path.isfile(path):
            if os.access(path, os.X_OK):
                # Not abspath: no '..' is folded past a link, as the kernel would not fold it.
                return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
            denied = True
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), argv0)
    if "/" in argv0 and os.path.isdir(candidates[0]):  # asked only once no file was found: off a start's path
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), argv0)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv0)


def own_margin(ttl: float) -> float:
    """How long before its lease ends a run kills a child it could not renew for: a fifth of the TTL, 1 s at most."""
    return min(1.0, ttl / 5)


def guard_margin(ttl: float) -> float:
    """How long before the lease ends the guardian kills: half the run's margin, so it acts only when the run cannot.

    The lease's end it is given is already early (read before each renewal);
    the margin covers the guardian's own wake-up on a busy machine.
    """
    return own_margin(ttl) / 2


def read_every(ttl: float) -> float:
    """How often the guardian reads a lease's record: a tenth of the TTL, a quarter second at most.

    A recall is seen within this, so one whose grace is longer than it plus
    the guardian's margin is honoured even while the supervisor is stopped.
    """
    return min(ttl / 10, 0.25)
