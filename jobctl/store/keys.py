"""Exclusive keys kept in a directory store: a lock file and a holder file a key.

``<root>/work/.jobctl/exclusive/<digest>.json`` names the job that holds
the key and the epoch it claimed it at, ``{"key": ..., "job": ..., "epoch": N}``;
``<digest>.json.lock`` beside it is the key's lock (``flock``, 0600, never
removed, as a record's is [JOB-L3]). The digest is of the key, so no key
names a path. A claim of a job with a key takes that lock under the job's
own lock (a record's lock first, then a key's: nothing takes them the other
way round), reads the holder, judges it with :func:`jobctl.exclusive.holds`
on its record as it stands, writes itself as the holder (a staged file,
``fsync``, ``rename``) and keeps the key's lock until the job's record is
written: a second claimer of the key waits for the first one's record, then
sees it running. Nothing is opened by following a link (:mod:`jobctl.fsio`).
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import datetime
from typing import Protocol

from .. import fsio, lock
from ..errors import JobError
from ..exclusive import holds, key_held
from ..record import Record

__all__ = ["FileKeys", "KEYS", "key_file"]

#: The directory of exclusive keys, as names below a store's root.
KEYS = ("work", ".jobctl", "exclusive")

#: The most bytes a holder file may have: a key and an id fill far less.
MOST_BYTES = 4096


def key_file(key: str) -> str:
    """The holder file of ``key``: a digest, so no key (``a/b``, ``..``) names a path."""
    import hashlib  # here: it loads OpenSSL, which a claim of a job without a key must not pay for

    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40] + ".json"


class _Loader(Protocol):
    root: str

    def load(self, job_id: str) -> Record: ...


class FileKeys:
    """The keys one claim takes (:class:`jobctl.exclusive.Keys`); their locks are let go by :meth:`close`."""

    def __init__(self, store: _Loader, wait: bool) -> None:
        self._store = store
        self._wait = wait
        self._held = ExitStack()

    def __enter__(self) -> FileKeys:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Let go of every key's lock this claim took (after its record was written, or refused)."""
        self._held.close()

    def take(self, key: str, rec: Record, now: datetime) -> None:
        name = key_file(key)
        at = self._held.enter_context(fsio.open_dir(self._store.root, *KEYS, create=True, mode=0o700))
        self._held.enter_context(lock.hold(at, name, rec.id, self._wait))
        holder = _holder(at, name, key)
        if holder is not None and holder[0] != rec.id:
            job, _epoch = holder
            try:
                found = self._store.load(job)
            except JobError:
                found = None  # removed (gc), or unreadable: no job of ours is running it
            if found is not None and holds(found, key, now):
                raise key_held(rec.id, key, found)
        body = {"key": key, "job": rec.id, "epoch": rec.lease.epoch}
        import json  # where used: its import is ~1.2 ms of every start-up

        data = json.dumps(body, ensure_ascii=True).encode()
        odd = fsio.odd_at(at, name, "an exclusive key's holder (a regular file)")
        if odd is not None:
            raise odd
        tmp = lock.stage(at, name, data, rec.id)
        try:
            fsio.replace(at, tmp, name)
        except OSError as exc:
            fsio.unlink(at, tmp)
            raise fsio.refusal(at.join(name), exc, rec.id, doing="write") from None
        fsio.fsync_dir(at)


def _holder(at: fsio.Dir, name: str, key: str) -> tuple[str, int] | None:
    """``(job, epoch)`` the holder file names, or None (no holder yet, or a file that is none: nobody's word).

    A link or odd file at its name is refused (:func:`jobctl.fsio.read_file`), never followed.
    """
    data = fsio.read_file(at, name, limit=MOST_BYTES)
    if data is None:
        return None
    import json  # where used: its import is ~1.2 ms of every start-up

    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
        return None
    if not isinstance(obj, dict) or obj.get("key") != key:
        return None
    job, epoch = obj.get("job"), obj.get("epoch")
    if not isinstance(job, str) or isinstance(epoch, bool) or not isinstance(epoch, int):
        return None
    return job, epoch
