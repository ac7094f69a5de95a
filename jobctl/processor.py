"""Python processors: a function (plain or ``async def``) as the work of one kind of job.

A processor takes a :class:`Job` and returns a :class:`Result` (or a JSON
value, or None). It runs as a :class:`FunctionWork` under a
:class:`jobctl.keeper.Keeper`, which keeps the job's lease exactly as for a
child process: renewed every third of the TTL, the intent and recall read,
every write fenced by the epoch. What differs is how the work stops: a
function cannot be killed, so a stop (cancel, pause, recall, shutdown)
sets :attr:`Job.stop_requested` and the processor is expected to return
within the grace; an ``async def`` processor that has not is cancelled
(``asyncio.CancelledError`` at its next ``await``); a plain one is left to
finish on its own thread, every write it makes refused by the fencing
[JOB-L5], and the keeper releases the job without it.

The end of a processor is the end of the attempt:

* it returns: its result is stored in the write that completes the job
  (:func:`jobctl.results.set_result`), and its next jobs are submitted
  *before* that write, each under an id derived from the parent's id, its
  position and its kind (:func:`next_id`) with exists-ok semantics. A holder
  that dies between the two leaves the job to be run again by an adopter,
  whose submission finds the same ids: every next job exists exactly once;
* it raises: a failed attempt, counted under the job's retry policy;
  :class:`NotRetryable` fails the job at once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import IO, Any

from .errors import Exists, Invalid, JobError
from .keeper import Keeper, Outcome, Work
from .record import Record, format_time
from .schedule import RETRY_OF, after_of, retry_of_link

__all__ = [
    "Job",
    "Result",
    "NewJob",
    "NotRetryable",
    "ProcessorFunction",
    "FunctionWork",
    "AsyncLoop",
    "next_id",
    "submit_next",
]


class NotRetryable(Exception):
    """Raised by a processor: this failure will not go away on a retry, so the job fails now."""


class NewJob:
    """A job a processor asks for next: submitted when (and only if) its parent completes.

    ``after`` names jobs it waits for, besides its parent: ids, or other
    :class:`NewJob` objects of the same :class:`Result`. ``retries`` (a
    count from the default schedule) replaces the parent's retry policy,
    which it otherwise inherits. ``id`` replaces the derived one (exists-ok all the same).
    ``hold`` makes it a gate, as ``jobctl submit --hold``: it waits for an
    approval (``jobctl approve``) once its dependencies complete, and so
    does every retry of it. ``total`` and ``requires`` are ``submit``'s.
    ``priority`` (a whole number, -1000 to 1000; higher runs first) and
    ``timeout`` (seconds an attempt may run) are ``submit --priority`` and
    ``--timeout``; a next job has neither unless given (``Invalid`` out of range).
    ``exclusive`` is its exclusive key (``submit --exclusive``).
    """

    def __init__(
        self,
        kind: str,
        spec: Any = None,
        *,
        after: Iterable[NewJob | str] = (),
        stage: str | None = None,
        retries: int | None = None,
        id: str | None = None,  # the record's own word for it; the builtin is not needed here
        hold: bool = False,
        total: int = 0,
        requires: Iterable[str] = (),
        priority: int = 0,
        timeout: float | None = None,
        exclusive: str | None = None,
    ) -> None:
        if not isinstance(kind, str) or not kind:
            raise Invalid(f"a next job's kind must be a non-empty string, not {kind!r}")
        from .exclusive import check_key

        self.exclusive = None if exclusive is None else check_key(exclusive, "a next job's exclusive key")
        self.kind = kind
        self.spec = {} if spec is None else spec
        self.after = list(after)
        self.stage = stage
        self.retries = retries
        self.id = id
        if not isinstance(hold, bool):
            raise Invalid(f"a next job's hold must be True or False, not {hold!r}")
        self.hold = hold
        from . import limits

        if isinstance(total, bool) or not isinstance(total, int) or not limits.DONE.holds(total):
            raise Invalid(f"a next job's total must be a whole number ({limits.DONE.text()}), not {total!r}")
        self.total = total
        self.requires = list(requires)
        if not all(isinstance(r, str) and r.strip() for r in self.requires):
            raise Invalid(f"a next job's requires must be non-empty strings, not {self.requires!r}")
        from .priority import check_priority
        from .timeout import check_timeout

        self.priority = check_priority(priority, "a next job's priority")
        self.timeout = None if timeout is None else check_timeout(timeout, "a next job's timeout")

    def __repr__(self) -> str:
        return f"NewJob({self.kind!r}, after={len(self.after)})"


class Result:
    """What a processor returns: ``data`` (any JSON value, stored with the job) and its ``next_jobs``."""

    def __init__(self, data: Any = None, next_jobs: Sequence[NewJob] = ()) -> None:
        self.data = data
        self.next_jobs = list(next_jobs)

    def __repr__(self) -> str:
        return f"Result(data={self.data!r}, next_jobs={self.next_jobs!r})"


class Job:
    """The job a processor runs: what it was asked, and its holder's fenced writes.

    ``spec`` and ``checkpoint_data`` are the record's values as JSON.
    ``checkpoint_data`` is what a predecessor saved (None on a fresh job).
    Writes (:meth:`checkpoint`, :meth:`progress`) present this attempt's
    epoch: once the job is somebody else's they raise ``StaleEpoch`` or
    ``LeaseExpired`` and change nothing [JOB-L5].
    """

    def __init__(self, keeper: Keeper) -> None:
        rec = keeper.rec
        self._keeper = keeper
        self._store = keeper.store
        self._stop = threading.Event()
        self.id = rec.id
        self.kind = rec.kind
        self.epoch = keeper.epoch
        self.attempt = keeper.attempt
        self.spec: Any = _json(rec.opaque_text("spec"))
        self.checkpoint_data: Any = _json(rec.checkpoint_text())
        from .schedule import pipeline_of

        membership = pipeline_of(rec)
        self.pipeline: str | None = membership[0] if membership else None
        self.record = rec

    @property
    def stop_requested(self) -> bool:
        """True once the job was cancelled, paused or recalled, or the worker is stopping: return soon."""
        return self._stop.is_set()

    def wait_stop(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds for a stop request (a sleep that ends early); True if one came."""
        return self._stop.wait(timeout)

    def checkpoint(self, value: Any) -> None:
        """Save what a successor needs to resume (any JSON): a fenced write."""
        _check_json(value, self.id, "checkpoint")

        def mutate(rec: Record) -> None:
            rec.checkpoint = value

        self._store.update(self.id, self.epoch, mutate)

    def progress(self, done: int, total: int | None = None) -> None:
        """Record how far the work got (and, optionally, how far it goes): a fenced write."""
        from . import limits

        for what, n in (("done", done), ("total", total)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not limits.DONE.holds(n)):
                raise Invalid(f"{what} must be a whole number ({limits.DONE.text()}), not {n!r}", self.id)
        now = self._store.now()

        def mutate(rec: Record) -> None:
            rec.progress.done = done
            if total is not None:
                rec.progress.total = total
            rec.progress.updated_at = now

        self._store.update(self.id, self.epoch, mutate)

    def __repr__(self) -> str:
        return f"Job({self.id!r}, kind={self.kind!r}, attempt={self.attempt})"


