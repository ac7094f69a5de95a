"""jobctl: durable jobs in a shared directory, leased, fenced and resumable.

The public API is the abstraction-job one: ``open_store(path or URL)`` (a
``FileStore`` for a directory, the PostgreSQL store for a
``postgresql://`` URL) and its operations, the :class:`Record` model, :func:`watch`, and one exception class
per verdict. Nothing here imports click or rich.
"""

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
]
