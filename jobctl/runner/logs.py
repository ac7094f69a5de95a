"""Where a run's output goes: each attempt's log, and the file a child leaves its result in.

Every directory below the store's is opened without following a link
(:mod:`jobctl.fsio`).
"""

from __future__ import annotations

import os
import re
import stat
import threading
from typing import IO

from .. import fsio
from ..errors import JobError
from .command import RunStore

__all__ = [
    "logs_dir",
    "log_dir",
    "log_name",
    "log_path",
    "logs_open",
    "log_dir_open",
    "LogRoot",
    "log_files",
    "log_open",
    "log_append",
    "log_read",
    "log_size",
    "LogNames",
    "result_name",
    "result_path",
    "cut_short",
]

# A job's files in logs/: its id, then what they are. The id is whatever precedes the suffix (ids may hold
# dots, never a slash); the suffix is matched at the end, so a name says its job whatever the id holds.
_FLAT = re.compile(r"(.+)\.attempt-([0-9]+)(?:\.log|\.[0-9]+\.result)\Z", re.DOTALL)

#: Beyond this many attempts a job's logs are found by reading ``logs/`` rather than by trying each name.
PROBED = 64


def logs_dir(store: RunStore, job_id: str) -> str:
    """``<root>/work/.jobctl/logs``: the attempt logs of every job, each ``<id>.attempt-<N>.log``.

    Not ``work/<id>/...``: ``work/<id>`` is a *name* reserved for the job, and
    the job alone decides whether it becomes a file or a directory [JOB-W1].
    A job that writes its result to ``$JOB_WORK`` as a file would find a
    directory in its way if jobctl had made one there. ``.jobctl`` starts with
    a dot, which no job id can (ids are checked; minted ones are digits), so
    it can never be a job's reserved name either, and it stays under the
    store's ``work/`` on the same filesystem, moving with the store.

    One directory for every job, no directory a job: creating a directory
    costs an inode (and a block), which is as dear as a record's write on a
    file system that scans recently freed inodes for each new one.
    """
    work = store.work_path(job_id)
    return os.path.join(os.path.dirname(work), ".jobctl", "logs")


def log_dir(store: RunStore, job_id: str) -> str:
    """``<root>/work/.jobctl/logs/<id>``: where older versions kept a job's logs (``attempt-<N>.log``).

    Read (and removed by ``gc``), never written: a store written before the
    logs became one directory keeps its logs readable.
    """
    return os.path.join(logs_dir(store, job_id), os.path.basename(store.work_path(job_id)))


def log_name(job_id: str, attempt: int) -> str:
    """``<id>.attempt-<N>.log``: the name of attempt ``attempt``'s log in :func:`logs_dir`."""
    return f"{job_id}.attempt-{attempt}.log"


def log_path(store: RunStore, job_id: str, attempt: int) -> str:
    return os.path.join(logs_dir(store, job_id), log_name(job_id, attempt))


def _logs_parts(store: RunStore, job_id: str) -> tuple[str, tuple[str, ...]]:
    """``(base, parts)``: the logs directory as names below the directory that holds ``work/``.

    ``base`` is a file store's root (or, for a database store, the directory
    of this host's work directory); every part below it (``work``,
    ``.jobctl``, ``logs``) is opened without following a link
    (:mod:`jobctl.fsio`): a link planted at any of them must not send a root
    worker's output, or ``jobctl logs``' reads, out of the store.
    """
    work = os.path.dirname(store.work_path(job_id))
    return os.path.dirname(work), (os.path.basename(work), ".jobctl", "logs")


def logs_open(store: RunStore, job_id: str, create: bool = False) -> fsio.Dir | None:
    """The logs directory, opened without following links; None when it does not exist."""
    base, parts = _logs_parts(store, job_id)
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
        raise fsio.refusal(logs_dir(store, job_id), exc, job_id) from None


def log_dir_open(store: RunStore, job_id: str) -> fsio.Dir | None:
    """The job's directory of the older layout (:func:`log_dir`), opened without following links; None if none."""
    base, parts = _logs_parts(store, job_id)
    try:
        return fsio.open_dir(base, *parts, os.path.basename(store.work_path(job_id)))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fsio.refusal(log_dir(store, job_id), exc, job_id) from None


