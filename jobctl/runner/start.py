"""The start gate: how a child starts, blocked until its supervisor has it under the guardian.

Every child is ``/bin/sh`` running :func:`trampoline`, in its own process
group, reading its go on stdin; :func:`spawn` starts it so. The supervisor
then registers the group with the :class:`~jobctl.guardian.Guardian` and,
only if that worked and the lease has time left, writes ``go``
(:func:`give_go`); otherwise it closes the pipe (:func:`withhold_go`):
the child reads end of file and exits, having run nothing of the job. The
margins here say how early the run, and the guardian after it, kill a child
whose lease runs out.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any

from ..children import killpg
from ..guardian import Guardian
from ..prctl import PR_SET_PDEATHSIG, PRCTL
from .command import Command

__all__ = [
    "NO_GO",
    "trampoline",
    "check_executable",
    "child_setup",
    "spawn",
    "give_go",
    "withhold_go",
    "own_margin",
    "guard_margin",
    "read_every",
]


def child_setup(parent: int) -> Callable[[], None]:
    """What runs in the child between fork and exec.

    Its own process group, so a stop reaches everything the command started;
    the parent-death signal, so a SIGKILLed supervisor takes the child with
    it. The death signal is armed only from here on: if the parent already
    died between fork and prctl, the child must not start at all. Everything
    used here is resolved in the parent beforehand.
    """
    prctl = PRCTL
    kill = int(signal.SIGKILL)

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(128 + kill)

    return setup


#: What a child runs first: wait for the supervisor's go on stdin, then become the job's command.
#: End of file instead of ``go`` means the supervisor is gone (or refused): exit, running nothing.
_GO = 'IFS= read -r go && [ "$go" = go ] || exit 125\n'
_SH = "/bin/sh"
#: The exit status of a child that never got its go.
NO_GO = 125


def trampoline(stdin_null: bool, keep_pwd: bool) -> str:
    """The ``/bin/sh -c`` script that starts every child (its argv follows as ``"$@"``).

    The child is in its own process group and blocked on this read before
    its supervisor registers it with the guardian; only then does the
    supervisor write ``go``. No code of the job can run unsupervised, and a
    supervisor killed in between leaves a child that reads end of file and
    exits. The shell sets ``PWD``; it is unset again unless the job's
    environment had it, so the command starts with the environment it was given.
    """
    script = _GO
    if not keep_pwd:
        script += "unset PWD\n"
    return script + ('exec "$@" </dev/null' if stdin_null else 'exec "$@"')


def check_executable(argv0: str, env: Mapping[str, str], cwd: str | None) -> None:
    """Raise what ``exec`` would for ``argv0`` (looked up as execvpe does): the shell would only exit 127."""
    if "/" in argv0:
        candidates = [os.path.join(cwd or "", argv0)]
    else:
        candidates = [os.path.join(cwd or "", d or ".", argv0) for d in os.get_exec_path(dict(env))]
    denied = False
    for path in candidates:
        if os.path.isfile(path):
            if os.access(path, os.X_OK):
                return
            denied = True
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), argv0)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv0)


#: Popen starts a child in its own process group without a preexec_fn from Python 3.11.
_VFORK_GROUPS = sys.version_info >= (3, 11)


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


def spawn(
    command: Command, env: Mapping[str, str], log: IO[bytes] | None, tee: bool
) -> tuple[subprocess.Popen[bytes], int | None, int]:
    """Start the child blocked on its go: (the child, the tee pipe's read end or None, the go pipe's write end).

    Its output goes to ``log``, or, with ``tee``, into a pipe its supervisor
    copies to the log and to its own output. Raises ``OSError`` when it
    cannot start (nothing is left open then).
    """
    stdout: Any = log
    tee_r: int | None = None
    tee_w: int | None = None
    if tee:
        tee_r, tee_w = os.pipe()
        stdout = tee_w
    # The child's stdin is the pipe its go comes through. The spec of a
    # handler kind follows the go on the same pipe, written by the
    # supervision loop as the child reads it: it may never read it, and
    # a blocking write would stop supervising once the pipe's buffer filled.
    go_r, go_w = os.pipe()
    options: dict[str, Any] = {}
    if _VFORK_GROUPS:
        options["process_group"] = 0
    else:
        # Python 3.10 has no process_group: setpgid must be done by the
        # child itself, which forces a full fork; it arms the
        # parent-death signal too while it is there.
        options["preexec_fn"] = child_setup(os.getpid())
    script = trampoline(command.stdin is None, "PWD" in env)
    try:
        proc = subprocess.Popen(
            [_SH, "-c", script, "jobctl", *command.argv],
            cwd=command.cwd,
            env=env,
            stdin=go_r,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
            **options,
        )
    except OSError:
        os.close(go_w)
        if tee_r is not None:
            os.close(tee_r)
        raise
    finally:
        os.close(go_r)
        if tee_w is not None:
            os.close(tee_w)
    return proc, tee_r, go_w


def withhold_go(proc: subprocess.Popen[bytes], go_w: int, tee_r: int | None, guardian: Guardian) -> None:
    """No go: end of file on its stdin (it exits without running anything), its group killed, forgotten, reaped."""
    os.close(go_w)
    killpg(proc.pid, signal.SIGKILL)
    guardian.forget(proc.pid)
    proc.wait()
    if tee_r is not None:
        os.close(tee_r)


def give_go(go_w: int, stdin: bytes | None) -> tuple[int, bytes] | None:
    """Write the go; returns the spec still to write to the child's stdin (fd and bytes), if it takes one."""
    try:
        os.write(go_w, b"go\n")
    except OSError:
        pass  # it is dead already (the guardian's time came): the loop sees its exit
    if stdin:
        os.set_blocking(go_w, False)
        return go_w, stdin
    os.close(go_w)
    return None
