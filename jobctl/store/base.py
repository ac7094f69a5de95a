"""What every store promises: the operations of the job contract and their refusals.

Refusals are listed in the order they are checked. Every record handed in or
returned is the caller's own copy [JOB-M2]. ``now`` is the store's own clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import JobError
from ..record import Record

if TYPE_CHECKING:  # the summary cache loads only when a listing asks for it
    from ..recurring import Schedule
    from ..summary import Summary

__all__ = [
    "Store",
    "Notices",
    "Announcement",
    "Announcements",
    "Schedules",
    "RowLease",
    "LeaseSource",
    "Listing",
    "OpenListing",
    "Unreadable",
    "Refusals",
    "UNSET",
    "Skipped",
    "Records",
    "Verdicts",
    "Value",
]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: "Leave this field as it is" for optional arguments where None is a value.
UNSET: Any = _Unset()


#: Where a scan names the records it could not read: ``(id, verdict)`` pairs.
Unreadable = list[tuple[str, JobError]]

#: Where a sweep puts the refusals of the records it had to leave (their locks refused).
Refusals = list[JobError]

#: ``(id, verdict)`` pairs of jobs a pick passed over because it could not read them.
Skipped = list[tuple[str, JobError]]

#: Claimed records, oldest first (a name of its own: inside a store class, ``list`` is the method).
Records = list[Record]

#: Several steps' answers, each a record or the refusal of its own step (``claim_each``).
Verdicts = list[Record | JobError]


class Listing(list[Record]):
    """Records sorted by id, plus the ones that could not be read.

    ``unreadable`` holds ``(id, verdict)`` pairs: a broken record (``Invalid``)
    or one written for a newer reader (``UnknownSchema``). A listing never
    refuses as a whole, and never skips a record silently.
    """

    def __init__(
        self, records: list[Record] | None = None, unreadable: list[tuple[str, JobError]] | None = None
    ) -> None:
        super().__init__(records or [])
        self.unreadable: list[tuple[str, JobError]] = unreadable or []


class OpenListing(Listing):
    """The open (not terminal) records, sorted by id, and the state of every record.

    ``states`` maps the id of every readable record -- open or finished -- to
    its state, so that dependencies can be judged without the finished
    records themselves. ``unreadable`` is as for :class:`Listing`.
    """

    def __init__(
        self,
        records: list[Record] | None = None,
        unreadable: list[tuple[str, JobError]] | None = None,
        states: dict[str, str] | None = None,
    ) -> None:
        super().__init__(records, unreadable)
        self.states: dict[str, str] = states or {}
        #: Set by a store whose call read every record (nothing was vouched for by a cache), so that
        #: every finished one went to ``finished``: what :meth:`Store.scan` needs to read none again.
        self.whole: Any = None


class Value:
    """An immutable value of named fields: equal field by field to one of its own class, hashable, and shown by them.

    What ``@dataclass(frozen=True)`` gives, written out: generating one costs
    about half a millisecond and importing ``dataclasses`` (``inspect``,
    ``copy``) as much again, on the start-up of every command that imports a
    store (a piped ``submit`` is a cron job's latency). A subclass names its
    fields in ``__slots__`` and sets them in its ``__init__`` through
    :meth:`_init`; assigning or deleting a field afterwards raises
    ``AttributeError``.
    """

    __slots__: tuple[str, ...] = ()

    def _init(self, *values: Any) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of an immutable {self.__class__.__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of an immutable {self.__class__.__name__}")


class RowLease(Value):
    """Where a guardian process reads a lease kept in a database row: the store's URL, the job, the one query.

    ``query`` is the store's named read of the lease (``guardian_lease`` in
    ``queries.sql``): given an array of ids, it answers each one's epoch and
    the seconds its lease has left by the server's clock, and writes nothing.
    """

    __slots__ = ("url", "job_id", "query")
    url: str
    job_id: str
    query: str

    def __init__(self, url: str, job_id: str, query: str) -> None:
        self._init(url, job_id, query)


class Announcement(Value):
    """A running worker's word on what it handles: its lease owner, its kinds, until when (the store's clock)."""

    __slots__ = ("owner", "kinds", "expires_at")
    owner: str
    kinds: frozenset[str]
    expires_at: datetime

    def __init__(self, owner: str, kinds: frozenset[str], expires_at: datetime) -> None:
        self._init(owner, kinds, expires_at)


#: Schedules, by name (a name of its own: inside a store class, ``list`` is the method).
Schedules = list["Schedule"]

#: Live announcements, by owner (a name of its own: inside a store class, ``list`` is the method).
Announcements = list[Announcement]


#: What :meth:`Store.lease_source` gives a guardian: a record file's path, or a database row.
LeaseSource = str | RowLease


class Notices(Protocol):
    """A store's word that records changed: which ones, as soon as they did.

    What a backend offers for this differs (inotify on a directory, LISTEN/NOTIFY
    on PostgreSQL); ``watch``, ``wait`` and an idle worker see only this. A
    notice is a hint to read again, never a record: the store stays the truth.
    """

    #: The longest a reader may rely on these notices alone, in seconds: it looks
    #: at every record at least this often, as insurance against a notice lost
    #: without a word (a filesystem that drops them, a server that lost its queue).
    recheck: float

    def fileno(self) -> int | None:
        """A descriptor that becomes readable when a notice may be waiting; None while there is none.

        It may change between calls (a dropped connection is replaced), so a
        reader asks again before every wait. None: wait a poll interval instead.
        """
        ...

    def read(self, *, sync: bool = True) -> tuple[set[str], set[str]] | None:
        """``(written, removed)`` ids since the last read, without blocking.

        None when notices may have been lost since the last read (a queue
        overflowed, a connection dropped and was made again): the reader
        then looks at every record. With ``sync`` every write finished before
        the call is in the answer (PostgreSQL makes a round trip for it);
        without, what has arrived so far, for a reader that reads again soon
        anyway (a worker between runs). inotify answers both alike.
        """
        ...

    def close(self) -> None:
        """Stop listening; release the descriptor or connection."""
        ...


class Store(Protocol):
    """Every operation of the job contract, and the few facts a worker needs.

    The runner, the worker and its board each type against the narrower
    protocol of what they use (``RunStore``, ``WorkerStore``, ``BoardStore``).
    """

    root: str

    def now(self) -> datetime:
        """The store's own clock: every lease is judged by it [JOB-O4]."""
        ...

    def ids(self) -> list[str]:
        """Ids of every record, sorted by byte order, without reading them."""
        ...

    def work_path(self, job_id: str) -> str:
        """The job's scratch name; never created by the store [JOB-W1]."""
        ...

    def lease_source(self, job_id: str) -> LeaseSource | None:
        """Where a guardian process may read the job's lease on its own, without the store; or None.

        The file store: the record's path, when its times are on this
        machine's system clock, so a process that knows nothing of the store
        can compare ``lease.expires_at`` with its own ``time.time()`` (a look
        is a ``stat``). PostgreSQL: a :class:`RowLease`, one indexed read of
        the row's epoch and the time its lease has left by the server's clock.
        None where neither holds (a store given another clock): a guardian
        then knows only the lease's end its supervisor reports.
        """
        ...

    def submit(self, record: Record, *, wait: bool = True) -> str:
        """Write a new job; return its id (minted when ``record.id`` is empty).

        Refusals: an existing id -> ``Invalid``; a record that does not
        validate -> ``Invalid``/``UnknownSchema``. The state defaults to
        ``pending`` [JOB-S1]; the lease starts unset. With ``wait`` false,
        the id's lock is waited for :data:`jobctl.limits.LOCK_PATIENCE`
        seconds at most; still taken then (a writer of that id stopped in
        the middle), ``LockBusy`` and nothing written: a worker firing a
        schedule's slot passes over it, and is not frozen behind it.
        """
        ...

    def load(self, job_id: str) -> Record:
        """Read one record without locking. ``NotFound``, ``Invalid``, ``UnknownSchema``."""
        ...

    def list(self) -> Listing:
        """Every record, sorted by id, with the unreadable ones named."""
        ...

    def list_open(self, *, finished: Callable[[Any, Any], None] | None = None, briefly: bool = False) -> OpenListing:
        """The records not yet ended, sorted by id, with every record's state and the unreadable named.

        What picking and ``orphans`` need: a finished record never changes
        state again [JOB-T1], so a store may answer this without decoding
        them (the file store keeps a per-user cache of their summaries).
        Each finished record the call decodes all the same is handed to
        ``finished`` with what :meth:`scan` needs to know it again (the file
        store: the file's status), so that a listing need not read it twice;
        with ``briefly``, a store may hand its :class:`jobctl.summary.Summary`
        instead of the record, and, when ``finished`` has a ``many`` method,
        hand it a list of such summaries at once (``finished.many``), none of
        them with that status.
        """
        ...

    def scan(
        self,
        unreadable: Unreadable,
        *,
        summaries: bool = True,
        taken: Mapping[str, tuple[Summary, Any]] | None = None,
        opened: OpenListing | None = None,
    ) -> Iterator[Record | Summary]:
        """Every record sorted by id, one at a time, for output that starts before the end.

        With ``summaries``, a store may give a finished record as its
        :class:`jobctl.summary.Summary` (what a listing line shows) instead of
        decoding it; without, every record comes whole. The unreadable ones
        are appended to ``unreadable`` as they are met. The ids in ``taken``
        (what :meth:`list_open` handed ``finished``, with each one's summary)
        are the caller's already: they are left out. ``opened`` is that
        :meth:`list_open` call's answer: when it read every record
        (:attr:`OpenListing.whole`), a store may yield nothing more.
        """
        ...

    def claim(
        self,
        job_id: str,
        owner: str,
        ttl_seconds: float,
        *,
        vet: Callable[[Record, datetime], None] | None = None,
        wait: bool = True,
    ) -> Record:
        """Take the lease for ``ttl_seconds``; the epoch rises by one [JOB-L4].

        Refusals: blank owner -> ``Refused`` [JOB-O3]; ``NotFound``; the record
        moved since it was read -> ``LeaseHeld``; terminal -> ``Terminal``
        [JOB-T1]; held by another owner, or by this owner under a recall ->
        ``LeaseHeld`` [JOB-O1] [JOB-R5]. Everything but the lease and the
        state is kept as found [JOB-O5]; ``updated_at`` does not move.

        ``vet`` is handed the record as found under the lock, after those
        checks, with the store's time; it refuses the claim by raising, and
        nothing is written (``claim --next`` judges a record runnable again
        there). With ``wait`` false, the record's lock (or row lock) is
        waited for :data:`jobctl.limits.LOCK_PATIENCE` seconds at most, long
        enough for any write under way; still taken then, ``LockBusy`` (a
        ``LeaseHeld``). The contract's lock waits without end [JOB-L2];
        picking a job to claim does not, so one writer stopped in the middle
        of a write cannot hold every claim behind it.
        """
        ...

    def renew(self, job_id: str, epoch: int, ttl_seconds: float) -> Record:
        """Extend the lease (capped at a recall's ``until`` [JOB-R4]).

        ``StaleEpoch``, then ``LeaseExpired``. Allowed on terminal records [JOB-T6].
        """
        ...

    def release(self, job_id: str, epoch: int) -> Record:
        """Give the lease up: ``running`` becomes ``pending`` unless delegated [JOB-L6].

        ``Terminal`` [JOB-T5], ``StaleEpoch``, ``LeaseExpired``. A recall stays [JOB-R6].
        """
        ...

    def update(self, job_id: str, epoch: int, mutate: Callable[[Record], object]) -> Record:
        """Apply ``mutate`` to the record as found under the lock, as its holder.

        ``Terminal`` (judged as read) [JOB-T3], ``StaleEpoch`` [JOB-L1],
        ``LeaseExpired`` [JOB-L5], whatever ``mutate`` raises, then ``Invalid``
        when an immutable field moved [JOB-M1].
        """
        ...

    def orphans(self) -> Listing:
        """Records nobody holds that a sweep may adopt [JOB-I11] [JOB-I12] [JOB-T2]."""
        ...

    def claim_next(
        self,
        owner: str,
        ttl: float,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> Record | None:
        """Claim the first runnable job (of ``kinds``): the highest priority, then the oldest; None when none may start.

        Runnable as :func:`jobctl.schedule.runnable` says: an orphan whose
        dependencies are complete, whose not-before time has passed, not
        paused. How it is found is the backend's (a listing on a directory,
        an indexed ``SKIP LOCKED`` pick on PostgreSQL); a job another picker
        takes meanwhile is passed over. Jobs left out for unreadable
        scheduling data are named in ``skipped``, records that cannot be read
        at all in ``unreadable``, when lists are given.
        """
        ...

    def claim_some(
        self,
        owner: str,
        ttl: float,
        limit: int,
        kinds: Iterable[str] | None = None,
        *,
        skipped: Skipped | None = None,
        unreadable: Skipped | None = None,
    ) -> Records:
        """Claim up to ``limit`` runnable jobs (of ``kinds``) in pick order; ``[]`` when none may start.

        Pick order is :func:`jobctl.priority.pick_key`: higher priority first, then oldest first.

        :meth:`claim_next` for a worker with several free slots: one listing
        on a directory, one statement on PostgreSQL (a batch dequeue).
        ``Invalid`` for a ``limit`` below one.
        """
        ...

    def claim_each(self, job_ids: Sequence[str], owner: str, ttl_seconds: float) -> Verdicts:
        """Claim each job as ``claim(..., wait=False)`` would: a record or its refusal each, in order.

        The claims a worker's free slots make at once: one statement on
        PostgreSQL, one claim after another on a directory.
        """
        ...

    def finish_and_claim(
        self,
        job_id: str,
        epoch: int,
        state: str,
        *,
        error: str | None = None,
        next_id: str,
        owner: str,
        ttl_seconds: float,
    ) -> tuple[Record | JobError, Record | JobError]:
        """``finish`` one job and ``claim(next_id, ..., wait=False)``: each its own verdict (a record or a refusal).

        A worker's slot ending one job and taking the next: one round trip on
        PostgreSQL, one write after the other on a directory.
        """
        ...

    def load_bytes(self, job_id: str) -> bytes:
        """The record's stored bytes, exactly (``jobctl export``). ``NotFound``."""
        ...

    def import_bytes(self, data: bytes, expect: str | None = None, what: str = "the import") -> str:
        """Add a record from its exact bytes (``jobctl import``); as ``submit``'s refusals.

        With ``expect``, a record naming another id is ``Invalid`` (``what`` names who
        expected it), nothing written.
        """
        ...

    def set_intent(self, job_id: str, want: str, by: str) -> Record:
        """Record what somebody wants (run, pause, cancel); presents no epoch [JOB-I3]."""
        ...

    def recall(self, job_id: str, epoch: int, reason: str, by: str, grace: float) -> Record:
        """Demand the lease back within ``grace`` seconds [JOB-R1]..[JOB-R3]."""
        ...

    def progress(self, job_id: str, epoch: int, done: int, checkpoint: Any = UNSET) -> Record:
        """Record work done and, optionally, what a successor needs; as ``update``.

        A checkpoint or ``done`` that cannot be written is the mutation's own
        error: ``Invalid`` only after ``Terminal``, ``StaleEpoch`` and
        ``LeaseExpired`` (a :class:`jobctl.wire.JsonText` is parsed then too).
        """
        ...

    def finish(
        self,
        job_id: str,
        epoch: int,
        state: str,
        *,
        error: str | None = None,
        checkpoint: Any = UNSET,
        done: int | None = None,
    ) -> Record:
        """Set the state with error, checkpoint and done in the same write [JOB-T4]; as ``update``.

        A state word that is none, then content that cannot be written, are
        ``Invalid`` after the record's own verdicts, as for ``progress``.
        """
        ...

    def cancel(self, job_id: str, by: str, ttl_seconds: float = 15.0, reason: str = "") -> Record:
        """Ask for cancel, and cancel at once when nobody holds the job [JOB-S3] [JOB-S4].

        A job ended here says who asked and ``reason`` in its error; a held
        job (waiting for approval) is never made runnable on the way.
        """
        ...

    def sweep(self, job_id: str | None = None, refused: Refusals | None = None) -> int:
        """Remove stale staging temporaries; return how many.

        A record whose lock is refused (a link or an odd file at its lock's
        name) is skipped and the others swept. Its refusal is appended to
        ``refused`` when a list is given, so the caller still learns the
        count; without one, the first refusal is raised after the sweep.
        """
        ...

    def notices(self, *, news_only: bool = False) -> Notices | None:
        """Start listening for changes to the records: every write after this call is noticed.

        None where this store cannot tell (the reader polls). A reader opens
        its notices before its first read, so a write between the two is
        seen twice, never missed. Each call gives an independent listener
        the caller closes. With ``news_only``, a store that can tell leaves
        out the notices of the writes this very handle's holder steps made
        (claim, renew, progress, release, finish; PostgreSQL: each notice
        names the row's revision); the others, an intent or a recall made
        through this handle among them, are all heard.
        """
        ...

    def remove(self, job_id: str, before: Callable[[Record], bool] | None = None) -> bool:
        """Delete an ended job's record, checked ended under its lock; False when missing, unreadable or live.

        jobctl's only deletion (``jobctl gc``): a terminal record never
        changes again [JOB-T1], so nobody else can be writing it. ``before``
        is given the record as read there (ended) and may keep it (False);
        it removes what goes with it (its work directory, its logs) while a
        job of the same id can be neither submitted nor run. A database
        store asks it on the row it read just before its delete, which
        removes that row only as it was read.
        """
        ...

    def announce(self, owner: str, kinds: Iterable[str], ttl_seconds: float) -> None:
        """Say that the worker ``owner`` runs ``kinds`` for ``ttl_seconds`` from now, by the store's clock.

        It replaces that worker's last word, in one atomic write (a directory:
        a file of its own under ``work/.jobctl/workers/``, written as a record
        is; PostgreSQL: one row). A worker renews it while it loops and
        withdraws it when it stops; a worker killed outright leaves it to
        expire. Nothing here touches a job. ``Invalid`` for an odd file or a
        link at its name (never followed), ``Refused`` when it cannot be
        written (a PostgreSQL store whose schema predates the table:
        ``jobctl db migrate`` adds it).
        """
        ...

    def withdraw(self, owner: str) -> None:
        """Take back ``owner``'s announcement; nothing when it has none. Refusals as :meth:`announce`."""
        ...

    def announcements(self) -> Announcements:
        """The announcements not yet expired by the store's clock, sorted by owner.

        What cannot be read as one (garbage, a link, an odd file) is left
        out without a word: an announcement is a hint, never a record. A
        store that cannot keep them (an older PostgreSQL schema) answers ``[]``.
        """
        ...

    # -- recurring schedules (jobctl.recurring): kept beside the jobs, never a job ----------------

    def add_schedule(self, schedule: Schedule) -> None:
        """Keep a new schedule, in one atomic write; ``Exists`` when one of that name is there.

        A directory: a file of its own under ``work/.jobctl/schedules/``
        (0600, written as a record is, no link followed: an odd file or a
        link at its name is ``Invalid``); PostgreSQL: a row of
        ``jobctl_schedules``, ``Refused`` where the schema predates the table
        (``jobctl db migrate`` adds it).
        """
        ...

    def put_schedule(self, schedule: Schedule) -> str:
        """Keep ``schedule`` as declared, in one atomic write: ``"added"``, ``"updated"`` or ``"unchanged"``.

        None of that name: added, as :meth:`add_schedule` adds it. One with
        the same plan (:meth:`jobctl.recurring.Schedule.same_plan`): nothing
        is written. One with another plan: its ``every``, ``cron``, ``kind``,
        ``spec`` and ``by`` are replaced, while its ``created_at`` and
        ``fired`` stay, so a slot fired before is not fired again. What an
        application's :meth:`jobctl.Worker.every` and ``cron`` declare at each
        start; refused as :meth:`add_schedule` is.
        """
        ...

    def schedules(self, unreadable: Unreadable | None = None) -> Schedules:
        """Every schedule, sorted by name; the ones that cannot be read named in ``unreadable`` when given.

        A PostgreSQL store whose schema predates the table answers ``[]``.
        """
        ...

    def schedule(self, name: str) -> Schedule:
        """One schedule. ``NotFound``; ``Invalid`` when what is kept under its name cannot be read as one."""
        ...

    def remove_schedule(self, name: str) -> bool:
        """Delete a schedule; False when there was none. Its jobs stay; no worker fires it after this call."""
        ...

    def mark_fired(self, name: str, created_at: datetime, slot: datetime, *, wait: bool = True) -> bool:
        """Record that ``slot`` of the schedule ``name`` added at ``created_at`` was fired; atomically, never backwards.

        The kept ``fired`` only moves forward (an earlier slot changes
        nothing). False, nothing written, when that schedule is not there
        (removed, or removed and added again: another ``created_at``).
        ``wait`` as for :meth:`submit`: false, a schedule's lock held past
        :data:`jobctl.limits.LOCK_PATIENCE` is ``LockBusy``, nothing written.
        """
        ...
