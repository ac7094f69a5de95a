"""Exclusive keys kept in a PostgreSQL store: a row of ``jobctl_exclusive`` a key (``exclusive.sql``).

A claim of a job with a key runs on the rules' path (the claim statements
pass such a job over): the job's row is locked, then the key's row
(``exclusive_take``), then the holder's row is read in a statement of its
own -- under READ COMMITTED a statement sees every transaction committed
before it starts, so the claim that held the key last, which committed
before this one had the key's lock, is seen -- and judged by
:func:`jobctl.exclusive.holds`; the claim writes itself as the holder
(``exclusive_hold``) in the transaction that claims the job. The key's row
lock serialises the claims of one key, and the transaction's commit lets it go.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from ...errors import JobError, Refused
from ...exclusive import holds, key_held
from ...record import Record
from . import row
from .schema import Q

__all__ = ["KEYS", "RowKeys", "in_transaction"]

# The transaction a rules' path write has open on this thread (steps.RowSteps._written): a key is taken in it.
_OPEN = threading.local()


@contextmanager
def in_transaction(conn: Any) -> Iterator[None]:
    """Name ``conn`` as this thread's open write transaction for the block (a claim's keys are taken in it)."""
    _OPEN.conn = conn
    try:
        yield
    finally:
        _OPEN.conn = None


class RowKeys:
    """The keys a PostgreSQL claim takes (:class:`jobctl.exclusive.Keys`), in its own transaction."""

    def take(self, key: str, rec: Record, now: datetime) -> None:
        conn = getattr(_OPEN, "conn", None)
        if conn is None:
            raise Refused(f"job {rec.id}: its exclusive key is taken only inside the claim's transaction", rec.id)
        got = conn.execute(Q["exclusive_take"], {"key": key}).fetchone()
        job = got[0] if got is not None else ""
        if job and job != rec.id:
            found = conn.execute(Q["load"], {"id": job}, binary=True).fetchone()
            holder = None
            if found is not None:
                try:
                    holder = row.record_of(found)
                except JobError:
                    holder = None  # a row no reader here can read is run by no worker of ours
            if holder is not None and holds(holder, key, now):
                raise key_held(rec.id, key, holder)
        conn.execute(Q["exclusive_hold"], {"key": key, "job": rec.id, "epoch": rec.lease.epoch})


#: The one taker every claim of this store hands its rules (it keeps nothing of its own).
KEYS = RowKeys()
