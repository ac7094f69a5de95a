"""Where a run's output goes: each attempt's log, and the file a child leaves its result in.

Every directory below the store's is opened without following a link
(:mod:`jobctl.fsio`).
"""

from __future__ import annotations

import os
import stat
import threading
from typing import IO

from .. import fsio
from ..errors import JobError
from .command import RunStore

__all__ = [
    "log_dir",
    "log_path",
    "log_dir_open",
    "LogRoot",
    "log_files",
    "log_open",
    "log_append",
    "log_read",
    "log_size",
    "result_name",
    "result_path",
    "cut_short",
]


def log_dir(store: RunStore, job_id: str) -> str:
    """``<root>/work/.jobctl/logs/<id>``: the attempt logs of one job.

    Not ``work/<id>/...``: ``work/<id>`` is a *name* reserved for the job, and
    the job alone decides whether it becomes a file or a directory [JOB-W1].
    A job that writes its result to ``$JOB_WORK`` as a file would find a
    directory in its way if jobctl had made one there. ``.jobctl`` starts with
    a dot, which no job id can (ids are checked; minted ones are digits), so
    it can never be a job's reserved name either, and it stays under the
    store's ``work/`` on the same filesystem, moving with the store.
    """
    work = store.work_path(job_id)
    return os.path.join(os.path.dirname(work), ".jobctl", "logs", os.path.basename(work))


def log_path(store: RunStore, job_id: str, attempt: int) -> str:
    return os.path.join(log_dir(store, job_id), f"attempt-{attempt}.log")


def _log_dir_parts(store: RunStore, job_id: str) -> tuple[str, tuple[str, ...]]:
    """``(base, parts)``: the log directory as names below the directory that holds ``work/``.

    ``base`` is a file store's root (or, for a database store, the directory
    of this host's work directory); every part below it (``work``,
    ``.jobctl``, ``logs``, ``<id>``) is opened without following a link
    (:mod:`jobctl.fsio`): a link planted at any of them must not send a root
    worker's output, or ``jobctl logs``' reads, out of the store.
    """
    work = os.path.dirname(store.work_path(job_id))
    return os.path.dirname(work), (os.path.basename(work), ".jobctl", "logs", os.path.basename(log_dir(store, job_id)))


def log_dir_open(store: RunStore, job_id: str, create: bool = False) -> fsio.Dir | None:
    """The job's log directory, opened without following links; None when it does not exist."""
    base, parts = _log_dir_parts(store, job_id)
    try:
        if create:
            # The root of the walk is a directory the user named (a file store's
            # root) or this host's work directory of a database store, which may
            # not exist yet; below it nothing is followed.
            os.makedirs(base, mode=0o755, exist_ok=True)
        return fsio.open_dir(base, *parts, create=create)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fsio.refusal(log_dir(store, job_id), exc, job_id) from None


class LogRoot:
    """The store's ``work/.jobctl/logs``, opened once for every attempt one process runs (a worker's).

    Each attempt's log directory is then opened below it (made when missing):
    a ``mkdir`` and an ``open``, not the walk from the store's root through
    ``work`` and ``.jobctl`` that :func:`log_dir_open` makes for one job.
    Nothing is followed either way: the walk refuses a link at any part, and
    so does the open of a job's directory below it. Before each use an
    ``lstat`` of each part of the path checks it is still the directory held,
    reached through no link: one removed or moved away meanwhile is walked to
    again (and a link refused there), so no log lands where ``jobctl logs``
    does not look. Safe from several threads; :meth:`close`
    closes the directory.
    """

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._at: fsio.Dir | None = None
        self._id: tuple[int, int] | None = None  # (st_dev, st_ino) of the directory held

    def job_dir(self, job_id: str) -> fsio.Dir:
        """The job's log directory, made as needed; a link or a refusal on the way is a ``JobError``."""
        base, parts = _log_dir_parts(self._store, job_id)
        logs = os.path.join(base, *parts[:-1])
        try:
            with self._lock:  # held over the open below too: nobody closes the directory under it
                at = self._at
                if at is None or at.path != logs or _identity(base, parts[:-1]) != self._id:
                    self._close()
                    os.makedirs(base, mode=0o755, exist_ok=True)  # as log_dir_open: the root of the walk
                    at = self._at = fsio.open_dir(base, *parts[:-1], create=True)
                    st = os.fstat(at.fd)
                    self._id = (st.st_dev, st.st_ino)
                return fsio.open_below(at, parts[-1], create=True)
        except OSError as exc:
            raise fsio.refusal(log_dir(self._store, job_id), exc, job_id) from None

    def _close(self) -> None:
        if self._at is not None:
            self._at.close()
        self._at = self._id = None

    def close(self) -> None:
        with self._lock:
            self._close()


