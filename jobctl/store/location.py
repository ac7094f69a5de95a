"""What names a store: a directory path, or a PostgreSQL URL.

``postgresql://`` and ``postgres://`` URLs (libpq's own spellings) name a
database store; anything else is a directory. The driver is imported only
when a URL asks for it, so a file-store command's start-up does not grow.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from .file import FileStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = ["is_database_url", "masked", "open_store", "address"]

_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(where: str | os.PathLike[str]) -> bool:
    return isinstance(where, str) and where[:13].lower().startswith(_SCHEMES)


def masked(where: str) -> str:
    """``where`` fit to print: a URL's password (in the authority or as ``password=``) becomes ``***``."""
    if not is_database_url(where):
        return where
    where = _USERINFO_PASSWORD.sub(r"\1***@", where, count=1)
    return _QUERY_PASSWORD.sub(r"\1***", where)


# scheme://user:PASSWORD@ -- the authority ends at the first "/", "?" or "#".
_USERINFO_PASSWORD = re.compile(r"\A([A-Za-z]+://[^/?#@:]*:)[^/?#]*@")
# ?password=... or &password=... in the query string (libpq reads it there too).
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*")


def open_store(where: str | os.PathLike[str]) -> FileStore | PostgresStore:
    """The store ``where`` names: a :class:`FileStore` for a path, a PostgreSQL store for a URL.

    A database store must have been initialised (``jobctl db init``); its
    refusals name the URL with any password masked.
    """
    if is_database_url(where):
        from .postgres import PostgresStore

        return PostgresStore(str(where))
    return FileStore(where)


def address(store: object) -> str:
    """What ``JOB_STORE`` is set to for a child, so it reaches this same store.

    A directory's absolute path; a database store's URL as given (the child
    needs whatever credentials the parent was given; it is never printed).
    """
    url = getattr(store, "url", None)
    if isinstance(url, str) and is_database_url(url):
        return url
    root: str = store.root  # type: ignore[attr-defined]  # every store has a root
    return os.path.abspath(root)
