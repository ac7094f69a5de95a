"""jobctl: durable jobs in a shared directory, leased, fenced and resumable.

The public API is the abstraction-job one: ``open_store(path or URL)`` (a
``FileStore`` for a directory, the PostgreSQL store for a
``postgresql://`` URL) and its operations, the :class:`Record` model, :func:`watch`, and one exception class
per verdict. Nothing here imports click or rich.

Python processors (:mod:`jobctl.app`, :mod:`jobctl.processor`): ``Worker``,
``Job``, ``Result``, ``NewJob``, ``NotRetryable``, loaded on first use so
that the command line's start-up does not pay for them.
"""

import sys
import types
from typing import TYPE_CHECKING

from .errors import (
    Invalid,
    JobError,
    LeaseExpired,
    LeaseHeld,
    LockBusy,
    NotFound,
    Refused,
    StaleEpoch,
    Terminal,
    UnknownSchema,
)

if TYPE_CHECKING:
    from .app import Worker
    from .processor import Job, NewJob, NotRetryable, Result
    from .record import Delegation, Envelope, Intent, Lease, Progress, Recall, Record, Step
    from .store import UNSET, FileStore, Listing, Store, open_store
    from .watch import Notice, Watch, watch
    from .wire import JsonText, Raw

#: Names loaded on first use, from the module that holds them: a command that
#: never watches does not import the change notices (select, struct), nor one
#: that opens no store the stores, and the command line's start-up
#: (``jobctl.cli`` is a submodule) pays for no part of the record it does not
#: use. ``jobctl.FileStore`` and ``from jobctl import watch`` work as before.
_LAZY = {
    "Record": "record",
    "Progress": "record",
    "Step": "record",
    "Lease": "record",
    "Recall": "record",
    "Intent": "record",
    "Delegation": "record",
    "Envelope": "record",
    "Raw": "wire",
    "JsonText": "wire",
    "UNSET": "store",
    "FileStore": "store",
    "Listing": "store",
    "Store": "store",
    "open_store": "store",
    "Notice": "watch",
    "Watch": "watch",
    "watch": "watch",
    "Worker": "app",
    "Job": "processor",
    "Result": "processor",
    "NewJob": "processor",
    "NotRetryable": "processor",
}

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
    "JsonText",
    "UNSET",
    "watch",
    "Watch",
    "Notice",
    "JobError",
    "NotFound",
    "LeaseHeld",
    "LockBusy",
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


class _Package(types.ModuleType):
    """This package: importing its submodule ``jobctl.watch`` leaves ``jobctl.watch`` the function.

    The import system binds a submodule on its package once it has run it; the
    eager ``from .watch import watch`` used to bind the function over it, so
    the public name stays the function however the submodule came to be imported.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name == "watch" and isinstance(value, types.ModuleType):
            value = value.watch
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
