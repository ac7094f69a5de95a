"""Looking without touching: ``show``, ``list``, ``orphans``. None of these takes a lock."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from ..errors import JobError
from ..record import TERMINAL, Record, encode
from ..roster import UNKNOWN, Roster, roster_for, unhandled_note
from ..store.base import Listing, OpenListing
from ..store.file import collector_paused, is_orphan, summary_of
from ..submitter import submitter_of
from ..summary import Summary, micros, moment
from ..summary import write_aside as summary_write_aside
from . import render
from .main import (
    EXIT_FAILURE,
    STATES_HELP,
    TEXT,
    JobCommand,
    State,
    common,
    echo_out,
    job_id_argument,
    pass_state,
)

__all__ = ["show", "result", "list_jobs", "orphans", "STATE_LIST", "chosen_states", "pipeline_filter"]


def _dependency_states(state: State, rec: Record) -> dict[str, str]:
    """The states of the jobs ``rec`` waits for, read one by one (a missing one is left out)."""
    from .. import schedule

    states = {rec.id: rec.state}
    try:
        deps = schedule.after_of(rec)
    except JobError:
        return states
    store = state.store()
    for dep in deps:
        try:
            states[dep] = store.load(dep).state
        except JobError:
            pass
    return states


def _warn_long_leases(state: State, records: Iterable[Record], flagged: set[str]) -> None:
    """One stderr line per lease that runs further ahead than jobctl grants: nobody renews it."""
    for rec in records:
        if rec.id in flagged:
            _warn_long_lease(state, rec)


def _warn_long_lease(state: State, item: Record | Summary) -> None:
    from ..record import format_time

    expires: datetime | None
    if isinstance(item, Summary):
        owner, epoch, expires = item.owner, item.epoch, moment(item.expires)
    else:
        owner, epoch, expires = item.lease.owner, item.lease.epoch, item.lease.expires_at
    click.echo(
        f"jobctl: warning: job {item.id}: its lease ({owner or 'no owner'}, epoch {epoch}) "
        f"runs until {format_time(expires)}, more than max_ttl ({state.max_ttl():g} s) ahead; "
        f"end it with jobctl recall {item.id} --reason ... (docs/howto/recovery.md)",
        err=True,
    )


@click.command(cls=JobCommand, short_help="Print one job: its record, or a readable view on a terminal.")
@job_id_argument
@common
@pass_state
def show(state: State, job_id: str) -> None:
    """Print job ID.

    Piped, the record re-encoded canonically: the exact bytes every
    implementation writes. On a terminal, the fields in words (lease time
    left, attempt, what it waits for); with --json, the job object. A lease
    running more than max_ttl ahead is named on stderr (jobctl recall ends it),
    and so is a pending job whose kind no running worker handles, when
    workers have said what they handle (`unhandled` in the JSON).

    \b
    Example:
      jobctl show 1787202430967-a752f9a9c2c77b123ffd | grep '"state"'
    """
    rec = state.store().load(job_id)
    screen = state.screen()
    flagged = state.long_leases([rec])
    roster = _roster(state, [rec])
    if state.json:
        obj = render.job_json(rec, state.now(), _dependency_states(state, rec), rec.id in flagged)
        render.out_json(_judged(obj, rec, roster))
    elif screen.terminal:
        render.print_job(screen, rec, state.now(), _dependency_states(state, rec), rec.id in flagged)
    else:
        echo_out(encode(rec), nl=False)
    _warn_long_leases(state, [rec], flagged)
    if roster.unhandled(rec):
        _warn_unhandled(rec, roster)


def _roster(state: State, records: Iterable[Record]) -> Roster:
    """What running workers handle, read once, when one of ``records`` is pending (nothing read otherwise)."""
    return roster_for(state.store(), records)


def _judged(obj: dict[str, Any], rec: Record, roster: Roster) -> dict[str, Any]:
    """The job's JSON with ``unhandled`` as ``roster`` says (null when it can say nothing)."""
    obj["unhandled"] = roster.judge(rec)
    return obj


def _warn_unhandled(rec: Record, roster: Roster) -> None:
    handled = ", ".join(sorted(roster.kinds or ())) or "nothing"
    click.echo(
        f"jobctl: note: job {rec.id}: {unhandled_note(rec.kind)} (the running workers handle: {handled})", err=True
    )