def _identity(base: str, parts: tuple[str, ...]) -> tuple[int, int] | None:
    """(device, inode) of the directory ``parts`` name below ``base`` now; None when one of them is not a directory.

    Each part is looked at with ``lstat``: a link at any of them (``work``,
    ``.jobctl``, ``logs``) is not a directory, so a ``logs`` moved away and
    linked back is walked to again, and refused there.
    """
    if not parts:
        return None
    path = base
    try:
        for part in parts:
            path = os.path.join(path, part)
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode):
                return None
    except OSError:
        return None
    return st.st_dev, st.st_ino


def log_files(store: RunStore, job_id: str) -> list[tuple[int, str]]:
    """``(attempt, path)`` of every attempt log of the job, in attempt order."""
    at = log_dir_open(store, job_id)
    if at is None:
        return []
    out = []
    with at:
        for entry in fsio.scan(at):
            name = entry.name
            if name.startswith("attempt-") and name.endswith(".log") and name[8:-4].isdigit():
                out.append((int(name[8:-4]), at.join(name)))
    out.sort()
    return out


def log_open(store: RunStore, job_id: str, attempt: int) -> IO[bytes]:
    """Attempt ``attempt``'s log, opened for appending (directories and file made as needed).

    A link or anything but a regular file at the log or any directory above
    it (below the root) is refused, never followed.
    """
    at = log_dir_open(store, job_id, create=True)
    assert at is not None  # created
    with at:
        return log_append(at, job_id, attempt)


def log_append(at: fsio.Dir, job_id: str, attempt: int) -> IO[bytes]:
    """Attempt ``attempt``'s log in the open directory ``at``, opened for appending (never through a link)."""
    name = f"attempt-{attempt}.log"
    fd = fsio.open_append(at, name, job_id)
    # open() only wraps the descriptor fsio opened; its name stays the path for the outcome.
    return open(at.join(name), "ab", opener=lambda _path, _flags: fd)


def log_read(store: RunStore, job_id: str, attempt: int, offset: int = 0) -> bytes | None:
    """What attempt ``attempt``'s log holds from ``offset`` on; None when there is no such log."""
    at = log_dir_open(store, job_id)
    if at is None:
        return None
    with at:
        return _log_read(at, job_id, attempt, offset)


def _log_read(at: fsio.Dir, job_id: str, attempt: int, offset: int = 0) -> bytes | None:
    fd = fsio.open_read(at, f"attempt-{attempt}.log", job_id)
    if fd is None:
        return None
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.pread(fd, 1 << 16, offset)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)
    finally:
        os.close(fd)


def _log_size(at: fsio.Dir, job_id: str, attempt: int) -> int | None:
    fd = fsio.open_read(at, f"attempt-{attempt}.log", job_id)
    if fd is None:
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def log_size(store: RunStore, job_id: str, attempt: int) -> int | None:
    """The size of attempt ``attempt``'s log in bytes; None when there is no such log."""
    at = log_dir_open(store, job_id)
    if at is None:
        return None
    with at:
        return _log_size(at, job_id, attempt)


def result_name(attempt: int, epoch: int) -> str:
    """The name of the file a child leaves its result in (``$JOB_RESULT``), beside its attempt's log.

    The epoch is in the name: an adopter runs the same attempt number as the
    holder it replaced, and must never store a result that holder left.
    """
    return f"attempt-{attempt}.epoch-{epoch}.result.json"


def result_path(store: RunStore, job_id: str, attempt: int, epoch: int) -> str:
    """``<root>/work/.jobctl/logs/<id>/attempt-<N>.epoch-<E>.result.json``: what ``$JOB_RESULT`` names."""
    return os.path.join(log_dir(store, job_id), result_name(attempt, epoch))


def cut_short(at: fsio.Dir, job_id: str, attempt: int) -> str | None:
    """Whether the attempt's log in ``at`` was cut short (its holder died): None if not, else what ends its last line.

    A closed log ends with a ``--- jobctl: <how it ended> ---`` line; an empty
    one was never started. Anything else -- output, or only the start line --
    was cut short. The answer is ``"\\n"`` when the last line is unfinished.
    """
    try:
        size = _log_size(at, job_id, attempt)
        if not size:
            return None
        tail = _log_read(at, job_id, attempt, max(0, size - 4096)) or b""
    except (OSError, JobError):
        return None
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    closed = last.startswith(b"--- jobctl: ") and last.endswith(b" ---") and b", started " not in last
    if closed and tail.endswith(b"\n"):
        return None
    return "" if tail.endswith(b"\n") else "\n"
