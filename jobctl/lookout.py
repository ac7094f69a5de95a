"""Hearing of a record's writes: one listener on a store's change notices for every keeper of a process."""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .errors import JobError

if TYPE_CHECKING:
    from .store.base import Notices

__all__ = ["Lookout", "NoticeSource"]


class NoticeSource(Protocol):
    """What a lookout needs of a store: its change notices (:meth:`jobctl.store.base.Store.notices`)."""

    def notices(self, *, news_only: bool = False) -> Notices | None: ...


class Lookout:
    """One listener on a store's change notices for every keeper of a process: each hears of its own record.

    A recall may leave its holder less than a second to stop and release
    [JOB-R3] (the grace less the keeper's margin), and a keeper that only
    read its record every ``check_every`` could find it too late -- later
    still where every read is a round trip to a server on a busy machine.
    So a lookout listens on :meth:`~jobctl.store.base.Store.notices` in a
    thread of its own and, for every record written, calls the look-again
    function of each keeper that follows that id (:meth:`jobctl.keeper.Keeper.look`), all
    of them when the notices say some were lost. The keeper then reads the
    record at once. A notice is only a hint: the keeper's own periodic read
    stays, so a notice lost without a word costs at most ``check_every``.

    One lookout serves a whole worker (one inotify descriptor, or one
    listening connection to PostgreSQL, however many jobs run, opened when
    the first keeper follows its record); a keeper given none starts its own
    for its attempt. The notices are read at most every ``settle`` seconds
    (the first after a quiet spell at once): a job that writes its checkpoint
    in a tight loop costs its keeper a read per settle, not one per write.
    Where the store gives no notices (a directory on another OS), or they
    cannot be opened, the lookout hears nothing and the keepers poll.

    The lookout asks for news only (a store that can tell leaves out the
    notices of its own writes: a keeper's renewals, its claim) and remembers
    when it last heard of each id, so a keeper that starts following after
    its claim reads its record then only if something was heard of it since
    the claim went out, or the lookout was not listening yet (:meth:`follow`).
    """

    #: Ids whose last notice a lookout remembers (the oldest forgotten first).
    REMEMBER = 4096

    def __init__(self, store: NoticeSource | None, *, settle: float = 0.1) -> None:
        """Listen on ``store``'s notices; ``None``: hear nothing (a worker told not to use notices)."""
        self.settle = max(0.0, float(settle))
        self._lock = threading.Lock()
        self._follow: dict[str, list[Callable[[], None]]] = {}
        # Opened for the first keeper that follows a record: a worker pass that runs nothing
        # opens none (closing an inotify descriptor waits on the kernel, 10 ms and more).
        self._store = store
        self._notices: Notices | None = None
        # When each id was last heard of, and since when nothing can have been missed
        # (the notices opened, or said some were lost): monotonic seconds.
        self._heard: dict[str, float] = {}
        self._since = math.inf
        self._thread: threading.Thread | None = None
        self._stop_r, self._stop_w = os.pipe()
        self._closed = False

    def _open(self) -> Notices | None:
        """The notices, opened on first use (lock held); None: there are none to hear."""
        store, self._store = self._store, None
        if store is not None:
            with contextlib.suppress(JobError, OSError):
                self._notices = store.notices(news_only=True)
                self._since = time.monotonic()
        return self._notices

    def follow(self, job_id: str, look: Callable[[], None], since: float | None = None) -> bool:
        """Call ``look`` whenever the record ``job_id`` may have been written, until :meth:`drop`.

        Returns whether the caller may have missed a write since ``since``
        (monotonic seconds: when its claim went out; None: unknown), and
        should read the record once now: something was heard of it since, or
        the lookout was not listening then. A lookout that hears nothing says
        False: its keepers read on their own clock.
        """
        with self._lock:
            if self._closed or self._open() is None:
                return False
            self._follow.setdefault(job_id, []).append(look)
            if self._thread is None:
                self._thread = threading.Thread(target=self._listen, name="jobctl lookout", daemon=True)
                self._thread.start()
            return since is None or since <= self._since or self._heard.get(job_id, -math.inf) >= since

    def _remember(self, ids: set[str], now: float) -> None:
        """When each of ``ids`` was heard of (lock held); past :attr:`REMEMBER` ids the oldest go."""
        heard = self._heard
        for job_id in ids:
            heard.pop(job_id, None)
            heard[job_id] = now
        while len(heard) > self.REMEMBER:
            # Forgotten: a follow from before the time it was last heard of reads once.
            self._since = max(self._since, heard.pop(next(iter(heard))))

    def drop(self, job_id: str, look: Callable[[], None]) -> None:
        with self._lock:
            looks = self._follow.get(job_id)
            if looks is not None and look in looks:
                looks.remove(look)
                if not looks:
                    del self._follow[job_id]

    def close(self) -> None:
        """Stop listening (the thread ends, the notices close); safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            with contextlib.suppress(OSError):
                os.write(self._stop_w, b"!")
        if thread is not None:
            # A read may be waiting on a server that does not answer: the thread is
            # a daemon and may be left to it, with what it still uses left open.
            thread.join(5.0)
            if thread.is_alive():
                return
        if self._notices is not None:
            self._notices.close()
        os.close(self._stop_r)
        os.close(self._stop_w)

    def _listen(self) -> None:
        notices = self._notices
        assert notices is not None
        while True:
            fd = notices.fileno()
            # Without a descriptor (a connection being made again) the read below retries it.
            waiting = [self._stop_r] if fd is None else [self._stop_r, fd]
            try:
                ready = select.select(waiting, [], [], 1.0 if fd is None else notices.recheck)[0]
            except (OSError, ValueError):
                ready = []  # the descriptor was replaced under the wait: read, which says so
            if self._stop_r in ready:
                return
            try:
                changed = notices.read(sync=False)  # woken by the socket: what it holds
            except (JobError, OSError):
                changed = None
            with self._lock:
                now = time.monotonic()
                if changed is None:
                    self._since = now
                    looks = [look for each in self._follow.values() for look in each]
                else:
                    written, removed = changed
                    looks = [look for job_id in written | removed for look in self._follow.get(job_id, ())]
                    self._remember(written | removed, now)
            for look in looks:
                look()
            # Let a burst of writes gather before the next read; a stop still ends the wait.
            if select.select([self._stop_r], [], [], self.settle)[0]:
                return
