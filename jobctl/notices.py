"""Learning that a store changed: inotify on a file store's ``jobs/`` directory (Linux).

Every conforming write of a record is a rename onto ``<id>.json`` [JOB-W3],
so a watch on the directory sees each one. :class:`Notices` is the file
store's answer to :meth:`jobctl.store.base.Store.notices`; where inotify is
missing (another OS) the store gives None and the caller polls; when the
kernel's queue overflowed, :meth:`Notices.read` says so and the caller looks
at everything again.

:class:`Changes` is the waiting half for ``watch`` and ``wait``, over any
store's notices: block until a record changed or a timeout passed.
"""

from __future__ import annotations

import contextlib
import os
import select
import struct
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store.base import Notices as StoreNotices
    from .store.base import Store

__all__ = ["Notices", "notices_for", "Changes"]

_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
# Flags of the watch itself, not events: never follow a link planted at the
# directory's name, and watch only a directory (a shared store is hostile ground).
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_MASK = _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF
_EVENT = struct.Struct("iIII")

#: How often a reader of inotify notices looks at every record anyway: insurance
#: against a filesystem that drops notices (a network mount written by another host).
RECHECK_SECONDS = 60.0


class Notices:
    """inotify on one directory: the names of record files replaced, written or removed since the last read."""

    recheck: float = RECHECK_SECONDS

    def __init__(self, directory: str) -> None:
        import ctypes  # deferred: a submit never listens

        # The process's own symbols, libc's among them (ctypes.util.find_library would run ldconfig).
        libc = ctypes.CDLL(None, use_errno=True)
        init = libc.inotify_init1
        init.argtypes = [ctypes.c_int]
        init.restype = ctypes.c_int
        add = libc.inotify_add_watch
        add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        add.restype = ctypes.c_int
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if add(fd, os.fsencode(directory), _MASK | _IN_ONLYDIR | _IN_DONT_FOLLOW) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch {directory}")
        self.fd: int = fd

    def fileno(self) -> int | None:
        return self.fd

    def read(self, *, sync: bool = True) -> tuple[set[str], set[str]] | None:
        """``(written, removed)`` ids since the last read; None when notices were lost (rescan).

        The kernel queues an event as the write happens, so ``sync`` changes nothing here.
        """
        written: set[str] = set()
        removed: set[str] = set()
        lost = False
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            off = 0
            while off + _EVENT.size <= len(buf):
                _wd, mask, _cookie, length = _EVENT.unpack_from(buf, off)
                off += _EVENT.size
                name = buf[off : off + length].rstrip(b"\0")
                off += length
                if mask & (_IN_Q_OVERFLOW | _IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF):
                    lost = True
                elif name.endswith(b".json") and not name.startswith(b"."):
                    job_id = os.fsdecode(name[:-5])
                    if mask & (_IN_DELETE | _IN_MOVED_FROM):
                        removed.add(job_id)
                        written.discard(job_id)
                    else:
                        written.add(job_id)
                        removed.discard(job_id)
        return None if lost else (written, removed)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def notices_for(directory: str) -> Notices | None:
    """Notices on a file store's ``jobs/`` directory on Linux; None elsewhere (the caller polls)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return Notices(directory)
    except (OSError, AttributeError):
        return None


class Changes:
    """Wait until a store's records change, or a timeout passes.

    With the store's notices (:meth:`jobctl.store.base.Store.notices`),
    :meth:`wait` returns as soon as a record was written, replaced or
    removed; without, it sleeps the whole timeout and reports a possible
    change (the caller looks again, as a poll does).

    With ``keep``, the ids the notices named are kept for :meth:`take`
    (``watch`` re-reads only those records); without, they are dropped as
    they are read.
    """

    def __init__(self, store: Store, *, keep: bool = False) -> None:
        self._notices: StoreNotices | None = store.notices()
        # With ``keep``, what the reads said, for take(): the last word on an id stands.
        self._keep = keep
        self._written: set[str] = set()
        self._removed: set[str] = set()
        self._lost = False

    @property
    def watching(self) -> bool:
        return self._notices is not None

    @property
    def recheck(self) -> float | None:
        """How long the notices may be relied on alone (:attr:`jobctl.store.base.Notices.recheck`); None without."""
        return None if self._notices is None else self._notices.recheck

    def wait(self, seconds: float) -> bool:
        """True when a record may have changed within ``seconds``; False when none did."""
        if self._notices is None:
            time.sleep(max(seconds, 0.0))
            return True
        deadline = time.monotonic() + max(seconds, 0.0)
        while True:
            changed = self._read()
            if changed is None or changed[0] or changed[1]:
                return True  # a record moved, or notices were lost: look again
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            fd = self._notices.fileno()
            if fd is None:
                time.sleep(left)  # nothing to wait on now (a connection being made again): read once more
                continue
            try:
                select.select([fd], [], [], left)
            except (OSError, ValueError):
                return True  # closed under us: let the caller look

    def take(self) -> tuple[set[str], set[str]] | None:
        """``(written, removed)`` ids since the last take, including what waits now (without blocking).

        What :meth:`wait` read meanwhile counts too (with ``keep``). None when
        notices may have been lost since (a queue overflowed, a connection was
        made again, a read failed), and always without notices or ``keep``: look at every record.
        """
        if self._notices is None or not self._keep:
            return None
        self._read()
        taken = None if self._lost else (self._written, self._removed)
        self._written, self._removed, self._lost = set(), set(), False
        return taken

    def _read(self) -> tuple[set[str], set[str]] | None:
        """One read of the notices (None: lost, or the read failed), kept for :meth:`take` with ``keep``."""
        assert self._notices is not None
        try:
            changed = self._notices.read()
        except OSError:
            changed = None
        if self._keep:
            if changed is None:
                self._lost = True  # the look at every record covers what was named so far
                self._written.clear()
                self._removed.clear()
            elif not self._lost:
                written, removed = changed
                # An id named both ways in one read is looked at again: reading it says which holds.
                gone = set(removed).difference(written)
                self._written.update(written)
                self._written.difference_update(gone)
                self._removed.update(gone)
                self._removed.difference_update(written)
        return changed

    def close(self) -> None:
        if self._notices is not None:
            self._notices.close()
            self._notices = None
