"""What a run starts: the command a job's record asks for, and the environment it starts with."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..jobenv import JobEnvironment
from ..keeper import KeeperStore
from ..record import Record
from ..schedule import attempt as attempt_of
from ..store.location import address

__all__ = [
    "Command",
    "Processor",
    "RunStore",
    "SHELL",
    "shell_command",
    "handler_command",
    "processors",
    "child_env",
    "checkpoint_env",
]

#: The kind jobctl runs without any set-up: spec ``{"argv": [...], "cwd"?, "env"?, "timeout"?}``.
SHELL = "shell"


#: What a run needs of a store: the holder's operations and the job's paths, as
#: the lease keeper needs them (one protocol, kept in jobctl.keeper).
RunStore = KeeperStore


# -- what to run ----------------------------------------------------------------


@dataclass
class Command:
    """A child process to start: argv, and optionally cwd, extra env, a timeout and stdin bytes."""

    argv: list[str]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    stdin: bytes | None = None


#: Turns a claimed record into the command that does its work; raises ``Invalid`` for a spec it cannot run.
Processor = Callable[[Record], Command]


def shell_command(rec: Record) -> Command:
    """The ``shell`` kind: ``argv`` (non-empty list of strings), ``cwd``, ``env`` (strings), ``timeout`` (seconds)."""
    from ..shell import parse

    spec = parse(rec.spec, rec.id)
    return Command(spec.argv, spec.cwd, spec.env, spec.timeout)


def handler_command(command_line: str) -> Processor:
    """A processor for another kind: ``/bin/sh -c COMMAND_LINE``, the job's spec (compact JSON) on stdin."""

    def build(rec: Record) -> Command:
        spec = rec.opaque_text("spec") or "{}"
        return Command(["/bin/sh", "-c", command_line], stdin=spec.encode("utf-8"))

    return build


def processors(handlers: Mapping[str, str] | None = None) -> dict[str, Processor]:
    """``shell`` plus one handler command per other kind. A handler for ``shell`` replaces the built-in."""
    out: dict[str, Processor] = {SHELL: shell_command}
    for kind, command_line in (handlers or {}).items():
        out[kind] = handler_command(command_line)
    return out


# -- the child's environment ----------------------------------------------------

_CHILD_VARS = (
    "JOB_STORE",
    "JOB_ID",
    "JOB_EPOCH",
    "JOB_KIND",
    "JOB_WORK",
    "JOB_CHECKPOINT",
    "JOB_ATTEMPT",
    "JOB_RESULT",
)


def child_env(
    store: RunStore, rec: Record, base: Mapping[str, str] | None = None, environment: JobEnvironment | None = None
) -> dict[str, str]:
    """The environment a job's command starts with: the allowed part of ``base``, plus the ``JOB_*`` variables.

    Only the names ``environment`` lets through reach the job (the default
    list of :mod:`jobctl.jobenv`, plus ``pass_env``): the worker's secrets
    stay the worker's. ``JOB_CHECKPOINT`` is the predecessor's checkpoint as
    compact JSON, and ``null`` when there is none (as ``claim --format env``
    prints it): always JSON, so a command can parse it without a special case.
    """
    env = (environment or JobEnvironment()).base(os.environ if base is None else base)
    for name in _CHILD_VARS:
        env.pop(name, None)
    env["JOB_STORE"] = address(store)
    env["JOB_ID"] = rec.id
    env["JOB_EPOCH"] = str(rec.lease.epoch)
    env["JOB_KIND"] = rec.kind
    env["JOB_WORK"] = os.path.abspath(store.work_path(rec.id))
    env["JOB_ATTEMPT"] = str(attempt_of(rec))
    env["JOB_CHECKPOINT"] = checkpoint_env(rec)
    return env


def checkpoint_env(rec: Record) -> str:
    """``JOB_CHECKPOINT``'s value: the checkpoint as compact JSON, or ``null`` when there is none."""
    text = rec.checkpoint_text()
    return "null" if text is None else text