class LogRoot:
    """The store's ``work/.jobctl/logs``, opened once for every attempt one process runs (a worker's).

    Each attempt's log and result file are then made in it by name: no walk
    from the store's root through ``work`` and ``.jobctl`` as
    :func:`logs_open` makes. Nothing is followed either way: the walk refuses
    a link at any part. Before each use an ``lstat`` of each part of the path
    checks it is still the directory held, reached through no link: one
    removed or moved away meanwhile is walked to again (and a link refused
    there), so no log lands where ``jobctl logs`` does not look. Safe from
    several threads; :meth:`close` closes the directory.
    """

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._at: fsio.Dir | None = None
        self._id: tuple[int, int] | None = None  # (st_dev, st_ino) of the directory held

    def dir(self, job_id: str) -> fsio.Dir:
        """The logs directory for one attempt of ``job_id`` (its own descriptor: the caller closes it).

        Made as needed; a link or a refusal on the way is a ``JobError``.
        """
        base, parts = _logs_parts(self._store, job_id)
        logs = os.path.join(base, *parts)
        try:
            with self._lock:  # held over the dup below too: nobody closes the directory under it
                at = self._at
                if at is None or at.path != logs or _identity(base, parts) != self._id:
                    self._close()
                    os.makedirs(base, mode=0o755, exist_ok=True)  # as logs_open: the root of the walk
                    at = self._at = fsio.open_dir(base, *parts, create=True)
                    st = os.fstat(at.fd)
                    self._id = (st.st_dev, st.st_ino)
                return fsio.Dir(os.dup(at.fd), at.path)
        except OSError as exc:
            raise fsio.refusal(logs_dir(self._store, job_id), exc, job_id) from None

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


