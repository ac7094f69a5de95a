"""Who submitted a job: jobctl's extension key ``jobctl.run/submitted-by@1``.

``{"by": "alice@build-7"}``: a name, as the submitter gave it
(``submit --by``, ``"by"`` in ``POST /api/jobs``) or as jobctl made it from
the environment (``$USER@HOST`` on the command line, the client's address
over HTTP). It is for people and filters (``list --by``, ``?by=``), never
for scheduling, so it is not critical: a reader that does not know it keeps
it as opaque extension data [JOB-D3], and loses only the name.
Standard library only: ``submit`` imports this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import Invalid
from .record import Record

__all__ = ["SUBMITTED_BY", "SUBMITTER_MAX", "submitter_of", "check_name", "set_submitter", "default_submitter"]

#: The extension key: ``{"by": NAME}``.
SUBMITTED_BY = "jobctl.run/submitted-by@1"
#: The longest name kept, in characters.
SUBMITTER_MAX = 200


def submitter_of(rec: Record) -> str | None:
    """The name ``rec`` was submitted by, or None (not recorded, or not a name: another writer's odd value)."""
    value = rec.extensions.get(SUBMITTED_BY)
    name = value.get("by") if isinstance(value, dict) else None
    return name if isinstance(name, str) and name else None


def check_name(name: str, what: str = "by") -> str:
    """``name`` if it can stand as a submitter: printable, not blank, at most :data:`SUBMITTER_MAX` characters."""
    if not name.strip():
        raise Invalid(f"{what} is blank")
    if not name.isprintable():
        raise Invalid(f"{what} {name!r} holds a character that is not printable (a control character or separator)")
    if len(name) > SUBMITTER_MAX:
        raise Invalid(f"{what} is longer than {SUBMITTER_MAX} characters")
    return name


def set_submitter(rec: Record, name: str, what: str = "by") -> Record:
    """Record ``name`` as who submitted ``rec`` (checked as :func:`check_name` does); returns ``rec``."""
    rec.extensions[SUBMITTED_BY] = {"by": check_name(name, what)}
    return rec


def default_submitter(env: Mapping[str, str] | None = None) -> str:
    """Who submits, when nobody said: ``$USER@HOST`` (``$LOGNAME``, else the uid, when ``USER`` is unset)."""
    env = os.environ if env is None else env
    user = env.get("USER") or env.get("LOGNAME") or (f"uid{os.getuid()}" if hasattr(os, "getuid") else "someone")
    try:
        host = os.uname().nodename
    except AttributeError:  # Windows has no uname
        host = env.get("COMPUTERNAME", "localhost")
    return f"{user}@{host}"
