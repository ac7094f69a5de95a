"""A per-user cache of what the finished records of a file store say.

A terminal record never changes state again [JOB-T1], yet a store of
100,000 records would otherwise be decoded whole by every ``claim --next``,
``orphans`` and worker start-up. This cache keeps, per store, a small
:class:`Summary` of each finished record beside that record file's
*identity* -- ``(st_ino, st_size, st_mtime_ns, st_ctime_ns)`` -- so a reader
``stat``\\ s the file instead of parsing it. Identity decides, always: the
file of a finished record can still be replaced (a renewal on a terminal
record is allowed [JOB-T6], and other implementations write the directory
knowing nothing of this cache), and a replaced file is read again.

Timestamps too coarse to see two changes in one tick are git's "racy index"
problem: a file whose change time is within :data:`RACY_NS` of the moment
the scan began is not remembered, because a second replacement in the same
tick (with a recycled inode and the same size) would look identical. The
kernel sets ``st_ctime`` on every rename and write and no caller can set it
back, so any change made after the scan began shows in it.

The store's ``jobs/`` directory has an identity too (device, inode, mtime,
ctime, link count, size). When it is unchanged, no entry was added, removed
or renamed, so the finished records are known without statting them
(:meth:`Summaries.fresh`, :meth:`Listed.fresh`). The same racy rule guards
it, with the scan's start as the cache's own write time: a directory changed
within :data:`RACY_NS` of that moment may change again within the same tick
without its identity showing it, so such a directory is not remembered and
the next call stats every file (git's racily clean index entry, re-checked).

The cache is optional and per user: ``<user cache dir>/summaries/<key>``
(platformdirs: ``~/.cache/jobctl`` on Linux), the key hashing the real path
and device/inode of the store's ``jobs/``. Directories are 0700 and files
0600, and a directory or file that is a link, not ours, or open to others
is not used -- nobody else can poison what we believe. Below the user cache
directory nothing is followed: ``jobctl/`` and ``summaries/`` are opened one
at a time with ``O_NOFOLLOW`` (:func:`_open_private`), and the files are
opened (``O_NONBLOCK``: a FIFO is never waited on), created and renamed
relative to the opened directory. A missing, unreadable, corrupt, malformed
or read-only cache costs speed, never an error or a wrong answer.
Writes are atomic (a temporary renamed into place).
"""

from __future__ import annotations

from ..record import micros, moment

# Private names the tests read (never patch: they are patched where they live, cachefile, scan, listed).
from .cachefile import _NEVER as _NEVER
from .cachefile import _OTHER as _OTHER
from .cachefile import RACY_NS, Rows, Summary, default_dir, ident, ident_text, too_recent
from .cachefile import _Later as _Later
from .listed import Listed, now_or_aside, settle, write_aside
from .listed import _well_formed as _well_formed
from .scan import Summaries
from .states import States
from .stored import StoredRows

__all__ = [
    "Summary",
    "Summaries",
    "StoredRows",
    "States",
    "Listed",
    "RACY_NS",
    "Rows",
    "default_dir",
    "settle",
    "now_or_aside",
    "write_aside",
    "too_recent",
    "ident",
    "ident_text",
    "micros",
    "moment",
]
