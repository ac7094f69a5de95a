"""The verdicts a store answers with, one exception class per verdict class.

The class is the contract; the message is not. Each class carries the verdict
word that transcripts and the command line print (the newest upstream spelling,
with underscores) and the process exit code the command line maps it to. Codes
are distinct per class and never 0, 1 or 2 (11 to 13 are ``wait``'s): 1 is "some other failure" (an
unreadable store, a partial listing) and 2 is a usage error, as upstream.
"""

from __future__ import annotations

__all__ = [
    "JobError",
    "NotFound",
    "LeaseHeld",
    "LockBusy",
    "KeyHeld",
    "StaleEpoch",
    "LeaseExpired",
    "Terminal",
    "UnknownSchema",
    "Invalid",
    "Exists",
    "Refused",
    "Untrusted",
    "WriteFailed",
    "NoStore",
    "NoResult",
    "Retried",
    "CancelledByDependency",
    "VERDICTS",
    "verdict_class",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "EXIT_WRITE_FAILED",
]

EXIT_FAILURE = 1
EXIT_USAGE = 2
#: The disk refused a write (full, over quota, file too large, I/O error); nothing was changed.
EXIT_WRITE_FAILED = 14


class JobError(Exception):
    """Base class of every verdict. ``job_id`` names the record when known."""

    verdict = "refused"
    exit_code = 10
    #: The older hyphenated spelling upstream also used for this class.
    legacy = "refused"
    #: What to do next, when the raiser knows better than the verdict's usual
    #: advice (set on a class or on one error); empty means the usual advice.
    hint = ""

    def __init__(self, message: str = "", job_id: str = "") -> None:
        self.message = message
        self.job_id = job_id
        super().__init__(message)

    def __str__(self) -> str:
        if self.job_id and self.job_id not in self.message:
            return f"{self.job_id}: {self.message}" if self.message else self.job_id
        return self.message


class NotFound(JobError):
    """No record with that id. The request is over."""

    verdict = "not_found"
    legacy = "not-found"
    exit_code = 3


class LeaseHeld(JobError):
    """Somebody else holds the lease, or the record moved since it was read."""

    verdict = "lease_held"
    legacy = "lease-held"
    exit_code = 4


class LockBusy(LeaseHeld):
    """A claim that would not wait found the record's lock taken (a write under way, or a writer stopped in one)."""


class KeyHeld(LeaseHeld):
    """The job's exclusive key is held by another running job (:mod:`jobctl.exclusive`): not claimed now.

    A ``LeaseHeld`` to a caller that catches that (a pick passes the job over
    as it passes over one somebody else holds), with a word and code of its
    own so a script can tell "its key is busy" from "somebody holds it".
    ``key`` is the key, ``holder`` the job holding it.
    """

    verdict = "key_held"
    legacy = "key-held"
    exit_code = 21

    def __init__(self, message: str, job_id: str, key: str, holder: str) -> None:
        super().__init__(message, job_id)
        self.key = key
        self.holder = holder
        self.hint = f"it runs once that job ends (jobctl show {holder})"


class StaleEpoch(JobError):
    """The epoch presented is not the record's: somebody claimed since. [JOB-L1]"""

    verdict = "stale_epoch"
    legacy = "stale-epoch"
    exit_code = 5


class LeaseExpired(JobError):
    """The epoch is right but the lease lapsed (or was released). [JOB-L5]"""

    verdict = "lease_expired"
    legacy = "lease-expired"
    exit_code = 6


class Terminal(JobError):
    """The record is complete, failed or cancelled: nothing reopens it. [JOB-T1]"""

    verdict = "terminal"
    legacy = "terminal"
    exit_code = 7


class UnknownSchema(JobError):
    """The record declares a critical model this reader does not know. [JOB-D7]

    The record is fine; this reader is too old. Leave it for a newer one.
    """

    verdict = "unknown_schema"
    legacy = "unknown-model"
    exit_code = 8


class Invalid(JobError):
    """The record or the request is malformed. The request is over."""

    verdict = "invalid"
    legacy = "invalid"
    exit_code = 9


