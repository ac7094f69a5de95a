"""What a worker knows of its store: which jobs are open, and which one to run next.

Picking the next job must not cost more as finished jobs pile up. Two facts
make that possible:

* a terminal record never changes state again [JOB-T1], so once a record is
  seen ``complete``, ``failed`` or ``cancelled`` the board keeps only its
  state (for dependency look-ups) and never reads it again;
* the board learns *which* records changed from the store's notices
  (:meth:`jobctl.store.base.Store.notices`: inotify on a directory's
  ``jobs/``, LISTEN/NOTIFY on PostgreSQL), so it re-reads only those. The open records are kept in memory in pick
  order (higher priority first, then by ``created_at``, then id: :func:`jobctl.priority.pick_key`), and
  choosing walks them from the front.

Time alone changes what is runnable (a lease lapses, a not-before time
passes) without any write, so the board re-evaluates its open records against
``now`` at every pick and tells the caller when the next such moment is.

Where a store gives no notices (a directory on another OS), or when notices
were lost (a queue overflowed, a connection dropped), the board rescans: it
lists the ids and re-reads every one that is not known terminal. It also
rescans as often as the notices ask (``recheck``, a minute), as insurance
against a notice lost without a word.

The board is advisory: the claim is the arbiter. A stale view costs at most a
refused claim (``lease_held``/``terminal``) and a re-read of that one record.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from .errors import JobError, NotFound
from .exclusive import exclusive_of, holds
from .priority import pick_key
from .record import TERMINAL, Record, held
from .schedule import Cycles, blocked_by, cycle_words, not_before
from .store.base import Notices, OpenListing
from .summary import States

__all__ = ["Board", "BoardStore", "Pick"]

UNREADABLE = "unreadable"


class BoardStore(Protocol):
    def ids(self) -> list[str]: ...
    def list_open(self) -> OpenListing: ...
    def load(self, job_id: str) -> Record: ...
    def now(self) -> datetime: ...
    def notices(self, *, news_only: bool = False) -> Notices | None: ...


@dataclass
class Pick:
    """The first runnable record in pick order (or None), the doomed ones, and when time alone may change the answer."""

    record: Record | None
    doomed: list[tuple[Record, str]]
    wake: datetime | None


# -- the board -------------------------------------------------------------------


class Board:
    """The open records of a store in pick order (priority, then age), and the states of all.

    ``kinds`` restricts what :meth:`pick` offers (None: every kind).
    ``notices=False`` forces the rescanning mode (the benchmark compares both).
    """

    def __init__(self, store: BoardStore, kinds: Iterable[str] | None = None, *, notices: bool = True) -> None:
        self.store = store
        self.kinds = None if kinds is None else frozenset(kinds)
        self.states: dict[str, str] = {}
        self.open: dict[str, Record] = {}
        #: Records that cannot be read now, and why (their state is ``unreadable``).
        self.unreadable: dict[str, JobError] = {}
        # pick_key of the open records: higher priority first, then oldest first, to the microsecond
        # (ids minted in one millisecond sort by their random part). created_at never moves [JOB-M1];
        # a priority may (a holder's update rewrites its extensions), so each record's key is kept.
        self._order: list[tuple[int, datetime, str]] = []
        self._keys: dict[str, tuple[int, datetime, str]] = {}
        # Notices first, then the scan: a write between the two is seen twice, never missed.
        self._notices = store.notices() if notices else None
        self._scanned = 0.0
        self.rescans = 0
        self.reads = 0
        self._start()

    @property
    def watching(self) -> bool:
        """True while the board learns of changes from notices rather than by rescanning."""
        return self._notices is not None

    def fileno(self) -> int | None:
        """A descriptor that becomes readable when the store changes (None without notices)."""
        return None if self._notices is None else self._notices.fileno()

    def close(self) -> None:
        if self._notices is not None:
            self._notices.close()
            self._notices = None

    # -- keeping up ------------------------------------------------------------

    def refresh(self, *, force: bool = False, max_age: float = 0.0, skip: Collection[str] = ()) -> None:
        """Catch up with the store.

        With notices: re-read the records they name (rescan when they were
        lost, and every ``recheck`` of theirs). Without: rescan when ``force`` or when the last scan is
        older than ``max_age`` seconds; in between, the caller's own writes
        reach the view through :meth:`note` and :meth:`reload`. Notices about
        the ids in ``skip`` (jobs the caller is running) are not followed.
        """
        age = time.monotonic() - self._scanned
        if self._notices is None:
            if force or age >= max_age:
                self.rescan()
            return
        if force or age > self._notices.recheck:
            self.rescan()
            return
        # What has arrived: a write still on its way is read at the next refresh, and a pick from a
        # view behind the store costs at most a claim refused (the claim judges the record as it is).
        changed = self._notices.read(sync=False)
        if changed is None:
            self.rescan()
            return
        written, removed = changed
        for job_id in removed:
            self.reload(job_id)  # gone, or replaced again since: the file decides
        for job_id in written:
            if job_id in skip or self.states.get(job_id) in TERMINAL:
                continue  # ours (its run reports the end), or final: nothing to learn [JOB-T1]
            self.reload(job_id)

    def _start(self) -> None:
        """The first scan: the open records, and the states of the finished ones without reading them.

        ``list_open`` is the store's own way to that answer (the file store's
        summary cache stats a finished record instead of decoding it, and
        builds the finished ones' states only when asked) [JOB-T1]; the board
        asks for them only when a look-up needs one (:class:`jobctl.summary.States`).
        """
        self._scanned = time.monotonic()
        self.rescans += 1
        listing = self.store.list_open()
        self.reads += len(listing) + len(listing.unreadable)
        known = listing.states

        def finished() -> dict[str, str]:
            return {job_id: state for job_id, state in known.items() if state in TERMINAL}

        # The finished records' states only when a look-up needs one (a dependency, a notice
        # about an id not read now, a rescan): a pick among jobs that wait for nothing never does,
        # and copying 100,000 of them would cost more than the rest of the start [JOB-T1].
        # What is set below (and later) wins over them, as a filled dict would have it.
        self.states = States(finished)
        for job_id, exc in listing.unreadable:
            self.states[job_id] = UNREADABLE
            self.unreadable[job_id] = exc
        for rec in listing:
            self.note(rec)

    def rescan(self) -> None:
        """List the ids; read every one not known terminal; forget the ones that are gone."""
        self._scanned = time.monotonic()
        self.rescans += 1
        present = self.store.ids()
        seen = set(present)
        for job_id in [j for j in self.states if j not in seen]:
            self._forget(job_id)
        for job_id in present:
            state = self.states.get(job_id)
            if state is None or state == UNREADABLE or job_id in self.open:
                self.reload(job_id)

    def reload(self, job_id: str) -> None:
        """Re-read one record (a terminal one only if it reappeared or was never read)."""
        self.reads += 1
        try:
            rec = self.store.load(job_id)
        except NotFound:
            self._forget(job_id)
            return
        except JobError as exc:
            # Broken, or written for a newer reader [JOB-D7]: never offered,
            # and a job waiting for it waits rather than being cancelled.
            self._close(job_id)
            self.states[job_id] = UNREADABLE
            self.unreadable[job_id] = exc
            return
        self.unreadable.pop(job_id, None)
        self.note(rec)

    def settle(self, job_id: str, state: str) -> None:
        """Record that ``job_id`` ended in the terminal ``state`` (its holder's final write said so)."""
        self._close(job_id)
        self.states[job_id] = state

    def note(self, rec: Record) -> None:
        """Take ``rec`` as the latest version of its record (after one of our own writes, say)."""
        job_id = rec.id
        self.states[job_id] = rec.state
        if rec.terminal:
            self._close(job_id)
            return
        key = pick_key(rec)
        if self._keys.get(job_id) != key:
            self._unorder(job_id)
            bisect.insort(self._order, key)
            self._keys[job_id] = key
        self.open[job_id] = rec

    def _close(self, job_id: str) -> None:
        self.open.pop(job_id, None)
        self._unorder(job_id)

    def _unorder(self, job_id: str) -> None:
        key = self._keys.pop(job_id, None)
        if key is not None:
            i = bisect.bisect_left(self._order, key)
            if i < len(self._order) and self._order[i] == key:
                del self._order[i]

    def _forget(self, job_id: str) -> None:
        self._close(job_id)
        self.states.pop(job_id, None)
        self.unreadable.pop(job_id, None)

    # -- choosing ----------------------------------------------------------------

    def _cycles(self, now: datetime) -> Cycles:
        """The cycles of dependencies among the open records at ``now`` (worked out when first asked)."""

        def waits(rec: Record) -> bool:  # one held or transferred may end all the same
            return rec.state != "transferred" and not held(rec.lease, now)

        return Cycles(self.open, waits)

    def _judge(self, rec: Record, now: datetime, cycles: Cycles | None = None) -> tuple[str, str, datetime | None]:
        """``("run" | "doomed" | "", detail, wake)`` for one open record at ``now``.

        With ``cycles``, a record that waits for a dependency still open is
        doomed when it waits for itself through them: no job of its cycle can
        ever start.
        """
        if self.kinds is not None and rec.kind not in self.kinds:
            return "", "", None
        if rec.state == "transferred":
            return "", "", None
        if held(rec.lease, now):
            return "", "", rec.lease.expires_at
        try:
            why, detail = blocked_by(rec, self.states, now)
        except JobError as exc:
            return "doomed", f"its scheduling metadata is unreadable: {exc.message}", None
        if why == "doomed":
            return "doomed", detail, None
        if why == "waiting":
            # A dependency still open (a not-before time waits for none: all are complete, none open).
            path = None if cycles is None else cycles.through(rec.id)
            if path is not None:
                return "doomed", f"waits for itself: {cycle_words(path)}", None
            when = not_before(rec)
            return "", detail, when if when is not None and when > now else None
        if why == "held" and rec.state != "running":
            return "", detail, None
        # Paused but still "running" under a dead owner is adopted so that it
        # can be released properly [JOB-I12]; the run checks the intent first.
        return "run", "", None

    def pick(
        self,
        now: datetime,
        exclude: Iterable[str] = (),
        only: set[str] | None = None,
        blocked: Callable[[Record], bool] | None = None,
    ) -> Pick:
        """The first open record in pick order (priority, then age) a worker may claim now.

        Runnable: not held, not ``transferred``, dependencies complete,
        not-before passed, not paused (an orphan [JOB-I11] [JOB-I12]), of a
        wanted kind, not in ``exclude``, and in ``only`` when given. On the
        way, records whose dependencies ended ``failed``/``cancelled`` or are
        missing, or that wait for themselves through their dependencies (a
        cycle: :class:`jobctl.schedule.Cycles`), are collected as doomed. ``wake`` is the earliest moment a
        lease lapses or a not-before time passes among the records passed over.
        A record whose exclusive key another open job holds (as the view
        shows it) is passed over until that lease's end, and so is one that
        ``blocked`` says this worker may not take now (its ``--limit``). The
        claim has the last word on a key (:mod:`jobctl.exclusive`).
        """
        skip = exclude if isinstance(exclude, (set, frozenset, dict)) else set(exclude)
        doomed: list[tuple[Record, str]] = []
        wake: datetime | None = None
        keys: dict[str, Record] | None = None
        cycles = self._cycles(now)
        for *_, job_id in self._order:
            if job_id in skip or (only is not None and job_id not in only):
                continue
            rec = self.open[job_id]
            verdict, detail, when = self._judge(rec, now, cycles)
            if verdict == "run":
                key = exclusive_of(rec)
                holder = None
                if key is not None:
                    keys = self._held_keys(now) if keys is None else keys
                    holder = keys.get(key)
                if holder is not None and holder.id != job_id:
                    until = holder.lease.expires_at
                    wake = until if until is not None and (wake is None or until < wake) else wake
                    continue
                if blocked is not None and blocked(rec):
                    continue
                return Pick(rec, doomed, wake)
            if verdict == "doomed":
                doomed.append((rec, detail))
            elif when is not None and (wake is None or when < wake):
                wake = when
        return Pick(None, doomed, wake)

    def _held_keys(self, now: datetime) -> dict[str, Record]:
        """The exclusive keys the open jobs in view hold at ``now``, each with its holder."""
        out: dict[str, Record] = {}
        for rec in self.open.values():
            key = exclusive_of(rec)
            if key is not None and holds(rec, key, now):
                out[key] = rec
        return out

    def survey_doomed(self, now: datetime) -> list[tuple[Record, str]]:
        """Every open record whose dependencies can no longer complete (or wait for it: a cycle), with the reason."""
        out = []
        cycles = self._cycles(now)
        for *_, job_id in self._order:
            verdict, detail, _ = self._judge(self.open[job_id], now, cycles)
            if verdict == "doomed":
                out.append((self.open[job_id], detail))
        return out

    def runnable_ids(self, now: datetime) -> list[str]:
        """Every id :meth:`pick` would offer now, in pick order (``--once`` takes this snapshot)."""
        return [job_id for *_, job_id in self._order if self._judge(self.open[job_id], now)[0] == "run"]