@click.command(cls=JobCommand, short_help="Print the result a job left, as JSON.")
@job_id_argument
@click.option("--pretty", is_flag=True, help="Indent the JSON, two spaces a level.")
@common
@pass_state
def result(state: State, job_id: str, pretty: bool) -> None:
    """Print the result job ID left: the JSON its processor returned, or its command wrote to $JOB_RESULT.

    One line of compact JSON on stdout, every number and escape spelled as
    it was stored (--pretty: indented); the same with or without --json.
    A job leaves a result only in the write that completes it. When it has
    none, nothing is printed and the exit code is 18 (no_result), with a
    line on stderr that says why: it has not ended yet (it is pending or
    running), or it ended failed or cancelled, or completed without one.

    \b
    Examples:
      jobctl result 1787202430967-a752f9a9c2c77b123ffd | jq .chars
      jobctl wait "$ID" && jobctl result "$ID" --pretty
    """
    from .. import results, wire

    text = results.require(state.store().load(job_id))
    render.out(wire.indent(text, 0) if pretty else text)


def _print_records(
    state: State, records: Iterable[Record], line: Callable[[Record], str], states: dict[str, str], listing: Listing
) -> None:
    """Records as the screen wants them; then, as Go's jobctl, the unreadable ones on stderr and exit 1."""
    recs = list(records)
    screen = state.screen()
    now = state.now()
    flagged = state.long_leases(recs)
    if state.json:
        for rec in recs:
            render.out_json(render.job_json(rec, now, states, rec.id in flagged))
    elif screen.terminal:
        render.print_jobs(screen, recs, now, states, flagged)
    else:
        for rec in recs:
            render.out(line(rec))
    _warn_long_leases(state, recs, flagged)
    if listing.unreadable:
        click.echo(render.unreadable_line(listing.unreadable), err=True)
        click.get_current_context().exit(EXIT_FAILURE)


if TYPE_CHECKING:  # click 8.5 types ParamType by what it returns; older clicks are not generic
    _SetType = click.ParamType[frozenset[str]]
else:
    _SetType = click.ParamType


