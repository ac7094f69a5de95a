"""What a store's name is: a directory path, or a PostgreSQL URL, and how to print one.

``postgresql://`` and ``postgres://`` URLs (libpq's own spellings) name a
database store; anything else is a directory. Leaf module: the standard
library only, so every layer may ask.
"""

from __future__ import annotations

import os
import re

__all__ = ["is_database_url", "masked"]

_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(where: str | os.PathLike[str]) -> bool:
    return isinstance(where, str) and where[:13].lower().startswith(_SCHEMES)


def masked(where: str) -> str:
    """``where`` fit to print: a URL's password (in the authority or as ``password=``) becomes ``***``."""
    if not is_database_url(where):
        return where
    # re's own cache compiles each pattern once, when a URL is first printed: not at every start-up.
    where = re.sub(_USERINFO_PASSWORD, r"\1***@", where, count=1)
    return re.sub(_QUERY_PASSWORD, r"\1***", where)


# scheme://user:PASSWORD@ -- the authority ends at the first "/", "?" or "#".
_USERINFO_PASSWORD = r"\A([A-Za-z]+://[^/?#@:]*:)[^/?#]*@"
# ?password=... or &password=... in the query string (libpq reads it there too).
_QUERY_PASSWORD = r"([?&]password=)[^&#]*"