#: A processor: ``def f(job) -> Result | JSON | None`` or ``async def f(job) -> ...``.
ProcessorFunction = Callable[[Job], Any | Awaitable[Any]]


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _check_json(value: Any, job_id: str, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except RecursionError:  # nested past the interpreter's limit (the record takes far less)
        raise Invalid(f"{what} is not JSON: it nests too deep", job_id) from None
    except (TypeError, ValueError) as exc:
        raise Invalid(f"{what} is not JSON: {exc}", job_id) from None


# -- next jobs --------------------------------------------------------------------


def next_id(parent: Record, position: int, kind: str) -> str:
    """The id of the next job at ``position`` (0-based) of kind ``kind`` that ``parent`` asks for.

    The minted form ``<ms>-<hex20>``: the parent's creation time in Unix
    milliseconds (so a job's next jobs list after it), then 20 hex digits of
    SHA-256 over the parent's id, the position and the kind. The same parent
    asking again (a re-run after its holder died) gets the same ids.
    """
    import hashlib

    created = parent.created_at
    ms = int(created.timestamp() * 1000) if created is not None else 0
    digest = hashlib.sha256(f"{parent.id}\0{position}\0{kind}".encode()).hexdigest()[:20]
    return f"{max(0, ms):013d}-{digest}"


def submit_next(store: Any, parent: Record, next_jobs: Sequence[NewJob]) -> list[str]:
    """Submit ``parent``'s next jobs, each once; returns their ids in the order given.

    Each waits for the parent (so none starts before the parent is
    complete, and a parent that ends otherwise cancels them) and for the
    jobs its ``after`` names; siblings are submitted before the jobs that
    wait for them, so no job ever names one that does not exist yet. Each
    joins the parent's pipeline, with its kind as its stage unless told
    otherwise, and inherits the parent's retry policy unless it sets
    ``retries``. A job already there under the derived id is left as it is
    (exists-ok). A parent that retries a job takes over that job's next
    jobs that ended unrun, under their replacements' ids (:func:`_next_of`).
    Every one is checked as a submission is (its id, kind, spec, retries,
    stage, requires) before any is submitted: one that would be refused
    submits none of them.
    """
    replacing: dict[str, str] = {}  # a next job's id -> the ended next job of the retried run it replaces
    ids = {id(job): (job.id or _next_of(store, parent, n, job.kind, replacing)) for n, job in enumerate(next_jobs)}
    if len(set(ids.values())) != len(ids):
        raise Invalid(f"job {parent.id}: two next jobs have one id", parent.id)
    deps: dict[int, list[str]] = {}
    for job in next_jobs:
        names: list[str] = []
        for dep in job.after:
            if isinstance(dep, NewJob):
                if id(dep) not in ids:
                    raise Invalid(
                        f"job {parent.id}: a next job waits for a NewJob that is not among next_jobs", parent.id
                    )
                names.append(ids[id(dep)])
            elif isinstance(dep, str) and dep:
                names.append(dep)
            else:
                raise Invalid(f"job {parent.id}: a next job's after names {dep!r}, not a job", parent.id)
        deps[id(job)] = names
    order = _in_dependency_order(next_jobs, ids, deps, parent.id)
    records = [_next_record(parent, job, ids[id(job)], deps[id(job)]) for job in order]
    for rec in records:
        if rec.id in replacing:  # linked as `jobctl retry` links it: a retry with dependents finds it its own
            rec.extensions[RETRY_OF] = {"job": replacing[rec.id]}
    for rec in records:  # every one was checked above: none is refused for what it holds
        try:
            store.submit(rec)
        except Exists:
            pass  # submitted before, by this job's earlier run: that one stands
    return [ids[id(job)] for job in next_jobs]


def _next_of(store: Any, parent: Record, position: int, kind: str, replacing: dict[str, str], depth: int = 0) -> str:
    """The id of ``parent``'s next job at ``position`` of ``kind``: :func:`next_id`, or, for a retry, a replacement's.

    When ``parent`` retries a job (``jobctl.run/retry-of@1``) whose run
    submitted a next job there, the same position and kind, that then ended
    unrun (cancelled with the parent that failed), this one takes its place
    under its replacement's id (:func:`jobctl.lifecycle.replacement_id`),
    noted in ``replacing``: the id ``jobctl retry --with-dependents`` gives
    it, so the retry and this run submit one job, whichever comes first. An
    id this parent's earlier run used (its holder died after submitting)
    stands, so a re-run always finds the same ids.
    """
    own = next_id(parent, position, kind)
    old_id = retry_of_link(parent)
    if old_id is None or depth > 100:
        return own
    try:
        store.load(own)
    except JobError:
        pass
    else:
        return own  # submitted by an earlier run of this very parent: it stands
    from .lifecycle import RETRYABLE, replacement_id

    try:
        old = store.load(old_id)
        before = store.load(_next_of(store, old, position, kind, {}, depth + 1))
        waited = old.id in after_of(before)
    except JobError:
        return own
    if not waited or before.state not in RETRYABLE:
        return own
    replacing[replacement_id(before)] = before.id
    return replacement_id(before)


def _next_record(parent: Record, job: NewJob, job_id: str, deps: list[str]) -> Record:
    """The record of next job ``job``, checked as a submission is; ``Invalid`` naming the parent and the job."""
    from . import ids, schedule
    from .exclusive import set_exclusive
    from .priority import set_priority
    from .record import prepare
    from .shell import SHELL, check_kind, parse
    from .timeout import set_timeout

    what = f"job {parent.id}: next job {job.kind!r}"
    try:
        ids.check(job_id)
        check_kind(job.kind)
        if not isinstance(job.spec, dict):
            raise Invalid("its spec is not a JSON object")
        _check_json(job.spec, parent.id, "its spec")
        rec = Record(id=job_id, kind=job.kind, spec=job.spec)
        if job.kind == SHELL:
            parse(rec.spec)
        rec.progress.total = job.total
        rec.requires = [schedule.check_label(name, "requires") for name in job.requires]
        if job.exclusive is not None:
            set_exclusive(rec, job.exclusive)
        membership = schedule.pipeline_of(parent)
        if job.stage and membership is None:  # its pipeline is its parent's
            raise Invalid(f"its stage {job.stage!r} needs a pipeline, and job {parent.id} is in none")
        schedule.plan(
            rec,
            retries=job.retries,
            after=[parent.id, *deps],
            pipeline=membership[0] if membership else None,
            stage=job.stage,
            hold=job.hold,
            by=f"job {parent.id}",
        )
        set_priority(rec, job.priority)
        if job.timeout is not None:
            set_timeout(rec, job.timeout)
        inherited = schedule.retry_of(parent)
        if job.retries is None and inherited is not None and inherited.intervals:
            rec.extensions[schedule.RETRY] = schedule.Retry(
                list(inherited.intervals), list(inherited.no_retry_on), 0, None
            ).to_json()
        prepare(rec)  # what the store's write would refuse (nesting too deep, a bad value)
    except Invalid as exc:
        message = exc.message.removeprefix(f"{parent.id}: ").removeprefix(f"job {parent.id}: ")
        raise Invalid(f"{what}: {message}", parent.id) from None
    return rec


def _in_dependency_order(
    jobs: Sequence[NewJob], ids: dict[int, str], deps: dict[int, list[str]], parent_id: str
) -> list[NewJob]:
    by_id = {ids[id(job)]: job for job in jobs}
    done: set[str] = set()
    order: list[NewJob] = []
    visiting: set[str] = set()

    def visit(job_id: str) -> None:
        if job_id in done:
            return
        if job_id in visiting:
            raise Invalid(f"job {parent_id}: its next jobs wait for each other in a cycle", parent_id)
        visiting.add(job_id)
        job = by_id[job_id]
        for dep in deps[id(job)]:
            if dep in by_id:
                visit(dep)
        visiting.discard(job_id)
        done.add(job_id)
        order.append(job)

    for job in jobs:
        visit(ids[id(job)])
    return order


# -- the async processors' loop ----------------------------------------------------


class AsyncLoop:
    """One event loop on a thread of its own, shared by every ``async def`` processor of a worker."""

    def __init__(self) -> None:
        import asyncio  # only a worker with an async processor pays for it

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="jobctl async processors", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Awaitable[Any]) -> concurrent.futures.Future[Any]:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the loop once what runs on it has been cancelled (the worker has stopped its jobs)."""
        import asyncio

        async def _cancel_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(RuntimeError, concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(_cancel_rest(), self.loop).result(5.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self.loop.close()


# -- the work ------------------------------------------------------------------------


def _is_async(function: Any) -> bool:
    """An ``async def`` function (or an object whose ``__call__`` is one)."""
    import inspect

    call = vars(type(function)).get("__call__")  # a callable object's own method
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


class _Escaped(Exception):
    """A ``KeyboardInterrupt`` or ``SystemExit`` an ``async def`` processor raised, carried as an exception."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(raised)
        self.raised = raised