class _StateList(_SetType):
    """``--state running,pending``: a comma-separated list of states (:func:`jobctl.filters.parse_states`).

    The option stays repeatable; :func:`chosen_states` joins the lists. A
    word that is not a state is a usage error (exit 2), as it always was.
    """

    name = "state"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> frozenset[str]:
        if isinstance(value, frozenset):
            return value
        from .. import filters

        try:
            return filters.parse_states(str(value), "--state")
        except JobError as exc:
            self.fail(exc.message, param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        from ..record import STATES

        done, _, last = incomplete.rpartition(",")
        head = f"{done}," if done else ""
        return [CompletionItem(head + name) for name in STATES if name.startswith(last)]


#: The type of a ``--state`` filter (``list``, ``watch``).
STATE_LIST = _StateList()


def chosen_states(lists: Iterable[frozenset[str]]) -> tuple[str, ...]:
    """The states of every ``--state`` given, in the order of :data:`jobctl.record.STATES` (none: no filter)."""
    from ..record import STATES

    wanted = set().union(*lists)
    return tuple(name for name in STATES if name in wanted)


def pipeline_filter(name: str | None) -> Callable[[Record], bool]:
    """``--pipeline NAME``: whether a record belongs to pipeline NAME (a malformed membership does not)."""

    def belongs(rec: Record) -> bool:
        if name is None:
            return True
        from .. import schedule  # only a --pipeline filter pays for it

        try:
            membership = schedule.pipeline_of(rec)
        except JobError:
            return False
        return membership is not None and membership[0] == name

    return belongs


@click.command("list", cls=JobCommand, short_help="List jobs, one line each.")
@click.option("--kind", multiple=True, type=TEXT, metavar="K", help="Only jobs of kind K (repeatable).")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=STATE_LIST,
    metavar="STATE[,STATE…]",
    help=f"Only jobs in these states: {STATES_HELP} (a comma list, or repeat the option).",
)
@click.option("--active", is_flag=True, help="Only jobs that have not ended (running, pending, held).")
@click.option("--pipeline", type=TEXT, metavar="NAME", help="Only jobs of pipeline NAME.")
@click.option("--owner", type=TEXT, help="Only jobs whose lease names this owner.")
@click.option("--by", type=TEXT, metavar="NAME", help="Only jobs submitted by NAME (submit --by).")
@click.option("--orphans", "only_orphans", is_flag=True, help="Only jobs nobody holds that a worker may adopt.")
@click.option("--newest", is_flag=True, help="Newest first within each group.")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="At most N rows (the first N in this order).")
@common
@pass_state
def list_jobs(
    state: State,
    kind: tuple[str, ...],
    states: Any,
    active: bool,
    pipeline: str | None,
    owner: str | None,
    by: str | None,
    only_orphans: bool,
    newest: bool,
    limit: int | None,
) -> None:
    """List jobs: `<id> kind=K state=S done=N checkpoint=C` a line.

    Order: active jobs first (running and transferred, then pending and
    held), then ended ones (complete, failed, cancelled); within each group
    oldest first by creation time, then by id (--newest: newest first).
    --limit N keeps the first N rows of that order. On a terminal, a table
    that fits its width: id and state are always shown whole; intent,
    recall, updated and owner are left out first when it is narrow, and long
    text is cut to one line with ….

    Records that cannot be read are named on stderr after the others, and
    the exit code is then 1, so a half-blind listing never looks complete.
    A lease running more than max_ttl ahead (nobody renews such a lease) is
    named on stderr too, with the way out: jobctl recall.

    \b
    Examples:
      jobctl list --state running --kind download
      jobctl list --state running,pending
      jobctl list --by alice --state failed
      jobctl list --active --newest --limit 20
      jobctl list --json | jq -r 'select(.orphan) | .id'
    """
    states = chosen_states(states)
    store = state.store()
    now = store.now()
    belongs = pipeline_filter(pipeline)

    def wanted(rec: Record) -> bool:
        return (
            (not kind or rec.kind in kind)
            and (not states or rec.state in states)
            and (not active or not rec.terminal)
            and belongs(rec)
            and (owner is None or rec.lease.owner == owner)
            and (by is None or submitter_of(rec) == by)
            and (not only_orphans or is_orphan(rec, now))
        )

    if state.screen().terminal:  # a table is drawn whole, fitted to its rows: read everything first
        _list_table(state, wanted, active or only_orphans, newest, limit)
        return
    # A listing holds a summary of every record until it writes them, and makes no reference cycle:
    # the collector's passes over them would be a tenth of a cold listing of 100,000, for nothing.
    with collector_paused():
        # A summary knows neither pipeline nor submitter: --pipeline and --by read the records.
        whole = pipeline is not None or by is not None
        _list_piped(state, wanted, kind, states, owner, whole, active or only_orphans, newest, limit)


#: The id and the creation time of a Summary (a tuple: its fields by index).
_summary_id = itemgetter(Summary._fields.index("id"))
_summary_created = itemgetter(Summary._fields.index("created"))
_summary_expires = itemgetter(Summary._fields.index("expires"))


def _listing_order(ended: list[Any], shown: bool) -> None:
    """Sort ``ended`` (Summary, or with ``shown`` _Shown) by (created, id), the listing order of ended jobs.

    In two stable passes, by id and then by creation time: the same order
    as one sort by the pair (ids are unique), at a quarter of its cost. The
    summaries come in runs of ids (a shared scan's pieces), and ids minted
    by time mostly follow creation, so the second pass finds them in order;
    a pair key would be built and compared, element by element, for each.
    """
    if shown:
        ended.sort(key=lambda entry: entry.summary.id)
        ended.sort(key=lambda entry: entry.summary.created)
    else:
        ended.sort(key=_summary_id)
        ended.sort(key=_summary_created)


class _Shown(NamedTuple):
    """A finished record's JSON line, rendered when it was read, and its summary (for the lease warning)."""

    line: str
    summary: Summary
    long_lease: bool

    @property
    def id(self) -> str:
        return self.summary.id


