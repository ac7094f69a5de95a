"""A worker defined in Python: processors registered by kind, run by the loop ``jobctl worker`` runs.

::

    worker = jobctl.Worker(jobctl.open_store("/srv/jobs"), concurrency=10)

    @worker.processor("script_generation")
    def script(job: jobctl.Job) -> jobctl.Result:
        ...

    worker.every("refresh-feeds", "15m", kind="script_generation", spec={"topic": "news"})
    worker.cron("nightly", "0 3 * * *", kind="script_generation", spec={"topic": "the day"})

    worker.run()      # until SIGTERM/SIGINT; or worker.drain()

The same object runs from the command line with ``jobctl worker --app
module:worker`` (:func:`load`). Jobs of other kinds run as they do under
``jobctl worker``: ``shell`` jobs, and the handler commands given here.
The recurring schedules an application declares (:meth:`Worker.every`,
:meth:`Worker.cron`) are kept in the store each time it starts
(:meth:`Worker.declare`), where every worker of the store fires them.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import Invalid

if TYPE_CHECKING:
    from .processor import ProcessorFunction
    from .recurring import Schedule
    from .worker import Event, Summary
    from .worker import Worker as Loop

__all__ = ["Worker", "load"]

_log = logging.getLogger("jobctl.worker")

#: What a worker runs with when neither the object nor (under ``jobctl worker --app``) the command line says.
DEFAULTS: dict[str, Any] = {
    "concurrency": 1,
    "poll_interval": 1.0,
    "ttl": 30.0,
    "grace": 10.0,
    "shutdown_grace": 30.0,
    "name": "worker",
}


class Worker:
    """Processors by kind over one store, and the options of the loop that runs them.

    ``store``: a store object or what :func:`jobctl.open_store` opens (a
    directory or a ``postgresql://`` URL). The options mean what the
    ``jobctl worker`` flags of the same names mean; those not given here are
    :data:`DEFAULTS` (or, under ``jobctl worker --app``, the command line's
    settings). ``handlers`` maps other kinds to shell commands, as
    ``--handler``. ``on_event`` gets every :class:`jobctl.worker.Event`; by
    default they go to the ``jobctl.worker`` logger. ``limits`` maps a kind to
    the most of its jobs run at once, as ``--limit KIND=N``.
    """

    def __init__(
        self,
        store: Any,
        *,
        concurrency: int | None = None,
        ttl: float | None = None,
        grace: float | None = None,
        shutdown_grace: float | None = None,
        poll_interval: float | None = None,
        name: str | None = None,
        handlers: Mapping[str, str] | None = None,
        kinds: Iterable[str] | None = None,
        on_failure: str = "",
        on_failure_url: str = "",
        on_event: Callable[[Event], None] | None = None,
        limits: Mapping[str, int] | None = None,
    ) -> None:
        if isinstance(store, (str, os.PathLike)):
            from .store import open_store

            store = open_store(os.fspath(store))
        self.store = store
        given = {
            "concurrency": concurrency,
            "ttl": ttl,
            "grace": grace,
            "shutdown_grace": shutdown_grace,
            "poll_interval": poll_interval,
            "name": name,
        }
        #: The options given to the constructor (``jobctl worker --app`` lets its flags override them).
        from .settings import check

        # Judged here by the rules the flags follow, so a bad value is refused where it is written.
        self.options: dict[str, Any] = {key: check(key, value) for key, value in given.items() if value is not None}
        self.handlers: dict[str, str] = dict(handlers or {})
        self.kinds = None if kinds is None else list(kinds)
        #: At most N jobs of a kind at once (``jobctl worker --limit KIND=N``, which adds to these).
        from .quota import Quota

        try:
            self.limits: dict[str, int] = Quota(limits).limits
        except ValueError as exc:
            raise Invalid(f"limits: {exc}") from None
        self.on_failure = on_failure
        if on_failure_url:
            from .webhook import check_url

            try:
                on_failure_url = check_url(on_failure_url)
            except ValueError as exc:
                raise Invalid(f"on_failure_url: {exc}") from None
        self.on_failure_url = on_failure_url
        self.on_event = on_event
        #: The registered processors, by kind.
        self.processors: dict[str, ProcessorFunction] = {}
        #: The declared schedules, by name: checked when declared, kept in the store at each start.
        self.schedules: dict[str, Schedule] = {}
        self._lock = threading.Lock()
        self._loop: Loop | None = None
        self._stop: bool | None = None  # a stop asked for before the loop existed: immediate or not

    # -- registering ------------------------------------------------------------------

    def processor(self, kind: str) -> Callable[[ProcessorFunction], ProcessorFunction]:
        """Register the decorated function (plain or ``async def``) as the processor of ``kind``."""

        def register(function: ProcessorFunction) -> ProcessorFunction:
            self.add_processor(kind, function)
            return function

        return register

    def add_processor(self, kind: str, function: ProcessorFunction) -> None:
        """Register ``function`` as the processor of ``kind``; one per kind."""
        if not isinstance(kind, str) or not kind:
            raise Invalid(f"a processor's kind must be a non-empty string, not {kind!r}")
        if not callable(function):
            raise Invalid(f"the processor of kind {kind} is not callable: {function!r}")
        if kind in self.processors:
            raise Invalid(f"kind {kind} has a processor already: {self.processors[kind]!r}")
        self.processors[kind] = function

    # -- recurring schedules ----------------------------------------------------------

    def every(self, name: str, duration: object, *, kind: str, spec: Any = None, by: str | None = None) -> None:
        """Declare schedule ``name``: a job of ``kind`` with ``spec`` (a JSON object) every ``duration``.

        ``duration`` as ``jobctl schedule add --every`` takes it (``"15m"``,
        seconds, a ``timedelta``); the slots fall on its multiples since
        1970-01-01 UTC. Checked now (``Invalid`` naming the schedule); kept in
        the store when the worker starts (:meth:`declare`).
        """
        self._declare(name, kind, spec, by, every=duration)

    def cron(self, name: str, line: str, *, kind: str, spec: Any = None, by: str | None = None) -> None:
        """Declare schedule ``name``: a job of ``kind`` with ``spec`` at each minute cron ``line`` names (UTC).

        As :meth:`every`, with a line ``jobctl schedule add --cron`` takes.
        """
        self._declare(name, kind, spec, by, cron=line)

    def _declare(self, name: str, kind: str, spec: Any, by: str | None, **when: Any) -> None:
        import json
        from datetime import datetime, timezone

        from .recurring import new
        from .submitter import default_submitter

        if isinstance(name, str) and name in self.schedules:
            raise Invalid(f"schedule {name} is declared already on this worker")
        try:
            text = json.dumps({} if spec is None else spec, ensure_ascii=False, allow_nan=False)
        except RecursionError:  # nested past the interpreter's limit
            raise Invalid(f"schedule {name}: spec is not JSON: it nests too deep") from None
        except (TypeError, ValueError) as exc:
            raise Invalid(f"schedule {name}: spec is not JSON: {exc}") from None
        # The time is the store's when it is kept (declare()); this one only lets it be checked now.
        sched = new(name, kind=kind, spec=text, by=by or default_submitter(), now=datetime.now(timezone.utc), **when)
        self.schedules[sched.name] = sched

    def declare(self) -> dict[str, str]:
        """Keep every declared schedule in the store; by name, ``"added"``, ``"updated"`` or ``"unchanged"``.

        Idempotent: the same declarations again write nothing; a changed one
        replaces the kept plan (which keeps its latest slot fired). A schedule
        kept in the store but no longer declared stays (``jobctl schedule
        remove NAME`` removes it). :meth:`run`, :meth:`drain`, :meth:`once`
        and ``jobctl worker --app`` call it before the loop starts.
        """
        from dataclasses import replace

        now = self.store.now()
        return {name: self.store.put_schedule(replace(sched, created_at=now)) for name, sched in self.schedules.items()}

    # -- running ------------------------------------------------------------------------

    def loop(self, **overrides: Any) -> Loop:
        """The :class:`jobctl.worker.Worker` loop that runs it: defaults, then the object's, then ``overrides``."""
        from .worker import Worker as Loop

        options = {**DEFAULTS, **self.options, **{k: v for k, v in overrides.items() if v is not None}}
        options.setdefault("handlers", self.handlers)
        options.setdefault("kinds", self.kinds)
        options.setdefault("limits", self.limits)
        options.setdefault("on_failure", self.on_failure)
        options.setdefault("on_failure_url", self.on_failure_url)
        options.setdefault("on_event", self.on_event or _log_event)
        return Loop(self.store, functions=self.processors, **options)

    def run(self) -> Summary:
        """Run until stopped: :meth:`stop`, or SIGTERM/SIGINT when called from the main thread."""
        return self._go("loop")

    def drain(self) -> Summary:
        """Run while anything is runnable or running (and the retries of what it ran), then return."""
        return self._go("drain")

    def once(self) -> Summary:
        """One pass over what is runnable now, then return."""
        return self._go("once")

    def stop(self, immediate: bool = False) -> None:
        """Claim nothing more; running jobs get the shutdown grace (``immediate``: none). Any thread."""
        with self._lock:
            loop = self._loop
            if loop is None:
                self._stop = immediate or bool(self._stop)
                return
        loop.request_stop(immediate)

    def _go(self, mode: str, loop: Loop | None = None) -> Summary:
        loop = loop or self.loop()
        self.declare()
        with self._lock:
            if self._loop is not None:
                raise Invalid("this worker is running already")
            self._loop = loop
            pending, self._stop = self._stop, None
        if pending is not None:
            loop.request_stop(pending)
        try:
            if threading.current_thread() is threading.main_thread():
                with loop.signals():
                    return loop.run(mode)
            return loop.run(mode)
        finally:
            with self._lock:
                self._loop = None


def _log_event(event: Event) -> None:
    level = (
        logging.WARNING if event.what in ("failed", "refused", "fenced", "unreadable", "alert-failed") else logging.INFO
    )
    _log.log(level, "%s", event.line())


def load(target: str) -> Worker:
    """The :class:`Worker` that ``module:attribute`` names (``jobctl worker --app``); ``Invalid`` when it cannot.

    The current directory is searched first, as ``python -m`` does, so an
    application's own module is found where it is run.
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise Invalid(f"--app {target}: give it as MODULE:ATTRIBUTE (myapp.jobs:worker)")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # the application's own import error, whatever it is, said in one line
        raise Invalid(f"--app {target}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise Invalid(f"--app {target}: {module_name} has no attribute {attribute}") from None
    if not isinstance(obj, Worker):
        raise Invalid(f"--app {target}: {attribute} is not a jobctl.Worker (it is of type {type(obj).__name__})")
    return obj
