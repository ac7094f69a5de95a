"""An attempt's files: its log (header, footers, what the child writes) and the result it may leave.

Both live in the store's logs directory (:mod:`jobctl.runner.logs`), named
by the job, opened once for the attempt without following a link; :class:`ChildWork
<jobctl.runner.child.ChildWork>` holds one :class:`AttemptFiles` an attempt.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from .. import fsio
from ..errors import Invalid, JobError
from ..record import Record, format_time
from .logs import LogRoot, cut_short, log_append, logs_open, result_name

if TYPE_CHECKING:
    from ..keeper import Keeper

__all__ = ["AttemptFiles"]


class AttemptFiles:
    """The log and the ``$JOB_RESULT`` file of one attempt, in the logs directory.

    ``logs``: the worker's log root, opened once (None: walked to from the
    store's root); ``log``: whether the attempt has a log at all.
    """

    def __init__(self, logs: LogRoot | None, log: bool) -> None:
        self._logs = logs
        self._log = log
        #: The logs directory, opened once for the attempt (log, cut-short check, result).
        self.at: fsio.Dir | None = None
        #: The attempt's log while it is open.
        self.logfile: IO[bytes] | None = None
        #: Where the child may leave its result (``$JOB_RESULT``): the name, in the directory the path names.
        self.result_file: str | None = None

    def dir(self, keeper: Keeper) -> fsio.Dir:
        """The logs directory (made as needed), opened once for the attempt without following links."""
        if self.at is None:
            if self._logs is not None:
                self.at = self._logs.dir(keeper.job_id)
            else:
                at = logs_open(keeper.store, keeper.job_id, create=True)
                assert at is not None  # created
                self.at = at
        return self.at

    def open_log(self, keeper: Keeper) -> IO[bytes] | None:
        """Open the attempt's log and write its header (a cut-short mark first, for a log left open)."""
        if not self._log:
            return None
        store, job_id = keeper.store, keeper.job_id
        try:
            at = self.dir(keeper)
            handle = log_append(at, job_id, keeper.attempt)  # closed by close_log() once the child is gone
        except (OSError, JobError):
            # No log beats no run (the output goes where the runner's goes); a
            # link planted at the log's name is refused, never followed.
            return None
        # Only a log with something in it can have been cut short: a new one is not read back.
        cut = cut_short(at, job_id, keeper.attempt) if os.fstat(handle.fileno()).st_size else None
        if cut is not None:
            handle.write(
                f"{cut}--- jobctl: cut short: its holder stopped without closing this log "
                f"(its worker was killed?); adopted at epoch {keeper.epoch} by {keeper.owner} ---\n".encode()
            )
        handle.write(
            f"--- jobctl: attempt {keeper.attempt}, epoch {keeper.epoch}, owner {keeper.owner}, "
            f"started {format_time(store.now())} ---\n".encode()
        )
        handle.flush()
        self.logfile = handle
        return handle

    def footer(self, text: str) -> None:
        """A ``--- jobctl: TEXT ---`` line in the log, if it is open."""
        log = self.logfile
        if log is None:
            return
        try:
            log.write(f"--- jobctl: {text} ---\n".encode())
            log.flush()
        except (OSError, ValueError):
            pass

    def result_ready(self, keeper: Keeper) -> None:
        """Make the directory ``$JOB_RESULT`` lives in and clear its name (:attr:`result_file`).

        Every directory below the store's is opened without following a link
        (:mod:`jobctl.fsio`): a link planted there is refused (the command
        then runs without ``$JOB_RESULT``, and one that needs it fails on its
        own) rather than send the result out of the store; no
        ``$JOB_RESULT`` beats no run. Whatever is at the name (left by a
        holder of the same epoch: there is none) is removed, so the only
        result stored is one this child wrote.
        """
        try:
            at = self.dir(keeper)
            name = result_name(keeper.job_id, keeper.attempt, keeper.epoch)
            try:
                fsio.unlink(at, name)
            except OSError as exc:
                raise fsio.refusal(at.join(name), exc, keeper.job_id, "remove") from None
        except (OSError, JobError) as exc:
            why = exc.message if isinstance(exc, JobError) else str(exc)
            self.footer(f"no $JOB_RESULT for this attempt: {why}")
            return
        self.result_file = at.join(name)

    def result(self, job_id: str) -> Callable[[Record], None] | None:
        """The result the child left at ``$JOB_RESULT``, stored with the completion; nothing when it left none.

        The file is read without following a link and must hold one JSON
        value of at most :data:`jobctl.results.RESULT_MAX_BYTES`; anything
        else fails the attempt (``Invalid``) with an error naming the job and
        the file, counted under the retry policy like a non-zero exit.
        """
        at = self.at
        if self.result_file is None or at is None:
            return None
        from ..results import RESULT_MAX_BYTES, parse_result, set_result

        where = f"job {job_id}: $JOB_RESULT ({self.result_file})"
        try:
            data = fsio.read_file(at, os.path.basename(self.result_file), job_id, limit=RESULT_MAX_BYTES)
        except JobError as exc:
            raise Invalid(f"{where}: {exc.message}", job_id) from None
        if data is None:
            return None
        try:
            value = parse_result(data, job_id)
        except Invalid as exc:
            raise Invalid(f"{where}: {exc.message}", job_id) from None

        def store_result(rec: Record) -> None:
            set_result(rec, value)

        return store_result

    def close_log(self) -> None:
        if self.logfile is not None:
            self.logfile.close()
            self.logfile = None

    def close(self) -> None:
        """The attempt is over: the result file removed (the record holds the result now), the directory closed."""
        self.close_log()
        at = self.at
        if at is None:
            return
        if self.result_file is not None:
            with contextlib.suppress(OSError, JobError):
                fsio.unlink(at, os.path.basename(self.result_file))
        at.close()
        self.at = None
