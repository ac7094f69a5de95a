"""jobctl's scheduling metadata: retries, not-before times, dependencies, pipelines.

These apply to any kind, so they live in the record's ``extensions`` under
jobctl's own namespaced keys, which every other implementation carries back
untouched [JOB-F2]:

``jobctl.run/retry@1``
    ``{"intervals": [10, 30, ...], "no_retry_on": [2, 64], "failures": 1,
    "not_before": "<timestamp>"}``. ``intervals[k]`` is the wait before the
    retry that follows the ``k+1``-th failure; its length is the number of
    retries. ``failures`` counts failed attempts so far (the running attempt
    is ``failures + 1``). ``not_before`` is when the next attempt may start.
``jobctl.run/after@1``
    ``{"jobs": ["<id>", ...]}``: the job may start only once every listed job
    is ``complete``. Declared **critical**, so an implementation that does
    not understand dependencies refuses to adopt the job (``unknown_schema``)
    instead of running it early.
``jobctl.run/pipeline@1``
    ``{"name": "nightly", "stage": "fetch"}``: membership, for display.

``jobctl.run/approval@1``
    ``{"required": true}``: the job is a gate. Submitted with ``hold``, it
    carries intent ``pause``: nothing adopts it until somebody asks for
    ``run`` -- the "waiting for approval" status. Its intent reads ``run``
    once approved, so this key is what remembers the gate: a retry of the
    job is held again (:func:`jobctl.lifecycle.retry`).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import ids
from .errors import Invalid, JobError, NotFound
from .priority import pick_key
from .record import AFTER, PIPELINE, RETRY, ZERO_TIME, Intent, Record, format_time, held, is_orphan, parse_time

__all__ = [
    "RETRY",
    "AFTER",
    "PIPELINE",
    "APPROVAL",
    "RETRY_OF",
    "retry_of_link",
    "DEFAULT_INTERVALS",
    "Retry",
    "default_intervals",
    "plan",
    "retry_of",
    "after_of",
    "pipeline_of",
    "not_before",
    "record_failure",
    "blocked_by",
    "Cycles",
    "closes_cycle",
    "cycle_words",
    "runnable",
    "is_orphan",
    "attempt",
    "shown_attempt",
    "parse_intervals",
    "check_label",
    "gated",
    "Stage",
    "pipeline_stages",
    "PIPELINE_STATES",
    "pipeline_state",
]

#: A gate: the job waits for an approval, and so does every retry of it.
APPROVAL = "jobctl.run/approval@1"
#: The link from a retry to the job it retries: ``{"job": "<id>"}`` (:mod:`jobctl.lifecycle`).
RETRY_OF = "jobctl.run/retry-of@1"

DEFAULT_INTERVALS: tuple[float, ...] = (10, 30, 60, 120, 240, 240, 240, 240, 240, 240)


def parse_intervals(text: str, what: str = "retry intervals") -> list[float]:
    """``"10,30,60"`` -> ``[10, 30, 60]`` seconds; refuses anything else.

    At most :data:`jobctl.limits.RETRY_INTERVALS_MAX` intervals, each within
    :data:`jobctl.limits.RETRY_INTERVAL` (a year): a not-before time must stay
    a time a record can hold.
    """
    from . import limits

    out: list[float] = []
    parts = text.split(",")
    if len(parts) > limits.RETRY_INTERVALS_MAX:
        raise Invalid(f"{what}: {len(parts)} intervals, more than {limits.RETRY_INTERVALS_MAX}")
    for part in parts:
        part = part.strip()
        try:
            if not part.isascii() or "_" in part:  # float() takes "٣" and "1_0": no duration is spelt so
                raise ValueError(part)
            value = float(part)
        except ValueError:
            raise Invalid(f"{what}: {part!r} is not a number of seconds") from None
        if not value >= 0 or value == float("inf"):
            raise Invalid(f"{what}: {part!r} is not a number of seconds")
        if not limits.RETRY_INTERVAL.holds(value):
            raise Invalid(f"{what}: {part!r} is out of range ({limits.RETRY_INTERVAL.text()})")
        out.append(int(value) if value.is_integer() else value)
    return out


def default_intervals(env: Mapping[str, str] | None = None) -> list[float]:
    """The retry schedule: ``JOB_RETRY_INTERVALS`` when set, else :data:`DEFAULT_INTERVALS`."""
    env = os.environ if env is None else env
    text = env.get("JOB_RETRY_INTERVALS", "").strip()
    if text:
        return parse_intervals(text, "JOB_RETRY_INTERVALS")
    return list(DEFAULT_INTERVALS)


@dataclass
class Retry:
    intervals: list[float] = field(default_factory=list)
    no_retry_on: list[int] = field(default_factory=list)
    failures: int = 0
    not_before: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"intervals": self.intervals}
        if self.no_retry_on:
            out["no_retry_on"] = self.no_retry_on
        out["failures"] = self.failures
        if self.not_before is not None:
            out["not_before"] = format_time(self.not_before)
        return out


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise Invalid(f"{what} is not a list of integers")
    return value


def retry_of(rec: Record) -> Retry | None:
    """The retry policy and state a record carries, or None."""
    raw = rec.extensions.get(RETRY)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise Invalid(f"extension {RETRY} is not an object", rec.id)
    intervals = raw.get("intervals", [])
    if not isinstance(intervals, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in intervals
    ):
        raise Invalid(f"{RETRY}.intervals is not a list of seconds", rec.id)
    failures = raw.get("failures", 0)
    if type(failures) is not int or failures < 0:
        raise Invalid(f"{RETRY}.failures is not a count", rec.id)
    return Retry(
        list(intervals),
        list(_ints(raw.get("no_retry_on", []), f"{RETRY}.no_retry_on")),
        failures,
        parse_time(raw.get("not_before"), f"{RETRY}.not_before"),
    )


def after_of(rec: Record) -> list[str]:
    """Ids this job waits for."""
    raw = rec.extensions.get(AFTER)
    if raw is None:
        return []
    jobs = raw.get("jobs") if isinstance(raw, dict) else None
    if not isinstance(jobs, list) or not all(isinstance(j, str) and j for j in jobs):
        raise Invalid(f"extension {AFTER} has no list of job ids", rec.id)
    return list(jobs)


def pipeline_of(rec: Record) -> tuple[str, str] | None:
    """``(pipeline name, stage)`` or None."""
    raw = rec.extensions.get(PIPELINE)
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return None
    stage = raw.get("stage")
    return raw["name"], stage if isinstance(stage, str) else ""


def retry_of_link(rec: Record) -> str | None:
    """The id of the job ``rec`` retries (``jobctl.run/retry-of@1``), or None."""
    link = rec.extensions.get(RETRY_OF)
    job = link.get("job") if isinstance(link, dict) else None
    return job if isinstance(job, str) else None


def not_before(rec: Record) -> datetime | None:
    retry = retry_of(rec)
    return retry.not_before if retry is not None else None


def check_label(text: str, what: str) -> str:
    """``text`` if it can name a pipeline, a stage or a capability: not blank, one line of printable text.

    Refused at input (``invalid`` naming ``what``), as a kind is: a newline
    or an escape would split or colour every line that shows the job. A
    record another writer left with such a name is read as it is.
    """
    if not isinstance(text, str):
        raise Invalid(f"{what} must be text, not {type(text).__name__}")
    if not text.strip():
        raise Invalid(f"{what} is blank")
    if not text.isprintable():
        raise Invalid(f"{what} {text!r} holds a character that is not printable (a newline or control character)")
    return text


def plan(
    rec: Record,
    *,
    retries: int | None = None,
    intervals: Iterable[float] | None = None,
    no_retry_on: Iterable[int] = (),
    after: Iterable[str] = (),
    pipeline: str | None = None,
    stage: str | None = None,
    start_after: datetime | None = None,
    hold: bool = False,
    by: str = "",
    env: Mapping[str, str] | None = None,
) -> Record:
    """Write the scheduling choices of a submit into ``rec`` (before it is submitted).

    ``retries`` alone takes that many intervals from the default schedule
    (repeating its last entry); ``intervals`` alone gives one retry per
    interval; both: ``retries`` intervals, the given list extended by its
    last entry. Neither: one retry per interval of ``JOB_RETRY_INTERVALS``
    when it is set (a configured schedule is meant to be used), else no
    retries, unless ``no_retry_on`` or ``start_after`` need the key.
    ``retries=0`` opts out of a configured schedule. A ``stage`` needs a
    ``pipeline`` (``Invalid``): a stage of no pipeline would be dropped unsaid.
    """
    if stage and not pipeline:
        raise Invalid("stage needs pipeline", rec.id)
    chosen: list[float] | None = None
    env = os.environ if env is None else env
    if intervals is None and retries is None and env.get("JOB_RETRY_INTERVALS", "").strip():
        intervals = default_intervals(env)
    if intervals is not None:
        from . import limits

        chosen = list(intervals)
        if len(chosen) > limits.RETRY_INTERVALS_MAX:
            raise Invalid(f"retry intervals: {len(chosen)} intervals, more than {limits.RETRY_INTERVALS_MAX}")
        for value in chosen:  # as parse_intervals takes them: a library caller's list too
            limits.RETRY_INTERVAL.check(value, "retry interval")
        if not chosen and retries:
            raise Invalid("an empty retry schedule cannot give retries")
    if retries is not None:
        from . import limits

        if not isinstance(retries, int) or not limits.RETRIES.holds(retries):
            raise Invalid(f"retries must be a whole number ({limits.RETRIES.text()}), not {retries!r}")
        base = chosen if chosen else default_intervals(env)
        chosen = [base[min(k, len(base) - 1)] for k in range(retries)] if base else []
    codes = list(no_retry_on)
    for code in codes:
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
            raise Invalid(f"no-retry exit code {code!r} is not 0..255")
    if chosen is not None or codes or start_after is not None:
        rec.extensions[RETRY] = Retry(chosen or [], codes, 0, start_after).to_json()
    deps = list(dict.fromkeys(after))
    if deps:
        for dep in deps:
            if not isinstance(dep, str) or not dep.strip():
                raise Invalid("a dependency id is blank")
            try:
                ids.check(dep)
            except Invalid as exc:
                # No record can ever have it: the job would wait for nothing, then be cancelled [JOB-S4].
                raise Invalid(f"dependency {exc.message}", rec.id) from None
            if dep == rec.id:
                raise Invalid(f"job {rec.id} cannot wait for itself", rec.id)
        rec.extensions[AFTER] = {"jobs": deps}
        if AFTER not in rec.critical:
            rec.critical.append(AFTER)
    if pipeline:
        stage = check_label(stage, "stage") if stage else rec.kind
        rec.extensions[PIPELINE] = {"name": check_label(pipeline, "pipeline"), "stage": stage}
    if hold:
        rec.intent = Intent("pause", by)
        rec.extensions[APPROVAL] = {"required": True}
    return rec


def gated(rec: Record) -> bool:
    """Whether ``rec`` is a gate: submitted held for approval (``jobctl.run/approval@1``), or paused as it stands.

    A record written before the key existed is known by its intent alone, and
    only while nobody has approved or rejected it.
    """
    raw = rec.extensions.get(APPROVAL)
    marked = isinstance(raw, dict) and raw.get("required") is True
    return marked or rec.want == "pause"


def record_failure(rec: Record, exit_code: int | None, now: datetime, *, retryable: bool = True) -> bool:
    """Count a failed attempt on ``rec`` (its holder's copy); True if it will be retried.

    On a retry the record's ``not_before`` moves to ``now`` plus the next
    interval. An exit code listed in ``no_retry_on`` fails at once, and so
    does a failure its work called not ``retryable`` (a Python processor's
    ``jobctl.NotRetryable``).
    """
    retry = retry_of(rec)
    if retry is None:
        return False
    retry.failures += 1
    again = (
        retryable
        and retry.failures <= len(retry.intervals)
        and (exit_code is None or exit_code not in retry.no_retry_on)
    )
    if again:
        from . import limits

        try:
            retry.not_before = limits.later(now, retry.intervals[retry.failures - 1], "retry interval", rec.id)
        except Invalid:
            # A planted interval past year 9999: no retry can be set, so none is made and the job fails.
            # (Refusing the write instead would leave the job running, to be adopted and failed again for ever.)
            again = False
    rec.extensions[RETRY] = retry.to_json()
    return again


def attempt(rec: Record) -> int:
    """The number of the attempt that starts now (1 for the first)."""
    retry = retry_of(rec)
    return (retry.failures if retry is not None else 0) + 1


def shown_attempt(rec: Record) -> int:
    """The attempt a person is shown: the one that starts next, or the last one that ran.

    :func:`attempt` counts the attempt about to start (``failures + 1``). A job
    that ended ``failed`` under a retry policy starts no further attempt: its
    failures are all the attempts that ran, and the last of them is the one its
    error names (``attempt 2: exit status 4``).
    """
    retry = retry_of(rec)
    if retry is None:
        return 1
    if rec.state == "failed" and retry.failures > 0:
        return retry.failures
    return retry.failures + 1


def blocked_by(rec: Record, states: Mapping[str, str], now: datetime) -> tuple[str, str]:
    """Why ``rec`` may not start now: ``("", "")`` when it may.

    Otherwise ``(reason, detail)`` with reason one of ``waiting`` (a
    dependency is not complete yet, or the not-before time has not come),
    ``doomed`` (a dependency ended failed or cancelled, or is missing:
    the job must be cancelled, never left waiting), ``held`` (paused).
    ``states`` maps job ids to their states.
    """
    for dep in after_of(rec):
        state = states.get(dep)
        if state is None:
            return "doomed", f"dependency {dep} does not exist"
        if state in ("failed", "cancelled"):
            return "doomed", f"dependency {dep} ended {state}"
        if state != "complete":
            return "waiting", f"waiting for {dep} ({state})"
    if rec.want == "pause":
        return "held", "paused; resume with: jobctl intent <id> run"
    when = not_before(rec)
    if when is not None and now < when:
        return "waiting", f"not before {format_time(when)}"
    return "", ""


class Cycles:
    """The open jobs that wait for themselves: members of a cycle of dependencies, which can never start.

    ``records`` are the open jobs of one view by id. A job among them that
    ``waits`` (the caller's word: not one a live lease holds, nor one
    transferred, which may end all the same) waits for each of its
    dependencies among them; a job on a cycle of such waits can never
    start, nor can any other job of its cycle. Nothing is read: the first
    question walks the jobs it reaches, once each (Tarjan's strongly
    connected components, without recursion), and the answers are kept, so
    one instance serves one look at a view that does not change meanwhile.
    """

    def __init__(self, records: Mapping[str, Record], waits: Callable[[Record], bool]) -> None:
        self._records = records
        self._waits = waits
        self._deps: dict[str, list[str]] = {}
        #: Each job walked, to the number of its component; the numbers of the components that are cycles.
        self._component: dict[str, int] = {}
        self._cyclic: set[int] = set()
        self._count = 0

    def through(self, job_id: str) -> list[str] | None:
        """A shortest cycle from ``job_id`` back to it (``[a, b, a]``); None when it is on none."""
        if job_id not in self._records:
            return None
        if job_id not in self._component:
            component = self._component
            for dep in self._edges(job_id):
                if dep not in component:  # itself among them (not yet in one) included
                    self._walk(job_id)
                    break
            else:  # all it waits for is judged already (most often: pick order is age): a component alone
                component[job_id] = self._count
                self._count += 1
        number = self._component[job_id]
        return self._path(job_id, number) if number in self._cyclic else None

    def _edges(self, job_id: str) -> list[str]:
        deps = self._deps.get(job_id)
        if deps is None:
            rec = self._records.get(job_id)
            deps = []
            if rec is not None and self._waits(rec):
                try:
                    deps = [dep for dep in dict.fromkeys(after_of(rec)) if dep in self._records]
                except JobError:
                    pass  # unreadable scheduling data: judged doomed on its own
            self._deps[job_id] = deps
        return deps

    def _walk(self, start: str) -> None:
        index = {start: 0}
        low = {start: 0}
        stack = [start]
        on_stack = {start}
        work = [(start, iter(self._edges(start)))]
        while work:
            node, deps = work[-1]
            for dep in deps:
                if dep in self._component:
                    continue  # in a component already found: no cycle through here
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(self._edges(dep))))
                    break
                if dep in on_stack:
                    low[node] = min(low[node], index[dep])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    self._close(node, stack, on_stack)

    def _close(self, root: str, stack: list[str], on_stack: set[str]) -> None:
        number = self._count
        self._count += 1
        size = 0
        while True:
            member = stack.pop()
            on_stack.discard(member)
            self._component[member] = number
            size += 1
            if member == root:
                break
        if size > 1 or root in self._edges(root):
            self._cyclic.add(number)

    def _path(self, job_id: str, number: int) -> list[str]:
        """The shortest way from ``job_id`` back to it inside its component (breadth first)."""
        came: dict[str, str] = {}
        queue = deque([job_id])
        while queue:
            node = queue.popleft()
            for dep in self._edges(node):
                if self._component.get(dep) != number:
                    continue
                if dep == job_id:
                    path = [node]
                    while path[-1] != job_id:
                        path.append(came[path[-1]])
                    path.reverse()
                    path.append(job_id)
                    return path
                if dep not in came:
                    came[dep] = node
                    queue.append(dep)
        return [job_id, job_id]  # not reached: a component that is a cycle has a way back


def cycle_words(path: list[str]) -> str:
    """How a cycle is named: ``a -> b -> a``; a long one by its first and last few jobs, and their number."""
    if len(path) <= 9:
        return " -> ".join(path)
    return f"{' -> '.join([*path[:4], '...', *path[-4:]])} ({len(path) - 1} jobs)"


def closes_cycle(rec: Record, load: Callable[[str], Record]) -> list[str] | None:
    """The cycle ``rec`` would close with the jobs ``load`` finds (``[rec, dep, ..., rec]``), or None.

    Walks from ``rec``'s dependencies down the open jobs they wait for (a
    finished one waits for nothing any more), each read once; a job that
    cannot be read ends its branch (submit allows a dependency that does not
    exist yet).
    """
    start = rec.id
    deps = after_of(rec)
    if not start or not deps:
        return None
    came: dict[str, str] = {}
    queue: deque[str] = deque()
    for dep in deps:
        if dep not in came:
            came[dep] = start
            queue.append(dep)
    while queue:
        node = queue.popleft()
        if node == start:
            path = [start]
            step = came[start]
            while step != start:
                path.append(step)
                step = came[step]
            path.append(start)
            path.reverse()
            return path
        try:
            found = load(node)
            ups = [] if found.terminal else after_of(found)
        except JobError:
            continue
        for dep in ups:
            if dep not in came:
                came[dep] = node
                queue.append(dep)
    return None


def refuse_cycle(rec: Record, load: Callable[[str], Record]) -> None:
    """``Invalid`` when ``rec``, about to be submitted, would wait for itself: a dependency waits for its id.

    Only a job given its id can be waited for before it exists, so only such
    a job with dependencies is walked (:func:`closes_cycle`). An id already
    taken is left to the submit's own refusal (``exists``, or an exists-ok).
    A cycle made some other way (an import, another writer) is the worker's
    to cancel (:class:`Cycles`).
    """
    if not rec.id or AFTER not in rec.extensions:
        return
    path = closes_cycle(rec, load)
    if path is None:
        return
    try:
        load(rec.id)
    except NotFound:
        raise Invalid(f"job {rec.id} would wait for itself: {cycle_words(path)}", rec.id) from None
    except JobError:
        return


def runnable(
    records: Iterable[Record],
    now: datetime,
    kinds: Iterable[str] | None = None,
    skipped: list[tuple[str, JobError]] | None = None,
    states: Mapping[str, str] | None = None,
) -> list[Record]:
    """The records a worker may claim now: higher priority first, then oldest first.

    Orphans [JOB-I11] [JOB-I12] whose dependencies are all complete, whose
    not-before time has passed, not paused, and (when ``kinds`` is given) of
    one of those kinds. Dependency states are looked up in ``states`` (every
    record's, as :meth:`Store.list_open` gives them), else among ``records``,
    which should then be the whole store. A record whose scheduling data is
    malformed is left out -- it must not stop every other job -- and named in
    ``skipped`` when a list is given; its dependents wait.
    """
    recs = list(records)
    if states is None:
        states = {r.id: r.state for r in recs}
    wanted = None if kinds is None else set(kinds)
    out = []
    for rec in recs:
        if wanted is not None and rec.kind not in wanted:
            continue
        if not is_orphan(rec, now):
            continue
        try:
            blocked = blocked_by(rec, states, now)[0]
        except JobError as exc:
            if skipped is not None:
                skipped.append((rec.id, exc))
            continue
        if blocked == "":
            out.append(rec)
    # Higher priority first, then oldest first to the microsecond (jobctl.priority.pick_key).
    out.sort(key=pick_key)
    return out


@dataclass
class Stage:
    """One stage of a pipeline as ``jobctl pipeline`` shows it: its newest run.

    ``status``: ``done``, ``running``, ``waiting``, ``failed`` or ``cancelled``;
    ``detail`` says what it waits for, who runs it, or why it ended.
    ``history``: the earlier runs it replaces (``jobctl.run/retry-of@1``),
    newest first.
    """

    record: Record
    stage: str
    status: str
    detail: str
    after: list[str] = field(default_factory=list)
    history: list[Record] = field(default_factory=list)
    #: For a waiting stage, what it waits for first (:func:`blocked_by`): ``held``, ``waiting``, ``doomed``, or "".
    waits: str = ""


#: A pipeline's overall state (:func:`pipeline_state`), the first that holds in this order.
PIPELINE_STATES = ("running", "waiting_for_approval", "retry_scheduled", "failed", "waiting", "complete")


def _stage_status(rec: Record, states: Mapping[str, str], now: datetime) -> tuple[str, str, str]:
    if rec.state == "complete":
        return "done", "", ""
    if rec.state in ("failed", "cancelled"):
        return rec.state, rec.error, ""
    if held(rec.lease, now):
        return "running", f"by {rec.lease.owner}, epoch {rec.lease.epoch}", ""
    if rec.state == "transferred":
        return "running", "transferred; the external system finishes it", ""
    if rec.state == "running":
        return "running", f"lease of {rec.lease.owner or 'its holder'} lapsed; the next worker adopts it", ""
    try:
        why, detail = blocked_by(rec, states, now)
    except Invalid as exc:
        return "waiting", f"unreadable scheduling metadata: {exc.message}", "waiting"
    if why == "held":
        return "waiting", f"for approval (jobctl approve {rec.id})", why
    if why == "doomed":
        return "waiting", f"to be cancelled: {detail}", why
    if why == "waiting":
        return "waiting", detail.removeprefix("waiting "), why
    return "waiting", "ready; no worker has taken it yet", why


def _newest_runs(members: Mapping[str, Record]) -> dict[str, list[Record]]:
    """Each newest run's id to the runs it replaces, newest first: a retry's chain of ``retry-of`` links.

    Two replacements of one job (what two racing retries made before a job
    had one replacement id) show as one run, the newer.
    """
    newest: dict[str, tuple[datetime, str]] = {}
    for rec in members.values():
        old = retry_of_link(rec)
        mark = (rec.created_at or ZERO_TIME, rec.id)
        if old is not None and old in members and (old not in newest or mark > newest[old]):
            newest[old] = mark
    out: dict[str, list[Record]] = {}
    for job_id, rec in members.items():
        old = retry_of_link(rec)
        if job_id in newest or (old is not None and old in newest and newest[old][1] != job_id):
            continue  # replaced (or a replacement superseded by a newer one): it is history
        history: list[Record] = []
        seen = {job_id}
        while old is not None and old in members and old not in seen:
            history.append(members[old])
            seen.add(old)
            old = retry_of_link(members[old])
        out[job_id] = history
    return out


def pipeline_stages(records: Iterable[Record], name: str, now: datetime) -> list[Stage]:
    """The stages of pipeline ``name``, each as its newest run, after the stages it waits for, oldest first otherwise.

    A retry (``jobctl.run/retry-of@1``) is a new run of the stage it
    retries, not a stage of its own: the runs it replaces are its
    :attr:`Stage.history`.
    """
    recs = list(records)
    states = {r.id: r.state for r in recs}
    members: dict[str, Record] = {}
    stages: dict[str, str] = {}
    for rec in recs:
        membership = pipeline_of(rec)
        if membership is not None and membership[0] == name:
            members[rec.id] = rec
            stages[rec.id] = membership[1] or rec.kind
    runs = _newest_runs(members)
    deps: dict[str, list[str]] = {}
    for job_id in runs:
        try:
            deps[job_id] = after_of(members[job_id])
        except Invalid:
            deps[job_id] = []
    placed: list[str] = []
    done: set[str] = set()
    pending = sorted(runs, key=lambda j: (members[j].created_at or ZERO_TIME, j))
    while pending:
        ready = [j for j in pending if all(d in done or d not in runs for d in deps[j])]
        if not ready:  # a cycle (no writer makes one): show the rest in age order
            ready = pending
        first = ready[0]
        placed.append(first)
        done.add(first)
        pending.remove(first)
    out = []
    for job_id in placed:
        status, detail, waits = _stage_status(members[job_id], states, now)
        out.append(Stage(members[job_id], stages[job_id], status, detail, deps[job_id], runs[job_id], waits))
    return out


def pipeline_state(stages: Iterable[Stage], now: datetime) -> str:
    """A pipeline's state from its stages (:data:`PIPELINE_STATES`, the first that holds).

    ``running``: a stage runs. ``waiting_for_approval``: a stage waits for
    its approval and nothing else. ``retry_scheduled``: a stage failed an attempt and waits for
    its next one. ``failed``: a stage's newest run ended ``failed`` or
    ``cancelled``. ``waiting``: a stage has not started. ``complete``: every
    stage is done.
    """
    seen: set[str] = set()
    for stage in stages:
        rec = stage.record
        if stage.status == "running":
            seen.add("running")
        elif stage.waits == "held":
            seen.add("waiting_for_approval")
        elif stage.status == "waiting" and _retry_due(rec, now):
            seen.add("retry_scheduled")
        elif stage.status in ("failed", "cancelled"):
            seen.add("failed")
        elif stage.status == "waiting":
            seen.add("waiting")
    return next((state for state in PIPELINE_STATES if state in seen), "complete")


def _retry_due(rec: Record, now: datetime) -> bool:
    """Whether ``rec`` failed an attempt and its next one may not start yet."""
    try:
        retry = retry_of(rec)
    except JobError:
        return False
    return retry is not None and retry.failures > 0 and retry.not_before is not None and now < retry.not_before
