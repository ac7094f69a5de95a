"""Opening the store a name names: a directory, or a PostgreSQL database (:mod:`jobctl.store.url`).

The driver is imported only when a URL asks for it, so a file-store
command's start-up does not grow.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .file import FileStore
from .url import is_database_url, masked

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = ["is_database_url", "masked", "open_store", "address"]


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
