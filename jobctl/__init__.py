"""jobctl: durable jobs in a shared directory, leased, fenced and resumable.

The public API is the abstraction-job one: ``open_store(path or URL)`` (a
``FileStore`` for a directory, the PostgreSQL store for a
``postgresql://`` URL) and its operations, the :class:`Record` model, :func:`watch`, and one exception class
per verdict. Nothing here imports click or rich.

Python processors (:mod:`jobctl.app`, :mod:`jobctl.processor`): ``Worker``,
``Job``, ``Result``, ``NewJob``, ``NotRetryable``, loaded on first use so
that the command line's start-up does not pay for them.
"""

from typing import TYPE_CHECKING, Any

from .errors import (
    Invalid,
    JobError,
    LeaseExpired,
    LeaseHeld,
    NotFound,
    Refused,
    StaleEpoch,
    Terminal,
    UnknownSchema,
)
from .record import Delegation, Envelope, Intent, Lease, Progress, Recall, Record, Step
from .store import UNSET, FileStore, Listing, Store, open_store
from .watch import Notice, Watch, watch
from .wire import Raw

if TYPE_CHECKING:
    from .app import Worker
    from .processor import Job, NewJob, NotRetryable, Result

__version__ = "0.1.0"

__all__ = [
    "open_store",
    "FileStore",
    "Store",
    "Listing",
    "Record",
    "Progress",
    "Step",
    "Lease",
    "Recall",
    "Intent",
    "Delegation",
    "Envelope",
    "Raw",
    "UNSET",
    "watch",
    "Watch",
    "Notice",
    "JobError",
    "NotFound",
    "LeaseHeld",
    "StaleEpoch",
    "LeaseExpired",
    "Terminal",
    "UnknownSchema",
    "Invalid",
    "Refused",
    "Worker",
    "Job",
    "Result",
    "NewJob",
    "NotRetryable",
]

_LAZY = {
    "Worker": "app",
    "Job": "processor",
    "Result": "processor",
    "NewJob": "processor",
    "NotRetryable": "processor",
}


def __getattr__(name: str) -> Any:
    """The processor API, imported when first asked for (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobctl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"jobctl.{module}"), name)
    globals()[name] = value
    return value
