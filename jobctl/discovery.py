"""Which store root, and which rung of the ladder chose it (DIGEST §7).

A tool given no root resolves one and never refuses for lack of
configuration. The rungs, nearest first:

Each rung may name a directory or a PostgreSQL URL (``postgresql://`` or
``postgres://``); a URL's password is masked wherever it is printed.

1. the ``--store`` flag of this one command;
2. ``JOB_STORE`` (jobctl's own override, used by harnesses and containers);
3. ``ABSTRACTION_STORE``;
4. the ``store`` string in ``<user config dir>/abstraction/config.json``
   (``~/.config`` or ``$XDG_CONFIG_HOME`` on Linux, ``~/Library/Application
   Support`` on macOS, ``%APPDATA%`` on Windows -- platformdirs knows which);
5. ``<home>/.abstraction``, whether or not it exists.

An empty variable is not an override [CFG-E1]. A config file that does not
parse, or holds no usable ``store`` string, is reported on stderr and skipped:
never silently [CFG-T2]. Each answer carries the label of the rung that gave
it, so a root that cannot be opened can be reported together with the place
to fix it.

platformdirs costs milliseconds to import and a cron job pays them on every
start, so it is imported only when the ladder reaches the config file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .errors import JobError, NoStore
from .store.file import FileStore
from .store.location import is_database_url

if TYPE_CHECKING:
    from .store.postgres import PostgresStore

__all__ = [
    "FLAG",
    "DEFAULT",
    "Unavailable",
    "config_path",
    "read_config",
    "resolve",
    "open_store",
]

#: Rung labels, as upstream's Go jobctl prints them (the config rung's label is the file's path).
FLAG = "the --store flag"
JOB_STORE = "JOB_STORE"
ABSTRACTION_STORE = "ABSTRACTION_STORE"
DEFAULT = "the default; nothing is configured"

Warn = Callable[[str], None]


class Unavailable(Exception):
    """No store could be had: its root cannot be opened, or there is no root to default to.

    ``lines`` is what the command line prints on stderr, one entry a line.
    """

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0] if lines else "no store")
        self.lines = lines


def config_path() -> str:
    """``<user config dir>/abstraction/config.json`` for this user and OS.

    platformdirs reads ``XDG_CONFIG_HOME`` from the process environment and
    honours it only when absolute, as upstream's Python reader does.
    """
    import platformdirs  # deferred: only this rung needs it, and it is slow to import

    return os.path.join(platformdirs.user_config_dir("abstraction", appauthor=False, roaming=True), "config.json")


def read_config(path: str) -> tuple[str, str]:
    """``(store, problem)`` from a config file; both empty when it is absent or says nothing.

    ``problem`` is a sentence for stderr when the file exists but cannot be
    used; ``store`` is then empty and the ladder moves on.
    """
    from .fsio import read_regular  # where used, as json: only a ladder that reaches the config file

    try:
        data = read_regular(path)
    except FileNotFoundError:
        return "", ""
    except OSError as exc:
        return "", f"cannot be read ({exc.strerror or exc})"
    import json  # where used: its import is ~1.2 ms of every start-up

    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        return "", f"is not JSON ({exc})"
    if not isinstance(doc, dict):
        return "", "is not a JSON object"
    store = doc.get("store")
    if store is None or store == "":
        return "", ""
    if not isinstance(store, str):
        return "", '"store" is not a string'
    return store, ""


def _home(env: Mapping[str, str]) -> str:
    home = env.get("HOME", "") if os.name != "nt" else env.get("USERPROFILE", "")
    if home:
        return home
    expanded = os.path.expanduser("~")
    return "" if expanded == "~" else expanded


def resolve(
    flag: str | None = None,
    env: Mapping[str, str] | None = None,
    warn: Warn | None = None,
) -> tuple[str, str]:
    """``(root, rung label)``: the nearest rung that names a root wins.

    ``warn`` receives one line for a config file that exists but cannot be
    used (default: ignore). Raises :class:`Unavailable` only when every rung
    is empty and there is no home directory to default to.
    """
    if flag:
        return flag, FLAG
    env = os.environ if env is None else env
    for name in (JOB_STORE, ABSTRACTION_STORE):
        value = env.get(name, "")
        if value:
            return value, name
    path = config_path()
    store, problem = read_config(path)
    if store:
        return store, path
    if problem and warn is not None:
        warn(f"jobctl: {path} {problem}; ignoring it")
    home = _home(env)
    if not home:
        raise Unavailable(
            [
                "jobctl: this machine has no home directory, so there is no store to default to",
                "  ABSTRACTION_STORE=…   names one",
            ]
        )
    return os.path.join(home, ".abstraction"), DEFAULT


def open_store(root: str, rung: str, create: bool = False) -> FileStore | PostgresStore:
    """Open the store at ``root`` (creating it only when ``create``); refuse naming the rung that chose it.

    Only a command that adds a job, and ``jobctl init``, create a store: any
    other given a root with no store raises :class:`NoStore` naming the root
    and the rung, so a typo in ``--store`` or ``JOB_STORE`` is seen at once.
    A ``postgresql://`` or ``postgres://`` root opens the database store,
    which must exist (``jobctl db init``); its password is never printed.
    """
    if is_database_url(root):
        from .store.postgres import PostgresStore

        try:
            return PostgresStore(root)
        except JobError as exc:
            # One line: what is wrong, what to do, and which rung named the store.
            hint = f"; {exc.hint}" if exc.hint else ""
            raise Unavailable([f"jobctl: {exc.message}{hint} (the store came from {rung})"]) from exc
    try:
        return FileStore(root, create=create)
    except NoStore as exc:
        raise NoStore(f"{exc.message} (the root came from {rung})") from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename and exc.filename != root else ""
        raise Unavailable(
            [
                f"jobctl: {root}: {where}{exc.strerror or exc}",
                f"  that root came from {rung}",
                "  jobctl paths          where jobctl looks for a store, and which rung answered",
                "  ABSTRACTION_STORE=…   names a store for one run",
            ]
        ) from exc
