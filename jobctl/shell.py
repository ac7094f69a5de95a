"""The ``shell`` kind's spec, checked where it is written (``submit``) and where it runs (the runner).

``{"argv": [...], "cwd"?: "...", "env"?: {...}, "timeout"?: seconds}``: the
one kind jobctl runs with no set-up. Checking it at submit turns a typo
(``"argv": "echo hi"``) into a refusal on the submitter's terminal rather
than a failed job in some worker's log. Standard library only: ``submit``
imports this, and its start-up is a cron job's latency.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import Invalid

__all__ = ["SHELL", "ShellSpec", "parse", "check_kind"]

#: The kind jobctl runs without any set-up.
SHELL = "shell"


def check_kind(kind: str, what: str = "kind") -> str:
    """``kind`` if a submission may name it, else ``invalid`` naming ``what``: one rule for the CLI and HTTP.

    Refused: a blank kind; a character that is not printable (a newline or
    escape would split or colour every line that shows the job); and
    ``shell`` spelt otherwise (``Shell``, `` shell``, ``sh ell``). No worker
    runs such a job as a shell job, so it would wait for ever, and over HTTP
    it would pass for something other than the one kind ``--allow-shell`` guards.
    """
    if not kind.strip():
        raise Invalid(f"{what} is blank")
    if not kind.isprintable():
        raise Invalid(f"{what} {kind!r} holds a character that is not printable (a control character or separator)")
    if kind != SHELL and "".join(kind.split()).casefold() == SHELL:
        raise Invalid(f"{what} {kind!r} is not {SHELL}: spell it {SHELL}, lower case, with no spaces")
    return kind


class ShellSpec:
    """A checked ``shell`` spec. (Slots: a dataclass or a ``NamedTuple`` costs ``submit`` its start-up.)"""

    __slots__ = ("argv", "cwd", "env", "timeout")

    def __init__(self, argv: list[str], cwd: str | None, env: dict[str, str], timeout: float | None) -> None:
        self.argv, self.cwd, self.env, self.timeout = argv, cwd, env, timeout


def parse(spec: Any, job_id: str = "") -> ShellSpec:
    """Check a ``shell`` spec (a decoded value, or a :class:`jobctl.wire.Raw`); ``invalid`` names the field.

    ``job_id`` is named in the refusal only when the job exists or was named
    by the caller: a refused submit never names an id it did not create.
    """
    value = getattr(spec, "value", spec)  # a Raw carries its decoded value
    if not isinstance(value, dict):
        raise Invalid("a shell job's spec must be an object with argv", job_id)
    argv = value.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(word, str) for word in argv):
        raise Invalid('a shell job\'s spec needs "argv": a non-empty list of strings', job_id)
    if not argv[0]:
        raise Invalid('"argv" names no command: its first word is empty', job_id)
    cwd = value.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise Invalid('"cwd" must be a directory path', job_id)
    env = value.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise Invalid('"env" must be an object of strings', job_id)
    _startable(argv, cwd, env, job_id)
    timeout = value.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf
    ):
        raise Invalid('"timeout" must be a positive number of seconds', job_id)
    return ShellSpec(list(argv), cwd, dict(env), None if timeout is None else float(timeout))


def _startable(argv: list[str], cwd: str | None, env: dict[str, str], job_id: str) -> None:
    """Refuse what no process can be started with (``execve`` takes C strings): ``invalid`` naming the field.

    A NUL in a word, the cwd or the environment, and an environment name that
    is empty or holds ``=``: the runner could only fail each attempt of it.
    """
    for number, word in enumerate(argv, start=1):
        if "\0" in word:
            raise Invalid(f'"argv" word {number} holds a NUL character, which no command can be given', job_id)
    if cwd is not None and "\0" in cwd:
        raise Invalid('"cwd" holds a NUL character, which no path can', job_id)
    for name, text in env.items():
        if not name or "=" in name or "\0" in name:
            raise Invalid(f'"env" name {name!r} is not a variable name (empty, or holds "=" or a NUL)', job_id)
        if "\0" in text:
            raise Invalid(f'"env" value of {name} holds a NUL character, which no variable can', job_id)