class Exists(Invalid):
    """A job with the id asked for is already in the store (``submit --id``).

    An ``Invalid`` to a caller that catches that (the contract's verdict for
    a duplicate id), with a code of its own so a producer run twice can tell
    "already submitted" from "malformed" without parsing stderr.
    """

    verdict = "exists"
    legacy = "exists"
    exit_code = 15


class Refused(JobError):
    """Everything else the store turns down: a blank owner, a re-entrant lock, I/O."""

    verdict = "refused"
    legacy = "refused"
    exit_code = 10


class Untrusted(Refused):
    """A record this reader was told not to run: its file is not owned by the reader's own user.

    The ``refused`` verdict (exit 10), its own class so that a worker can
    leave such a record alone after naming it once (docs/security.md).
    """

    hint = "leave it alone, or run it with --any-owner if its owner is trusted"


class WriteFailed(Refused):
    """The disk refused a write (ENOSPC, EDQUOT, EFBIG, EIO): the record is as it was.

    A ``refused`` verdict on the wire (it is not one of the contract's
    verdicts), with an exit code of its own so a script can tell a full
    disk from a refusal of the request.
    """

    exit_code = EXIT_WRITE_FAILED
    hint = "free space on the store's file system (or raise the quota) and run it again"


class NoStore(JobError):
    """The root names no store: it does not exist, is not a directory, or has no ``jobs/``.

    Not a verdict of the contract (no record was asked about, so it is not in
    :data:`VERDICTS`): raised when a store is opened without creating it, so
    that a mistyped root is reported instead of quietly becoming an empty store.
    """

    verdict = "no_store"
    legacy = "no-store"
    exit_code = 16
    hint = "check the path (jobctl paths says where jobctl looks); jobctl init DIR creates a store"


class NoResult(JobError):
    """The job has left no result (``jobctl.run/result@1``): not yet, or never.

    Not a verdict of the contract (a result is jobctl's extension, see
    :mod:`jobctl.results`), so not in :data:`VERDICTS`: raised by
    :func:`jobctl.results.require`, with a code of its own so a script can
    tell "no result" from "no such job" without parsing stderr.
    """

    verdict = "no_result"
    legacy = "no-result"
    exit_code = 18


class Retried(Refused):
    """The job was retried already: its replacement stands, and nothing new was made.

    Not a verdict of the contract (a retry is jobctl's, see
    :mod:`jobctl.lifecycle`): its own word and code, so that a script can
    tell "somebody retried it first" from a refusal. ``replacement`` is the
    id of the job that does its work again.
    """

    verdict = "retried"
    legacy = "retried"
    exit_code = 19
    hint = "follow the replacement (jobctl show {id})"

    def __init__(self, message: str, replacement: str) -> None:
        super().__init__(message, replacement)  # the job a caller goes on with
        self.replacement = replacement


class CancelledByDependency(Refused):
    """A job a worker cancelled because a dependency ended: the retry belongs to that dependency.

    Retried alone, the job would wait for a dependency that has ended, and be
    cancelled again at once. ``cause`` is the job to retry with its
    dependents (the first of the chain that was not itself cancelled for a
    dependency).
    """

    verdict = "cancelled_by_dependency"
    legacy = "cancelled-by-dependency"
    exit_code = 20

    def __init__(self, message: str, job_id: str, cause: str) -> None:
        super().__init__(message, job_id)
        self.cause = cause
        self.hint = f"retry that one with its dependents: jobctl retry {cause} --with-dependents"


VERDICTS: dict[str, type[JobError]] = {}
for _cls in (NotFound, LeaseHeld, StaleEpoch, LeaseExpired, Terminal, UnknownSchema, Invalid, Exists, Refused):
    VERDICTS[_cls.verdict] = _cls
    VERDICTS[_cls.legacy] = _cls


def verdict_class(word: str) -> type[JobError]:
    """The class a verdict word names, in either spelling (``lease_held``/``lease-held``)."""
    try:
        return VERDICTS[word]
    except KeyError:
        raise ValueError(f"not a verdict word: {word!r}") from None
