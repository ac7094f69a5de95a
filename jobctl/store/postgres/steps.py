"""The PostgreSQL store's steps: one statement each, and the contract's rules when it is refused.

A step's statement states the step's preconditions in its WHERE clause; a
statement that changes no row was refused, and the store then reads the row
under its lock and runs the contract's own rules on it
(:mod:`jobctl.store.contract`), which name the refusal -- or, when the row
moved between the two, allow the step and write it there (:meth:`RowSteps._write`).
"""

from __future__ import annotations

from typing import Any

from ... import ids
from ...errors import JobError, LockBusy, NotFound
from ...record import Record, prepare
from ..contract import Apply
from . import row
from .handle import Row, RowHandle
from .held import HOLDERS
from .keys import in_transaction
from .schema import Q
from .session import retried

__all__ = ["RowSteps"]


class RowSteps(RowHandle):
    """The steps of :class:`jobctl.store.postgres.store.PostgresStore` and the rules' path they fall back on."""

    # -- steps: one statement each, the rules when it is refused -------------------

    @retried
    def _step(self, job_id: str, query: str, params: dict[str, Any], rules: Apply, *, wait: bool = True) -> Record:
        """Run one step's statement; when it changes nothing, the rules judge the row (:meth:`_write`).

        A claim's statement hands back the row; another step's, its revision
        and what it set (:data:`.row.STEPS`), laid over the row this store
        holds at the revision before -- or, holding none, the row is read in
        the same round trip (in the same transaction, under the row lock the
        step took: as the step left it). With ``wait`` false a row another
        transaction holds is waited for :data:`jobctl.limits.LOCK_PATIENCE` at
        most (``LockBusy``, :meth:`.session.Session.run`).
        """
        self._stepping(job_id, params)
        held = self._held.get(job_id) if query in row.STEPS else None
        while True:
            try:
                if held is not None or query not in row.STEPS:
                    got = self.session.one(Q[query], params, wait=wait)
                    whole = None
                else:
                    with self.session.tx(pipelined=True) as conn:
                        cur = conn.execute(Q[query], params, binary=True)
                        load = conn.execute(Q["load"], {"id": job_id}, binary=True)
                    got = cur.fetchone()  # after the Sync: one round trip
                    whole = load.fetchone()
                break
            except JobError as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                if not (wait and isinstance(exc, LockBusy)):
                    raise
        return self._concluded(job_id, query, got, rules, held, whole, wait=wait)

    def _stepping(self, job_id: str, params: dict[str, Any]) -> None:
        """What every step's statement is given besides its own terms: the id, the clock, the models known."""
        ids.check(job_id)
        params["id"], params["ids"] = job_id, [job_id]
        params["now"], params["understood"] = self._now(), self._models()

    def _concluded(
        self, job_id: str, query: str, got: Row | None, rules: Apply, held: Row | None, whole: Row | None, *, wait: bool
    ) -> Record:
        """The record a step's answer says the row holds now; the rules' verdict when it changed nothing."""
        if got is None:
            rec = self._write(job_id, rules, wait=wait)  # raises the verdict, unless the row moved meanwhile
            self.moved += 1
            return rec
        if query in HOLDERS:
            self._held.wrote(job_id, got[0] if query in row.STEPS else got[row.REVISION])
        if query not in row.STEPS:
            whole = got
        elif whole is None:
            assert held is not None
            # Somebody else wrote the row since this store last held it: read it as it is now.
            whole = row.laid_over(held, query, got) if got[0] == held[row.REVISION] + 1 else self._row(job_id)
        return self._holding(whole)

    # -- the rules' path: a locked read, the contract's Python, a whole write -------

    @retried
    def _write(self, job_id: str, apply: Apply, fresh: bool = False, *, wait: bool = True) -> Record:
        """Lock the row, run ``apply`` on its record with the server's clock read under the lock, write it back.

        In pipeline mode: two round trips, the locked read and then the write
        with the commit. A refusal ``apply`` raises leaves a transaction that
        only read and locked, which ends with nothing written.
        """
        ids.check(job_id)
        while True:
            try:
                return self._written(job_id, apply, fresh)
            except LockBusy as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                if not wait:  # the session waited LOCK_PATIENCE for the row: a writer stopped mid-write
                    raise
            except JobError as exc:
                if not exc.job_id:
                    exc.job_id = job_id
                raise

    def _written(self, job_id: str, apply: Apply, fresh: bool) -> Record:
        """:meth:`_write`'s one try."""
        with self.session.tx(pipelined=True) as conn:
            got = conn.execute(Q["lock_record"], {"id": job_id}, binary=True).fetchone()
            if got is None:
                raise NotFound(f"no job {job_id}", job_id)
            now = self._clock() if self._clock is not None else got[-1]
            rec = row.record_of(got)
            rec._exposed = False  # only update() hands it to outside code
            with in_transaction(conn):  # a claim takes its job's exclusive key in this transaction (keys.py)
                apply(rec, now)
            values = row.values(rec, prepare(rec, settle=True))
            conn.execute(Q["write"], values)
        written = (*(values[name] for name in row.COLUMNS), got[row.REVISION] + 1)
        if fresh:  # decoded afresh: nothing the caller's mutate holds is in it [JOB-M2]
            return self._holding(written)
        self._held.hold(written)
        return rec
