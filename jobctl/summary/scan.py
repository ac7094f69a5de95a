"""Writing the ``.open`` part: a full scan of ``jobs/`` checked against the rows, and the rows it leaves."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from array import array
from collections.abc import Iterator, Sequence

from . import cachefile
from .cachefile import (
    _ID,
    _NEVER,
    _ONLY_STR,
    _OTHER,
    _S_IFMT,
    _S_IFREG,
    _VERSION,
    Rows,
    _private_dir,
    _record_batches,
    _record_names,
    _save_file,
    ident_text,
    too_recent,
)
from .states import States
from .stored import StoredRows

#: A full check of at least this many rows shares its stats among processes (jobctl.fanout).
_CHECK_SHARED_FROM = 5_000


class Summaries(StoredRows):
    """What the last full scan of one store learnt (:class:`StoredRows`), and what the current one learns.

    A full scan (:meth:`check`) confirms each row against its file's
    identity and hands out the rest to be read; what they were comes back
    through :meth:`remember` and :meth:`other` (or :meth:`take_rows`, made
    in another process), and :meth:`finish` and :meth:`save` write the rows
    this scan leaves.
    """

    def __init__(self, directory: str | None, jobs_dir: str) -> None:
        super().__init__(directory, jobs_dir)
        self._started = 0
        # What a scan (check) learns, in the order it met it: runs of confirmed rows, (start, end),
        # and the names it handed out to be read, whose rows remember() and other() make.
        self._plan: list[tuple[int, int] | str] = []
        self._jumps = self._unknown = self._met_other = 0
        # The names of the rows made, in the order made (a dict of them is built only if the rows
        # are not the plan's names as they stand: a cold scan's 100,000 are hashed by no one).
        self._new_names: list[str] = []
        self._new_codes = bytearray()
        self._new_sizes = array("Q")
        self._new_times = array("q")
        self._ended_other = self._remembered = 0

    def confirmed_states(self) -> States:
        """After :meth:`check`: the states of the rows it confirmed, built only when a look-up needs one."""

        def fill() -> dict[str, str]:
            mask = bytearray(self._n)
            for a, b in (item for item in self._plan if type(item) is tuple):
                mask[a:b] = b"\x01" * (b - a)
            return self._states_where(mask)

        return States(fill)

    def check(self, fd: int) -> Iterator[list[str]]:
        """A full scan of ``jobs/`` (open as ``fd``): batches of the ids of the files the cache cannot vouch for.

        A row is confirmed when the entry at its name is a regular file of
        the row's identity; every other record name is handed out, and the
        caller reads it and says what it was (:meth:`remember`,
        :meth:`other`, or nothing when it went away) before the scan ends
        (:meth:`finish`). The entries come in the order the rows were stored
        in (the directory's own order, which a rename over an existing name
        or a new name elsewhere leaves as it was), so each is compared with
        the row expected next, else looked up among all; those names come as
        one batch once the directory is checked. Nothing cached, every record
        name is handed out unstatted, a batch at a time as the directory is
        read (a shared scan's pieces at work while the rest is read).
        """
        self._started = time.time_ns()
        self._need_rows()
        if self._n:
            yield list(self._check_rows(fd))
            return
        for met in _record_batches(fd):
            self._plan.extend(met)
            self._unknown += len(met)
            yield [name[:-5] for name in met]

    def _check_rows(self, fd: int) -> Iterator[str]:
        """:meth:`check` against the rows: every record name statted, the stats shared among processes.

        The directory is read here (one read of it is the only order there
        is), and each record name's row found: mostly the row after the last
        one's. The names are statted in contiguous pieces, shared among
        processes (:func:`jobctl.fanout.share_out`) when there are at least
        :data:`_CHECK_SHARED_FROM` rows, in this one otherwise; a piece's
        answer is the positions whose file is not its row's, or is gone. An
        answer that is not a list of positions inside its piece is not
        believed: every name of that piece is handed out to be read. Then the
        names are walked in the directory's order, building the plan (the
        runs of rows confirmed, and the names to be read in between) and
        handing out each name to be read.
        """
        names = self._rows()
        listed = _record_names(fd)
        # Each listed name's row (-1: none), in the directory's order: mostly the row after the last.
        rows = array("q", bytes(8 * len(listed)))
        index: dict[str, int] | None = None
        k = 0
        for p, name in enumerate(listed):
            if name != names[k]:
                if index is None:
                    index = dict(zip(names, range(self._n), strict=False))  # not the sentinel
                at = index.get(name)
                if at is None:
                    rows[p] = -1
                    continue
                k = at
            rows[p] = k
            k += 1
        sizes, times = self._sizes, self._times

        def changed(piece: Sequence[int]) -> list[int]:
            """The positions in ``piece`` whose file is not its row's (``~p``: gone)."""
            out = []
            lstat = os.stat
            for p in piece:
                at = rows[p]
                if at < 0:
                    continue
                try:
                    st = lstat(listed[p], dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:  # removed since the directory was read
                    out.append(~p)
                    continue
                j = at + at
                if not (
                    st.st_ctime_ns == times[j + 1]
                    and st.st_mtime_ns == times[j]
                    and st.st_size == sizes[j + 1]
                    and st.st_ino == sizes[j]
                    and st.st_mode & _S_IFMT == _S_IFREG
                ):
                    out.append(p)
            return out

        from .. import fanout

        verdict = bytearray(len(listed))  # 0: its row's, 1: another file (read it), 2: gone
        count = None if self._n >= _CHECK_SHARED_FROM else 1
        with contextlib.closing(fanout.share_out(range(len(listed)), changed, [fd], count=count)) as answers:
            for _index, piece, answer in answers:
                assert isinstance(piece, range)
                if type(answer) is list and all(type(p) is int and (p if p >= 0 else ~p) in piece for p in answer):
                    for p in answer:
                        verdict[p if p >= 0 else ~p] = 1 if p >= 0 else 2
                else:
                    verdict[piece.start : piece.stop] = b"\1" * len(piece)
        codes, plan = self._codes, self._plan
        k = start = 0
        for p, name in enumerate(listed):
            at = rows[p]
            if at != k:  # check's name != expect: a name not in the rows, or a row further off
                if start < k:
                    plan.append((start, k))
                if at < 0:
                    self._unknown += 1
                    plan.append(name)
                    start = k
                    yield name[:-5]
                    continue
                self._jumps += 1
                k = start = at
            if not verdict[p]:
                k += 1
                continue
            if start < k:
                plan.append((start, k))
            k += 1
            start = k
            if verdict[p] == 1:
                self._met_other += codes[at] == _OTHER
                plan.append(name)
                yield name[:-5]
        if start < k:
            plan.append((start, k))

    def confirmed_any(self) -> bool:
        """After :meth:`check`: True when it confirmed a row, False when it handed out every record name."""
        return any(type(item) is tuple for item in self._plan)

    def _add(self, job_id: str, code: int, sizes: tuple[int, int], times: tuple[int, int]) -> None:
        self._new_names.append(job_id + ".json")
        self._new_codes.append(code)
        self._new_sizes.extend(sizes)
        self._new_times.extend(times)

    def remember(self, job_id: str, st: os.stat_result, state: str | None) -> None:
        """What was just read of ``job_id`` (``st`` from the open file; ``state`` None unless finished)."""
        if self.directory is None:
            return
        mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
        code = self._code(state, mtime, ctime)
        if code == _OTHER:
            self.other(job_id)
            return
        self._remembered += 1
        self._add(job_id, code, (st.st_ino, st.st_size), (mtime, ctime))

    def _code(self, state: str | None, mtime: int, ctime: int) -> int:
        """A row's code: its state's index in the table (added while there is room), else :data:`_OTHER`.

        :data:`_OTHER` (read on every call) for an open record (state None),
        a file changed too recently to trust (:func:`too_recent` of this
        scan), or a state a full table cannot take.
        """
        if state is None or too_recent(mtime, ctime, self._started):
            return _OTHER
        table = self._table
        try:
            return table.index(state)
        except ValueError:
            if len(table) >= _OTHER - 1:
                return _OTHER
            table.append(state)
            return len(table) - 1

    def rows_of(self, read: list[tuple[str, str | None, tuple[int, int, int, int]]]) -> Rows:
        """The rows :meth:`remember` makes of each of ``read``, in its order, as plain data (:data:`Rows`).

        Each is ``(job_id, state or None, (st_ino, st_size, st_mtime_ns, st_ctime_ns))``.

        Made where the records were read -- in a child of a shared scan
        (:mod:`jobctl.fanout`), which marshals them back -- and taken in the
        scanning process by :meth:`take_rows`. A state this cache's table
        lacks is added to the table here (:meth:`_code`); the table is sent
        with the rows, so that their codes can be read in a process whose
        table differs.
        """
        names: list[str] = []
        codes, sizes, times = bytearray(), array("Q"), array("q")
        code_of = self._code
        remembered = 0
        for job_id, state, (ino, size, mtime, ctime) in read:
            names.append(job_id + ".json")
            code = code_of(state, mtime, ctime)
            codes.append(code)
            if code == _OTHER:  # as other() makes it: a size no file has
                sizes.extend((0, _NEVER))
                times.extend((0, 0))
                continue
            remembered += 1
            sizes.extend((ino, size))
            times.extend((mtime, ctime))
        return names, bytes(codes), sizes.tobytes(), times.tobytes(), remembered, tuple(self._table)

    @property
    def started(self) -> int:
        """When the scan begun by :meth:`check` began (ns): what :func:`too_recent` judges a file by."""
        return self._started

    def take_rows(self, rows: Rows | None) -> bool:
        """Add rows made by :meth:`rows_of` (here or in a child); False, adding nothing, when they are malformed."""
        if self.directory is None:
            return True
        if rows is None:
            return False
        try:
            names, codes, sizes, times, remembered, table = rows
            n = len(names)
            if not (
                type(names) is list
                and type(codes) is bytes
                and type(sizes) is bytes
                and type(times) is bytes
                and type(table) is tuple
                and len(codes) == n
                and len(sizes) == len(times) == 16 * n
                and type(remembered) is int
                and 0 <= remembered <= n
                and set(map(type, names)) <= _ONLY_STR
                and set(map(type, table)) <= _ONLY_STR
            ):
                return False
        except (TypeError, ValueError):
            return False
        mine = self._table
        if list(table) != mine[: len(table)]:
            # Made with another table (a child added a state this process has not met): its codes mapped.
            mapping = bytearray(range(256))
            for code, state in enumerate(table):
                if state in mine:
                    mapping[code] = mine.index(state)
                elif len(mine) < _OTHER - 1:
                    mapping[code] = len(mine)
                    mine.append(state)
                else:
                    mapping[code] = _OTHER
            codes = codes.translate(mapping)
            if _OTHER in mapping[: len(table)]:  # the table is full: such rows are read on every call
                packed = array("Q", sizes)
                for at, code in enumerate(codes):
                    if code == _OTHER and packed[2 * at + 1] != _NEVER:
                        packed[2 * at : 2 * at + 2] = array("Q", (0, _NEVER))
                        remembered -= 1
                sizes = packed.tobytes()
        self._new_names += names
        self._new_codes += codes
        self._new_sizes.frombytes(sizes)
        self._new_times.frombytes(times)
        self._remembered += remembered
        self._ended_other += n - remembered
        return True

    def other(self, job_id: str) -> None:
        """A record file to read on every call."""
        if self.directory is None:
            return
        self._ended_other += 1
        self._add(job_id, _OTHER, (0, _NEVER), (0, 0))

    def finish(self, jobs_stat: os.stat_result) -> None:
        """End a full scan; ``jobs_stat`` is the directory as statted before it began."""
        if self.directory is None:
            return
        dir_id: tuple[int, ...] | None = cachefile._dir_identity(jobs_stat)
        if too_recent(jobs_stat.st_mtime_ns, jobs_stat.st_ctime_ns, self._started):
            dir_id = None  # changed within a tick of the scan: the next call must look
        confirmed = sum(item[1] - item[0] for item in self._plan if type(item) is tuple)
        same_rows = (
            self._loaded
            and not self._jumps
            and not self._unknown
            and not self._remembered
            and confirmed == self._finished
            # every other row met again, and each still to be read on every call:
            and self._met_other == self._n - self._finished == self._ended_other
        )
        if not same_rows:
            self._rows_out = self._rebuild()
            self.dirty = True
        elif dir_id != self.dir_id:
            self.dirty = True
        self.dir_id = dir_id

    def ident_texts(self) -> dict[str, str]:
        """After :meth:`finish`: by id, the identity (:func:`ident_text`) of each finished record its rows remember.

        What the listing part keeps beside each summary, made from the rows
        rather than sent beside each: a file too recent to trust (:data:`_OTHER`)
        has none. Made once a listing is printed, by the process writing the part.
        """
        text, codes, sizes_raw, times_raw = self._rows_out
        names = text.split("\n") if text else []
        sizes, times = memoryview(sizes_raw).cast("Q"), memoryview(times_raw).cast("q")
        return {
            _ID(name): ident_text(sizes[2 * at], sizes[2 * at + 1], times[2 * at], times[2 * at + 1])
            for at, name in enumerate(names)
            if codes[at] != _OTHER
        }

    def _rebuild(self) -> tuple[str, bytes, bytes, bytes]:
        """The rows as this scan met them: the confirmed runs, and what was read in between.

        Sets :attr:`others` from them; returns ``(names, codes, sizes, times)`` as stored.
        """
        new_names, new_codes, new_sizes, new_times = self._new_names, self._new_codes, self._new_sizes, self._new_times
        if len(new_names) == len(self._plan) and new_names == self._plan:
            # Every name was handed out and read, and the rows were made in the order met (a cold
            # scan): they are the new rows as they stand.
            self.others = sorted(_ID(name) for name, code in zip(self._plan, new_codes, strict=True) if code == _OTHER)
            met: list[str] = self._plan  # type: ignore[assignment]  # names alone: it equals new_names
            return "\n".join(met), bytes(new_codes), new_sizes.tobytes(), new_times.tobytes()
        # Each name's row: the last made of a name met twice (a record read again here), as a dict keeps it.
        new_at = dict(zip(new_names, range(len(new_names)), strict=True))
        names = self._rows()
        codes, sizes, times = bytearray(), array("Q"), array("q")
        out: list[str] = []
        taken = bytearray(self._n) if self._jumps else None  # a jump back must not repeat a row

        def run(a: int, b: int) -> None:
            out.extend(names[a:b])
            codes.extend(self._codes[a:b])
            sizes.frombytes(self._sizes_raw[16 * a : 16 * b])
            times.frombytes(self._times_raw[16 * a : 16 * b])

        for item in self._plan:
            if isinstance(item, str):
                i = new_at.pop(item, None)  # None: gone before it was read, or met twice
                if i is not None:
                    out.append(item)
                    codes.append(new_codes[i])
                    sizes.extend(new_sizes[2 * i : 2 * i + 2])
                    times.extend(new_times[2 * i : 2 * i + 2])
                continue
            a, b = item
            if taken is None:
                run(a, b)
            elif not any(taken[a:b]):
                taken[a:b] = b"\x01" * (b - a)
                run(a, b)
            else:
                for x in range(a, b):
                    if not taken[x]:
                        taken[x] = 1
                        run(x, x + 1)
        self.others = sorted(_ID(name) for name, code in zip(out, codes, strict=True) if code == _OTHER)
        return "\n".join(out), bytes(codes), sizes.tobytes(), times.tobytes()

    def save(self) -> None:
        """Write the cache when this scan changed it (atomically: a temporary renamed into place)."""
        if not self.dirty or self.directory is None or not self.base:
            return
        name = os.path.basename(self.base)
        with _private_dir(self.directory, create=True) as at:
            if at < 0:
                return
            text, codes, sizes, times = self._rows_out
            head = (_VERSION, sys.byteorder, self.real, self.dir_id, self.others)
            if _save_file(at, name + ".open", head, (text, tuple(self._table), codes, sizes, times)):
                self.dirty = False
                if not self._loaded:
                    try:  # the second part of the cache of jobctl 0.x before version 4: no longer read
                        os.unlink(name + ".stat", dir_fd=at)
                    except OSError:
                        pass