def _list_table(
    state: State, wanted: Callable[[Record], bool], open_only: bool, newest: bool, limit: int | None
) -> None:
    """``list`` on a terminal: one table of the chosen jobs, in the order of the piped listing.

    With ``--active`` or ``--orphans`` only open records can be chosen: they
    come from :meth:`Store.list_open`, the finished ones known by their states
    (from the summary cache when it vouches for them). Otherwise every record
    is read once, in one pass (:meth:`Store.scan`), and what is kept is the
    records the table may show -- with ``--limit N``, the first N of the order
    so far, never the whole store.
    """
    store = state.store()
    every: dict[str, str]
    if open_only:
        opened = store.list_open()
        every, unreadable = opened.states, opened.unreadable
        kept = [rec for rec in opened if wanted(rec)]
    else:
        every, unreadable, kept = {}, [], []
        bound = None if limit is None else 2 * limit + 256
        for rec in store.scan(unreadable, summaries=False):
            if not isinstance(rec, Record):  # summaries=False: never, but a store may not know it
                continue
            every[rec.id] = rec.state
            if wanted(rec):
                kept.append(rec)
                if bound is not None and len(kept) >= bound:
                    kept = render.view_order(kept, newest)[:limit]
        unreadable.sort(key=lambda pair: pair[0])
    chosen = render.view_order(kept, newest)[:limit]
    _print_records(state, chosen, render.list_line, every, Listing(unreadable=unreadable))


class _Best:
    """The ``n`` first entries of the listing order seen so far, of any number offered one by one.

    The order is ascending ``(created, id)`` keys, or descending with
    ``newest``; keys are unique (an id appears once). A heap of at most ``n``
    entries whose top is the one to drop next.
    """

    def __init__(self, n: int, newest: bool) -> None:
        self.n = n
        self.newest = newest
        self.heap: list[tuple[Any, tuple[int, str], Any]] = []

    def add(self, key: tuple[int, str], value: Any) -> None:
        import heapq

        entry = (key if self.newest else _Later(key), key, value)
        if len(self.heap) < self.n:
            heapq.heappush(self.heap, entry)
        elif entry[0] > self.heap[0][0]:  # comes before the worst kept: it takes that one's place
            heapq.heapreplace(self.heap, entry)

    def items(self) -> list[tuple[tuple[int, str], Any]]:
        return [(key, value) for _, key, value in self.heap]


