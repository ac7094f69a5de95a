"""The PostgreSQL store, for workers on many hosts (the ``postgres`` extra: psycopg).

:class:`PostgresStore` (:mod:`.store`) keeps the job contract over one table
whose columns are the record (:mod:`.row`); :mod:`.schema` creates and
migrates it (``db init``/``db migrate``); :mod:`.listener` hears its change
notices; :mod:`.session` is one process's connection. SQL lives beside them
in ``*.sql`` files as named queries.
"""

from __future__ import annotations

from ..base import RowLease
from .listener import Listener
from .schema import SCHEMA_VERSION, SQL_DIR, Q, init, migrate, queries, schema_status
from .store import RECONNECT_WAIT, RECONNECT_WAIT_ENV, PostgresStore, reconnect_wait_of

__all__ = [
    "PostgresStore",
    "Listener",
    "RowLease",
    "SCHEMA_VERSION",
    "SQL_DIR",
    "Q",
    "queries",
    "schema_status",
    "init",
    "migrate",
    "RECONNECT_WAIT",
    "RECONNECT_WAIT_ENV",
    "reconnect_wait_of",
]
