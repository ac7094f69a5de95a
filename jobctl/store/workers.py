"""What running workers have said they handle, kept in a directory store: a small file a worker.

``<root>/work/.jobctl/workers/<name>.json``: ``.jobctl`` under ``work/`` is
jobctl's own (no job id starts with a dot, and upstream readers look at
``jobs/`` alone), beside the attempt logs. Each file is one worker's word,
``{"owner": ..., "kinds": [...], "expires_at": ...}``, named by a digest of
its owner so that an owner string never becomes a path. It is written as a
record is -- a fresh temporary file (0600), ``fsync``, ``rename`` -- and
nothing is ever opened by following a link (:mod:`jobctl.fsio`): a link or
odd file at a worker's own name is refused, never replaced or followed, and
one among the others is passed over by a reader, as is any file that is not
a well-formed announcement under its own name.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from datetime import datetime, timedelta

from .. import fsio, lock
from ..errors import Invalid, JobError
from ..record import format_time, parse_time
from .base import Announcement

__all__ = ["WorkerFiles", "WORKERS", "file_name"]

#: The directory of announcements, as names below a store's root.
WORKERS = ("work", ".jobctl", "workers")

#: The most bytes an announcement may have: a worker's kinds fill far less.
MOST_BYTES = 64 << 10

#: An announcement expired longer ago than this (or a temporary file left this long) is removed by
#: the next worker that starts: nobody renews it any more. A worker that wakes after longer than
#: this (stopped, say) writes its word again at its next renewal.
PRUNE_AFTER = 60.0


def file_name(owner: str) -> str:
    """The file of ``owner``'s announcement: a digest, so no owner (``a/b@host``) names a path."""
    import hashlib  # here: it loads OpenSSL, which a command that reads no word must not pay for

    return hashlib.sha256(owner.encode("utf-8", "surrogatepass")).hexdigest()[:32] + ".json"


def _parsed(data: bytes, name: str) -> Announcement | None:
    """The announcement ``data`` holds, or None when it is not one (or not under its owner's name)."""
    import json  # where used: its import is ~1.2 ms of every start-up

    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
        return None
    if not isinstance(obj, dict):
        return None
    owner, kinds, expires = obj.get("owner"), obj.get("kinds"), obj.get("expires_at")
    if not isinstance(owner, str) or not owner or file_name(owner) != name:
        return None
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        return None
    try:
        when = parse_time(expires, "expires_at")
    except JobError:
        return None
    return None if when is None else Announcement(owner, frozenset(kinds), when)


class WorkerFiles:
    """The :class:`jobctl.store.base.Store` announcement calls of the directory store (a mixin)."""

    root: str

    def now(self) -> datetime:
        raise NotImplementedError  # the store's own clock

    def _workers(self, create: bool) -> fsio.Dir:
        return fsio.open_dir(self.root, *WORKERS, create=create, mode=0o700)

    def announce(self, owner: str, kinds: Iterable[str], ttl_seconds: float) -> None:
        if not owner:
            raise Invalid("a worker's announcement names its owner")
        now = self.now()
        until = format_time(now + timedelta(seconds=ttl_seconds))
        body = {"owner": owner, "kinds": sorted(set(kinds)), "expires_at": until}
        import json  # where used: its import is ~1.2 ms of every start-up

        data = json.dumps(body, ensure_ascii=True).encode()
        name = file_name(owner)
        with self._workers(create=True) as at:
            odd = fsio.odd_at(at, name, "a worker's announcement (a regular file)")
            if odd is not None:
                raise odd
            first = not fsio.exists(at, name)
            tmp = lock.stage(at, name, data)
            try:
                fsio.replace(at, tmp, name)
            except OSError as exc:
                fsio.unlink(at, tmp)
                raise fsio.refusal(at.join(name), exc, doing="write") from None
            fsio.fsync_dir(at)
            if first:  # a worker starting: the words of workers long gone go
                _prune(at, now)

    def withdraw(self, owner: str) -> None:
        try:
            at = self._workers(create=False)
        except FileNotFoundError:
            return
        with at:
            if fsio.unlink(at, file_name(owner)):  # a link there is removed itself, never its target
                fsio.fsync_dir(at)

    def announcements(self) -> list[Announcement]:
        try:
            at = self._workers(create=False)
        except (FileNotFoundError, JobError, OSError):  # none yet, or a link or odd file in its place
            return []
        now = self.now()
        out: list[Announcement] = []
        with at:
            for entry in fsio.scan(at):
                got = _read(at, entry.name)
                if got is not None and got.expires_at > now:
                    out.append(got)
        out.sort(key=lambda a: a.owner)
        return out


def _read(at: fsio.Dir, name: str) -> Announcement | None:
    if not name.endswith(".json"):
        return None
    try:
        data = fsio.read_file(at, name, limit=MOST_BYTES)
    except (JobError, OSError):  # a link, a FIFO, a directory, too big, unreadable: not an announcement
        return None
    return None if data is None else _parsed(data, name)


def _prune(at: fsio.Dir, now: datetime) -> None:
    """Remove announcements expired over :data:`PRUNE_AFTER` ago and temporaries left that long (killed writers)."""
    long_ago = now - timedelta(seconds=PRUNE_AFTER)
    for entry in list(fsio.scan(at)):
        name = entry.name
        try:
            if name.endswith(".tmp"):
                info = os.stat(name, dir_fd=at.fd, follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and time.time() - info.st_mtime > PRUNE_AFTER:
                    fsio.unlink(at, name)
                continue
            got = _read(at, name)
            if got is not None and got.expires_at < long_ago:
                fsio.unlink(at, name)
        except OSError:
            continue  # gone meanwhile, or not ours to remove: the next start looks again