class _Later:
    """A key that sorts in reverse: the heap of the oldest-first order keeps the newest of them on top."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[int, str]) -> None:
        self.key = key

    def __lt__(self, other: _Later) -> bool:
        return other.key < self.key

    def __gt__(self, other: _Later) -> bool:
        return self.key < other.key


def _list_piped(
    state: State,
    wanted: Callable[[Record], bool],
    kind: tuple[str, ...],
    states: tuple[str, ...],
    owner: str | None,
    whole: bool,
    open_only: bool,
    newest: bool,
    limit: int | None,
) -> None:
    """``list`` piped or ``--json``: the order of the table, read in two steps (docs/reference/cache.md).

    The active jobs come from :meth:`Store.list_open` and are written before
    any finished record is read. The ended ones then come from
    :meth:`Store.scan` -- a finished record the summary cache vouches for as
    its summary, undecoded [JOB-T1] -- and are written once all are in,
    because they are shown by creation time, which their ids need not follow.

    Every record is read and decoded at most once: a finished record that
    ``list_open`` decodes anyway (the cache is absent, or does not vouch
    for it) is kept from there and ``scan`` leaves it out. What is kept of a
    finished record until it is written is its summary, or with ``--json``
    its line, never the record, so memory does not grow with the records
    beyond what the lines say.
    """
    _PipedList(state, wanted, kind, states, owner, newest, limit).write(whole, open_only)


class _PipedList:
    """One ``list`` written piped or as ``--json`` (:func:`_list_piped`): what it keeps between its two steps."""

    def __init__(
        self,
        state: State,
        wanted: Callable[[Record], bool],
        kind: tuple[str, ...],
        states: tuple[str, ...],
        owner: str | None,
        newest: bool,
        limit: int | None,
    ) -> None:
        self.state, self.wanted, self.kind, self.states, self.owner = state, wanted, kind, states, owner
        self.newest, self.limit = newest, limit
        self.every = not kind and not states and owner is None  # summarised() of every summary
        self.store = state.store()
        self.now = self.store.now()
        # Summary, or with --json _Shown: sorted by _listing_order once all are in
        self.ended: list[Any] = []
        self.taken: dict[str, tuple[Summary, Any]] = {}
        # With --json and --limit, only the first `limit` ended jobs of the order can be shown:
        # those records are kept (at most `limit` of them) and rendered at the end, not every one.
        self.best = _Best(limit, newest) if state.json and limit is not None else None
        self.lines = render.Lines()
        self.shown: list[Record | Summary] = []
        self.flagged: set[str] = set()
        self.unreadable: dict[str, JobError] = {}
        # The latest lease expiry among the summaries handed over by many(), and how many those are:
        # when every ended job came that way, the lease check of thousands needs no pass over them.
        self.most_expires = 0
        self.from_many = 0

    def shown_json(self, rec: Record, brief: Summary) -> _Shown:
        flag = rec.id in self.state.long_leases([rec])
        # An ended job's JSON does not look at other jobs' states (render.scheduling).
        return _Shown(render.json_line(render.job_json(rec, self.now, None, flag)), brief, flag)

    def summarised(self, item: Summary) -> bool:
        """``wanted`` for a finished record known by its summary (never with ``whole``: those take the record)."""
        return (
            (not self.kind or item.kind in self.kind)
            and (not self.states or item.state in self.states)
            and (self.owner is None or item.owner == self.owner)
        )

    def keep(self, rec: Record | Summary, how: Any) -> None:
        """A finished record met (and decoded) in either step: what its line needs, and no more."""
        if isinstance(rec, Summary):  # list_open(briefly=True) read it in another process
            if how is not None:
                self.taken[rec.id] = (rec, how)
            if self.every or self.summarised(rec):
                self.ended.append(rec)
            return
        brief = summary_of(rec)
        if how is not None:
            self.taken[rec.id] = (brief, how)
        if not self.wanted(rec):
            return
        if self.best is not None:
            self.best.add((brief.created, rec.id), (rec, brief))
        elif self.state.json:
            self.ended.append(self.shown_json(rec, brief))
        else:
            self.ended.append(brief)

    #: What list_open hands each finished record to (``finished``): this listing itself.
    __call__ = keep

    def many(self, summaries: list[Summary]) -> None:
        """:meth:`keep` of summaries handed over together, none with a file's status (``finished.many``).

        Their latest lease expiry is noted while they are fresh in memory (a
        pass over 100,000 of them once all are in costs the listing's end 15 ms).
        """
        kept = summaries if self.every else list(filter(self.summarised, summaries))
        if kept:
            self.ended.extend(kept)
            self.most_expires = max(self.most_expires, max(map(_summary_expires, kept)))
            self.from_many += len(kept)

    def write(self, whole: bool, open_only: bool) -> None:
        state, store, now, lines = self.state, self.store, self.now, self.lines
        wants_ended = not open_only and (not self.states or any(s in TERMINAL for s in self.states))
        briefly = not state.json and not whole  # a line that a summary serves
        opened = store.list_open(finished=self if wants_ended else None, briefly=briefly)  # keep, many
        every = opened.states  # what dependencies are in, for the JSON
        self.unreadable = {job_id: exc for job_id, exc in opened.unreadable}
        try:
            chosen = render.view_order([rec for rec in opened if self.wanted(rec)], self.newest)[: self.limit]
            self.flagged |= state.long_leases(chosen)
            roster = _roster(state, chosen) if state.json else UNKNOWN  # read once for the listing (JSON only)
            for rec in chosen:
                self.shown.append(rec)
                if state.json:
                    lines.out_json(_judged(render.job_json(rec, now, every, rec.id in self.flagged), rec, roster))
                else:
                    lines.out(render.list_line(rec))
            left = None if self.limit is None else self.limit - len(chosen)
            if wants_ended and (left is None or left > 0):
                self.write_ended(opened, briefly, left)
        finally:
            lines.flush()
        if len(self.ended) >= _KEEP_FROM:
            _keep_until_exit(self, opened)
        summary_write_aside()  # the cache's listing part, by a child this process does not wait for
        for done in self.shown if self.flagged else ():
            if done.id in self.flagged:
                _warn_long_lease(state, done)
        if self.unreadable:
            click.echo(render.unreadable_line(sorted(self.unreadable.items())), err=True)
            click.get_current_context().exit(EXIT_FAILURE)

    def write_ended(self, opened: OpenListing, briefly: bool, left: int | None) -> None:
        """The ended jobs: a summary serves unless the JSON or a filter (--pipeline, --by) needs the whole record."""
        state, ended = self.state, self.ended
        skip = {rec.id for rec in opened} | set(self.unreadable)  # in the snapshot of the active ones
        scanned: list[tuple[str, JobError]] = []
        for item in self.store.scan(scanned, summaries=briefly, taken=self.taken, opened=opened):
            if item.id in skip:
                continue
            if isinstance(item, Summary):
                if self.summarised(item):
                    ended.append(item)
            elif item.terminal:
                self.keep(item, None)
        if self.best is not None:
            ended.extend(self.shown_json(*kept) for _, kept in self.best.items())
        for job_id, exc in scanned:
            self.unreadable.setdefault(job_id, exc)
        _listing_order(ended, state.json)
        if self.newest:
            ended.reverse()
        picked = ended if left is None else ended[:left]
        if state.json:  # each ended job's line was rendered when it was read (keep)
            for entry in picked:
                assert isinstance(entry, _Shown)
                if entry.long_lease:
                    self.flagged.add(entry.id)
                self.shown.append(entry.summary)
                self.lines.out(entry.line)
        else:  # summaries alone: their lines written as one
            summaries: list[Summary] = picked
            most = self.most_expires if len(ended) == self.from_many else None  # else one came another way
            self.flagged |= _long_summaries(state, summaries, self.now, most)
            self.shown.extend(summaries)
            self.lines.out_all(render.summary_lines(summaries))


#: A listing of at least this many ended jobs is never let go of: the process ends without freeing it.
_KEEP_FROM = 2000


def _keep_until_exit(*held: object) -> None:
    """Keep ``held`` until the process ends, never freed: a listing of thousands, once it is printed.

    Freeing a listing of 100,000 summaries (a million and a half objects)
    costs a tenth of a second for nothing, and writes to every page they
    are on, which the child writing the cache's listing part still shares:
    each such page would be copied first. They are put in a reference cycle
    that the collector is told never to look at again (:func:`gc.freeze`):
    neither the collector nor the interpreter's exit ever frees it.
    """
    import gc

    cycle: list[object] = [*held]
    cycle.append(cycle)
    gc.freeze()


def _long_summaries(state: State, items: list[Summary], now: datetime, most: int | None = None) -> set[str]:
    """:meth:`State.long_leases` for finished records known by their summaries.

    ``most``: the latest expiry among ``items`` when it is known (or a later
    one); at or before the cutoff, none of them is looked at.
    """
    from .. import limits

    # A lease ending more than the smallest max_ttl (and the slack) ahead, compared in whole microseconds
    # first -- a millisecond short, so that float rounding cannot drop one -- then as State.long_leases does.
    cutoff = micros(now) + int((limits.MAX_TTL.low + limits.LEASE_SLACK) * 1e6) - 1000
    if most is not None and most <= cutoff:
        return set()
    ahead = [
        s for s in items if s.expires > cutoff and limits.lease_too_long(moment(s.expires), now, limits.MAX_TTL.low)
    ]
    if not ahead:
        return set()
    ceiling = state.max_ttl()
    return {s.id for s in ahead if limits.lease_too_long(moment(s.expires), now, ceiling)}


@click.command(cls=JobCommand, short_help="List jobs nobody holds that a worker may adopt.")
@click.option("--kind", multiple=True, type=TEXT, metavar="K", help="Only jobs of kind K (repeatable).")
@common
@pass_state
def orphans(state: State, kind: tuple[str, ...]) -> None:
    """List orphans: `<id> kind=K state=S checkpoint=C` a line.

    An orphan is not ended, not held, not transferred and not paused (unless
    it was still running when its holder vanished): a new job nobody has
    claimed yet, or one whose holder died or let go. Its checkpoint is where
    the next holder resumes. Unreadable records: as for list.

    \b
    Example:
      jobctl orphans --kind backup | while read -r id rest; do echo "stranded: $id"; done
    """
    store = state.store()
    # The open records, and every record's state: the states of what orphans
    # wait for are shown too, without decoding the finished records [JOB-T1].
    listing = store.list_open()
    now = store.now()
    chosen = [rec for rec in listing if is_orphan(rec, now) and (not kind or rec.kind in kind)]
    _print_records(state, chosen, render.orphan_line, listing.states, listing)
