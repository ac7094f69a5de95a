"""What running workers have said they handle, kept in a PostgreSQL store: a row a worker (``workers.sql``).

Each call is one statement, its expiry judged by the server's clock. A
renewal or a withdrawal is tried once: a worker that cannot reach its server
tries again at its next renewal, and a word it could not take back expires.
A store whose schema predates the table (``jobctl db migrate`` adds it)
reads as one where no worker has announced.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ...errors import Invalid, Refused
from ..base import Announcement
from . import row
from .schema import Q
from .session import Session, psycopg, read

__all__ = ["WorkerRows", "NO_TABLE_HINT"]

NO_TABLE_HINT = "add the table of workers' announcements with: jobctl db migrate (the schema version stays)"


def _no_table(exc: Refused) -> bool:
    return isinstance(exc.__cause__, psycopg.errors.UndefinedTable)


class WorkerRows:
    """The :class:`jobctl.store.base.Store` announcement calls of the PostgreSQL store (a mixin)."""

    session: Session

    def _now(self) -> datetime | None:
        raise NotImplementedError  # the store's own: a test's clock, or None for the server's

    def announce(self, owner: str, kinds: Iterable[str], ttl_seconds: float) -> None:
        if not owner:
            raise Invalid("a worker's announcement names its owner")
        params = {
            "owner": row.text_fit(owner, "owner"),
            "kinds": [row.text_fit(kind, "kind") for kind in sorted(set(kinds))],
            "ttl": row.interval(ttl_seconds),
            "now": self._now(),
        }
        try:
            self.session.one(Q["announce"], params)
        except Refused as exc:
            if _no_table(exc):
                exc.hint = NO_TABLE_HINT
            raise

    def withdraw(self, owner: str) -> None:
        try:
            self.session.one(Q["withdraw"], {"owner": owner})
        except Refused as exc:
            if not _no_table(exc):
                raise

    @read
    def announcements(self) -> list[Announcement]:
        try:
            rows = self.session.all(Q["announcements"], {"now": self._now()})
        except Refused as exc:
            if _no_table(exc):
                return []
            raise
        out = [Announcement(owner, frozenset(kinds or ()), expires) for owner, kinds, expires in rows]
        out.sort(key=lambda a: a.owner)
        return out
