"""A child process's group signalled, a pipe fed, an exit status told.

Small system-call wrappers the runner's supervision loop uses; kept apart so
the runner holds what a run does, not how each call is made. A child's exit
is seen by its parent, the guardian process (:mod:`jobctl.guardian`).
"""

from __future__ import annotations

import errno
import os
import signal
import time

__all__ = ["feed", "killpg", "describe_status", "sweep_session"]


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


def _session_of(pid: int) -> int | None:
    """The session of live process ``pid`` (from ``/proc/PID/stat``); None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # "PID (COMM) STATE PPID PGRP SESSION ...": COMM may hold anything, so count from its last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 4 or fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[3])
    except ValueError:
        return None


def sweep_session(sid: int, rounds: int = 50) -> int:
    """SIGKILL every live process of session ``sid``: how many were killed.

    For a dead guardian's session (every child it started is in it, and all
    they started but what called ``setsid``), called while its leader, the
    guardian, is still unreaped: a session's id is its leader's pid, which
    cannot be reused until then, so each process found in it is one of the
    guardian's. Each is signalled through a pidfd opened before its session
    is read again, so a pid reused between the look and the kill is never
    signalled. Scans until a scan finds none (what is killed may have forked
    meanwhile), ``rounds`` at most. Linux (``/proc``); elsewhere it kills nothing.
    """
    if not os.path.isdir("/proc"):
        return 0
    killed: set[int] = set()
    for _ in range(rounds):
        found = [
            pid
            for pid in (int(name) for name in os.listdir("/proc") if name.isdigit())
            if pid != sid and _session_of(pid) == sid and _kill_in(pid, sid)
        ]
        if not found:
            break
        killed.update(found)
        time.sleep(0.001)  # a SIGKILLed process takes a moment to become a zombie
    return len(killed)


def _kill_in(pid: int, sid: int) -> bool:
    """SIGKILL ``pid`` if it is still in session ``sid``; whether it was signalled.

    Through a pidfd opened before the session is read again, so a pid reused
    between the look and the kill is never signalled. Without pidfds (a
    kernel before 5.3: ``ENOSYS``), by its pid, as the look found it.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            return False  # gone already
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            return False
        return True
    try:
        if _session_of(pid) != sid:
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def describe_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit status {code}"
