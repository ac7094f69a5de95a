"""What a job's command sees of the worker's environment: an allow-list, not everything.

A worker's environment holds what the worker needs, and that often includes
secrets -- the webhook its ``--on-failure`` alert posts to, cloud credentials.
A job's command comes from the store, which anyone who can write ``jobs/``
fills (docs/security.md), so it starts from :data:`DEFAULT_PASS` plus the names
the worker is told to pass (``--pass-env NAME``, setting ``pass_env``), then
the ``JOB_*`` variables jobctl sets, then the spec's own ``env``. The alert
command is the worker's own and keeps the whole environment.

A spec's ``env`` may not set a ``JOB_*`` name (jobctl's, and a job must not
pose as another), nor the dynamic loader's variables (:data:`LOADER`) unless
the worker allows it (``--allow-loader-env``): either is refused with
``Invalid`` naming the job and the variable, and the attempt fails without
a retry -- the same spec would be refused again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import Invalid

__all__ = ["DEFAULT_PASS", "PASS_PREFIXES", "LOADER", "JobEnvironment"]

#: Passed to every job when the worker has them. ``LC_*`` is every locale category.
DEFAULT_PASS: tuple[str, ...] = (
    "PATH",
    "HOME",
    "LANG",
    "LC_*",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
)
#: Name prefixes passed as a family (from the ``*`` entries above).
PASS_PREFIXES: tuple[str, ...] = tuple(name[:-1] for name in DEFAULT_PASS if name.endswith("*"))
_PASS_NAMES = frozenset(name for name in DEFAULT_PASS if not name.endswith("*"))

#: What makes the dynamic loader run other code in every process the job starts.
LOADER: tuple[str, ...] = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT")


@dataclass(frozen=True)
class JobEnvironment:
    """The policy one worker (or ``jobctl run``) applies to every job it starts."""

    pass_env: tuple[str, ...] = ()
    allow_loader_env: bool = False

    def passes(self, name: str) -> bool:
        """Whether the worker's variable ``name`` reaches the job."""
        return name in _PASS_NAMES or name in self.pass_env or name.startswith(PASS_PREFIXES)

    def base(self, worker_env: Mapping[str, str]) -> dict[str, str]:
        """The variables of ``worker_env`` a job starts with (before the ``JOB_*`` ones are set)."""
        # The worker's own JOB_* (JOB_OWNER, JOB_RETRY_INTERVALS...) are not the job's, unless named.
        return {
            name: value
            for name, value in worker_env.items()
            if self.passes(name) and (name in self.pass_env or not name.startswith("JOB_"))
        }

    def check(self, spec_env: Mapping[str, str] | Iterable[str], job_id: str) -> None:
        """Refuse (``Invalid``) a spec ``env`` that sets a ``JOB_*`` name, or a loader variable when not allowed."""
        for name in spec_env:
            if name.startswith("JOB_"):
                raise Invalid(f"job {job_id}: its spec's env sets {name}; the JOB_* variables are jobctl's", job_id)
            if name in LOADER and not self.allow_loader_env:
                raise Invalid(
                    f"job {job_id}: its spec's env sets {name}, which this worker does not allow "
                    "(--allow-loader-env allows it)",
                    job_id,
                )