async def _contained(awaitable: Awaitable[Any]) -> Any:
    """Await a processor's coroutine, holding back what would stop the loop every async processor shares.

    asyncio lets a ``KeyboardInterrupt`` or ``SystemExit`` out of a task
    through the loop itself: its thread would end, and every job on it
    (this one's too) would wait for ever, its lease renewed.
    """
    try:
        return await awaitable
    except (KeyboardInterrupt, SystemExit) as exc:
        raise _Escaped(exc) from None


class FunctionWork(Work):
    """A processor function as the work of one attempt (see the module docstring).

    A plain function runs on a thread of its own; an ``async def`` one on
    ``loop`` (:class:`AsyncLoop`), which it shares with the worker's other
    async processors. Its start, its traceback if it raises, and its end go to
    the attempt's log, as a command's output does.
    """

    def __init__(self, function: ProcessorFunction, *, loop: Callable[[], AsyncLoop] | None = None, log: bool = True):
        self.function = function
        self._loop = loop
        self._log_wanted = log
        self.job: Job | None = None
        self.keeper: Keeper | None = None
        self._future: concurrent.futures.Future[Any] | None = None
        self._give_up_at = math.inf
        self._given_up = False
        self._log: IO[bytes] | None = None
        self._value: Any = None

    def prepare(self, keeper: Keeper) -> None:
        self.keeper = keeper
        try:
            self.job = Job(keeper)
        except ValueError as exc:  # a spec or checkpoint that is not JSON text (a planted record)
            raise Invalid(f"its spec or checkpoint is not JSON: {exc}", keeper.job_id) from None

    def start(self, keeper: Keeper, out: Outcome) -> bool:
        job = self.job
        assert job is not None
        self._open_log(keeper, out)
        if _is_async(self.function):
            if self._loop is None:
                out.error = "an async processor needs the worker's event loop"
                return False
            self._future = self._loop().submit(_contained(self.function(job)))
        else:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_running_or_notify_cancel()
            function = self.function

            def call() -> None:
                try:
                    value = function(job)
                except BaseException as exc:  # handed to the keeper's thread, whatever it is
                    future.set_exception(exc)
                else:
                    future.set_result(value)

            threading.Thread(target=call, name=f"jobctl processor {job.id}", daemon=True).start()
            self._future = future
        self._future.add_done_callback(lambda _f: keeper.wake())
        return True

    def _open_log(self, keeper: Keeper, out: Outcome) -> None:
        if not self._log_wanted:
            return
        from .runner import log_open

        try:
            self._log = log_open(keeper.store, keeper.job_id, keeper.attempt)
        except (OSError, JobError):
            return  # no log beats no run; a link at its name is refused, never followed
        out.log = self._log.name
        name = getattr(self.function, "__qualname__", repr(self.function))
        self._say(
            f"attempt {keeper.attempt}, epoch {keeper.epoch}, owner {keeper.owner}, "
            f"started {format_time(keeper.store.now())}, processor {name}"
        )

    def _say(self, text: str) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError, ValueError):
                self._log.write(f"--- jobctl: {text} ---\n".encode())
                self._log.flush()

    @property
    def left_running(self) -> bool:
        """Whether the processor was given up at the grace and its thread still runs."""
        return self._given_up and self._future is not None and not self._future.done()

    def done(self) -> bool:
        return self._given_up or (self._future is not None and self._future.done())

    def stop(self, when: float, now: float) -> None:
        assert self.job is not None
        self.job._stop.set()
        self._give_up_at = min(self._give_up_at, when)
        if when <= now:
            self._give_up()

    def due(self) -> float:
        return self._give_up_at

    def tick(self, now: float) -> tuple[str, str] | None:
        if now >= self._give_up_at:
            self._give_up()
        return None

    def _give_up(self) -> None:
        """The grace is over: an async processor is cancelled; a plain one is left running, fenced."""
        self._give_up_at = math.inf
        if self._future is not None and not self._future.done():
            self._future.cancel()  # for a coroutine: cancels its task on the loop
            self._given_up = True

    def end(self, out: Outcome, disposition: str, detail: str, fenced: JobError | None) -> None:
        future = self._future
        assert future is not None
        if self._given_up and not future.done():
            out.error = "the processor did not return within the grace"
            self._say(f"{out.error} ({disposition}: {detail})" if disposition else out.error)
            return
        if future.cancelled():
            out.error = "the processor was cancelled"
            self._say(out.error + (f" ({disposition}: {detail})" if disposition else ""))
            return
        exc = future.exception()
        if isinstance(exc, _Escaped):
            exc = exc.raised  # what the processor raised, said as a plain one's would be
        if exc is not None:
            out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.retryable = not isinstance(exc, NotRetryable)
            if self._log is not None:
                import traceback

                text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                with contextlib.suppress(OSError, ValueError):
                    self._log.write(text.encode("utf-8", "replace"))
            self._say(f"raised {out.error}" + ("" if self.retryable else " (not retryable)"))
            return
        self._value = future.result()
        self.succeeded = True
        self._say("returned" + (f" ({disposition}: {detail})" if disposition else ""))

    def completing(self, out: Outcome) -> Callable[[Record], None] | None:
        """Submit the next jobs, then hand the keeper the result for the completing write."""
        from .results import set_result

        keeper = self.keeper
        assert keeper is not None
        value = self._value
        job_id = keeper.job_id
        if isinstance(value, Result):
            data, next_jobs = value.data, value.next_jobs
        else:
            data, next_jobs = value, []
        if data is not None:
            try:
                # Checked before anything is submitted, on a scratch record:
                # the completing write must not be the one to refuse it.
                set_result(Record(id=job_id, kind=keeper.rec.kind), data)
            except Invalid as exc:
                raise Invalid(f"job {job_id}: the processor's {exc.message}", job_id) from None
        if next_jobs:
            if not all(isinstance(job, NewJob) for job in next_jobs):
                raise Invalid(f"job {job_id}: next_jobs holds something that is not a jobctl.NewJob", job_id)
            # Before the completion, never after: a holder that dies in between
            # leaves the job to an adopter, whose submission finds these ids.
            made = submit_next(keeper.store, keeper.rec, next_jobs)
            self._say(f"next jobs: {', '.join(made)}")
        if data is None:
            return None  # no result: the record keeps none

        def store_result(rec: Record) -> None:
            set_result(rec, data)

        return store_result

    def after(self, out: Outcome) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError, ValueError):
                self._log.close()
