"""What names a store: a directory path, or a PostgreSQL URL.

``postgresql://`` and ``postgres://`` URLs (libpq's own spellings) name a
database store; anything else is a directory. The driver is imported only
when a URL asks for it, so a file-store command's start-up does not grow.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .file import FileStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = ["is_database_url", "masked", "open_store"]

_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(where: str | os.PathLike[str]) -> bool:
    return isinstance(where, str) and where[:13].lower().startswith(_SCHEMES)


def masked(where: str) -> str:
    """``where`` fit to print: a URL's password (in the authority or as ``password=``) becomes ``***``."""
    if not is_database_url(where):
        return where
    try:
        parts = urlsplit(where)
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _, hostinfo = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{hostinfo}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(k == "password" for k, _ in pairs):
                query = urlencode([(k, "***" if k == "password" else v) for k, v in pairs], safe="/:*")
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "postgresql://(a URL that does not parse)"


def open_store(where: str | os.PathLike[str]) -> FileStore | PostgresStore:
    """The store ``where`` names: a :class:`FileStore` for a path, a PostgreSQL store for a URL.

    A database store must have been initialised (``jobctl db init``); its
    refusals name the URL with any password masked.
    """
    if is_database_url(where):
        from .postgres import PostgresStore

        return PostgresStore(str(where))
    return FileStore(where)