def _present(at: fsio.Dir, name: str) -> bool:
    """Whether ``name`` is in ``at`` (as anything: the reader refuses what is not a regular file)."""
    try:
        os.stat(name, dir_fd=at.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    return True


def _attempts_known(store: RunStore, job_id: str) -> int:
    """How many attempts the job's record says have started (0 when it cannot be read)."""
    from ..schedule import shown_attempt  # the record's retry bookkeeping is the schedule's to read

    try:
        return shown_attempt(store.load(job_id))
    except (JobError, OSError):
        return 0


def log_files(store: RunStore, job_id: str) -> list[tuple[int, str]]:
    """``(attempt, path)`` of every attempt log of the job, in attempt order.

    The logs in ``logs/`` are found by name: each attempt up to the one the
    record names, and on while there are more (an attempt under way beyond
    the record read); past :data:`PROBED` attempts, by reading ``logs/``. A
    log of the older layout (``logs/<id>/attempt-<N>.log``) is listed when
    no log of that attempt is in ``logs/``.
    """
    found: dict[int, str] = {}
    at = logs_open(store, job_id)
    if at is not None:
        with at:
            known = _attempts_known(store, job_id)
            if known > PROBED:
                for entry in fsio.scan(at):
                    m = _FLAT.match(entry.name)
                    if m is not None and m.group(1) == job_id and entry.name.endswith(".log"):
                        found[int(m.group(2))] = at.join(entry.name)
            else:
                attempt = 1
                while True:
                    name = log_name(job_id, attempt)
                    if _present(at, name):
                        found[attempt] = at.join(name)
                    elif attempt >= known:
                        break
                    attempt += 1
    old = log_dir_open(store, job_id)
    if old is not None:
        with old:
            for entry in fsio.scan(old):
                name = entry.name
                if name.startswith("attempt-") and name.endswith(".log") and name[8:-4].isdigit():
                    found.setdefault(int(name[8:-4]), old.join(name))
    return sorted(found.items())


def log_open(store: RunStore, job_id: str, attempt: int) -> IO[bytes]:
    """Attempt ``attempt``'s log, opened for appending (directories and file made as needed).

    A link or anything but a regular file at the log or any directory above
    it (below the root) is refused, never followed.
    """
    at = logs_open(store, job_id, create=True)
    assert at is not None  # created
    with at:
        return log_append(at, job_id, attempt)


def log_append(at: fsio.Dir, job_id: str, attempt: int) -> IO[bytes]:
    """Attempt ``attempt``'s log in the open logs directory ``at``, opened for appending (never through a link)."""
    name = log_name(job_id, attempt)
    fd = fsio.open_append(at, name, job_id)
    # open() only wraps the descriptor fsio opened; its name stays the path for the outcome.
    return open(at.join(name), "ab", opener=lambda _path, _flags: fd)


def _where(store: RunStore, job_id: str, attempt: int) -> tuple[fsio.Dir, str] | None:
    """The directory (open) and name of attempt ``attempt``'s log: in ``logs/``, else the older layout's."""
    at = logs_open(store, job_id)
    if at is not None:
        name = log_name(job_id, attempt)
        if _present(at, name):
            return at, name
        at.close()
    old = log_dir_open(store, job_id)
    return None if old is None else (old, f"attempt-{attempt}.log")


def log_read(store: RunStore, job_id: str, attempt: int, offset: int = 0) -> bytes | None:
    """What attempt ``attempt``'s log holds from ``offset`` on; None when there is no such log."""
    where = _where(store, job_id, attempt)
    if where is None:
        return None
    at, name = where
    with at:
        return _log_read(at, name, job_id, offset)


def _log_read(at: fsio.Dir, name: str, job_id: str, offset: int = 0) -> bytes | None:
    fd = fsio.open_read(at, name, job_id)
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


def _log_size(at: fsio.Dir, name: str, job_id: str) -> int | None:
    fd = fsio.open_read(at, name, job_id)
    if fd is None:
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def log_size(store: RunStore, job_id: str, attempt: int) -> int | None:
    """The size of attempt ``attempt``'s log in bytes; None when there is no such log."""
    where = _where(store, job_id, attempt)
    if where is None:
        return None
    at, name = where
    with at:
        return _log_size(at, name, job_id)


class LogNames:
    """Every job's files in ``logs/``, read once (``gc`` removes many jobs' logs in one pass).

    :meth:`remove` removes one job's: its logs, a ``$JOB_RESULT`` file a
    holder that died left, and its directory of the older layout; nothing
    is followed.
    """

    def __init__(self, store: RunStore, job_id: str) -> None:
        self._names: dict[str, list[str]] = {}
        at = logs_open(store, job_id)
        if at is None:
            return
        with at:
            for entry in fsio.scan(at):
                m = _FLAT.match(entry.name)
                if m is not None:
                    self._names.setdefault(m.group(1), []).append(entry.name)

    def remove(self, store: RunStore, job_id: str) -> None:
        names = self._names.pop(job_id, [])
        if names:
            at = logs_open(store, job_id)
            if at is not None:
                with at:
                    for name in names:
                        fsio.unlink(at, name)
        base, _parts = _logs_parts(store, job_id)
        fsio.remove_below(base, log_dir(store, job_id))


def result_name(job_id: str, attempt: int, epoch: int) -> str:
    """The name of the file a child leaves its result in (``$JOB_RESULT``), beside its attempt's log.

    ``<id>.attempt-<N>.<E>.result``: the epoch is in the name: an adopter runs
    the same attempt number as the holder it replaced, and must never store a
    result that holder left. At most 255 bytes with the longest id, attempt
    and epoch.
    """
    return f"{job_id}.attempt-{attempt}.{epoch}.result"


def result_path(store: RunStore, job_id: str, attempt: int, epoch: int) -> str:
    """``<root>/work/.jobctl/logs/<id>.attempt-<N>.<E>.result``: what ``$JOB_RESULT`` names."""
    return os.path.join(logs_dir(store, job_id), result_name(job_id, attempt, epoch))


def cut_short(at: fsio.Dir, job_id: str, attempt: int) -> str | None:
    """Whether the attempt's log in ``at`` was cut short (its holder died): None if not, else what ends its last line.

    A closed log ends with a ``--- jobctl: <how it ended> ---`` line; an empty
    one was never started. Anything else -- output, or only the start line --
    was cut short. The answer is ``"\\n"`` when the last line is unfinished.
    """
    name = log_name(job_id, attempt)
    try:
        size = _log_size(at, name, job_id)
        if not size:
            return None
        tail = _log_read(at, name, job_id, max(0, size - 4096)) or b""
    except (OSError, JobError):
        return None
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    closed = last.startswith(b"--- jobctl: ") and last.endswith(b" ---") and b", started " not in last
    if closed and tail.endswith(b"\n"):
        return None
    return "" if tail.endswith(b"\n") else "\n"
