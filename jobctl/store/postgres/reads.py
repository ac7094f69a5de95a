"""The PostgreSQL store's reads: a row, every row, the open rows, a scan a page at a time, the orphans."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ...errors import JobError, Refused
from ...record import Record, is_orphan
from ...summary import Summary
from ..base import Listing, OpenListing, Unreadable
from . import row
from .handle import RowHandle, Rows, first
from .schema import Q
from .session import read

__all__ = ["RowReads", "SCAN_PAGE"]

#: Rows per page of :meth:`PostgresStore.scan`.
SCAN_PAGE = 500


class RowReads(RowHandle):
    """The reads of :class:`jobctl.store.postgres.store.PostgresStore`: none of them locks a row."""

    def load(self, job_id: str) -> Record:
        return self._holding(self._row(job_id))

    def load_bytes(self, job_id: str) -> bytes:
        return row.render(self._row(job_id))

    @read
    def ids(self) -> list[str]:
        return [got[0] for got in self.session.all(Q["ids"])]

    @read
    def list(self) -> Listing:
        return row.listing(self.session.all(Q["list"]))

    @read
    def list_open(self, *, finished: Callable[[Any, Any], None] | None = None, briefly: bool = False) -> OpenListing:
        """The rows not yet ended, and every row's state, in one round trip.

        Finished rows are known by their ``state`` column alone [JOB-T1]: no
        cache is needed where the server can leave the rest where it is (and
        none is read, so ``finished`` is never called). The open rows are read
        first: a row that finishes between the two statements is seen
        finished, which it stays. A row this reader cannot read is named
        unreadable and left out of ``states``, as the file store leaves out a
        record it cannot read.
        """
        with self.session.tx(pipelined=True) as conn:
            opened = conn.execute(Q["list_open"], binary=True)
            ended = conn.execute(Q["finished_states"], {"understood": self._models()})
        # after the Sync: one round trip
        return row.open_listing(opened.fetchall(), ended.fetchall(), self._unreadable)

    def _unreadable(self, job_id: str) -> JobError:
        """Why a finished row whose critical models this reader does not know cannot be read: its own words."""
        try:
            self.load(job_id)
        except JobError as exc:
            return exc
        return Refused(f"job {job_id} could not be read", job_id)  # it became readable meanwhile: said so

    def scan(
        self,
        unreadable: Unreadable,
        *,
        summaries: bool = True,
        taken: Mapping[str, tuple[Summary, Any]] | None = None,
        opened: OpenListing | None = None,
    ) -> Iterator[Record | Summary]:
        """Every row in id order, a page at a time (``summaries`` and ``opened`` are moot: nothing is cached here).

        The ids in ``taken`` are left out (the caller has them already). Each
        page is its own statement, so nothing is held while the caller writes
        what it has; a row written meanwhile is seen as it is when its page is
        read, as a file store's scan sees a record.
        """
        after = ""
        while True:
            rows = self._page(after)
            for got in rows:
                if taken and got[0] in taken:
                    continue
                try:
                    yield row.record_of(got)
                except JobError as exc:
                    unreadable.append((got[0], exc))
            if len(rows) < SCAN_PAGE:
                return
            after = rows[-1][0]

    @read
    def _page(self, after: str) -> Rows:
        return self.session.all(Q["scan_after"], {"after": after, "limit": SCAN_PAGE})

    @read
    def orphans(self) -> Listing:
        """As the file store's: the statement narrows the rows, :func:`is_orphan` decides each."""
        rows = sorted(self.session.all(Q["orphan_candidates"], {"now": self._now()}), key=first)
        found = row.listing(rows)
        out = Listing(unreadable=found.unreadable)
        if rows:
            now = rows[0][-1]
            out.extend(rec for rec in found if is_orphan(rec, now))
        return out
