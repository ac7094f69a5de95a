"""A worker's alerts on a job's final failure: the ``on_failure`` command and the ``on_failure_url`` webhook.

When a job's last attempt leaves it ``failed``, the loop
(:class:`jobctl.worker.Worker`) hands its outcome to :meth:`Alerts.alert`:
the command runs in a session of its own with ``JOB_ID``, ``JOB_KIND``,
``JOB_ERROR``, ``JOB_ATTEMPT`` and ``JOB_STORE`` in the worker's
environment (a job's lease words taken out), and a JSON message is queued for
the webhook's thread (:mod:`jobctl.webhook`). Neither is waited for: the
loop calls :meth:`Alerts.reap` on each turn, which says, on the main thread,
how each command ended and what became of each message; :meth:`Alerts.close`
waits for what is left when the worker leaves.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .errors import JobError
from .runner import Outcome, RunStore
from .schedule import pipeline_of
from .slots import Event
from .store.location import address

if TYPE_CHECKING:
    from .webhook import Delivery, Webhook

__all__ = ["Alerts"]

#: How long a leaving worker waits for its alerts, commands and webhook together.
LEAVING_WAIT = 30.0


class Alerts:
    """The alerts of one worker. ``emit`` says an event (main thread); ``wake`` wakes the loop (any thread)."""

    def __init__(
        self,
        store: RunStore,
        owner: str,
        env: Mapping[str, str],
        command: str,
        url: str,
        *,
        emit: Callable[[Event], None],
        wake: Callable[[], None],
    ) -> None:
        self.store = store
        self.owner = owner
        self.env = env
        self.command = command
        self._emit = emit
        self._wake = wake
        # Posted from the webhook's own thread; what became of each comes back
        # here and is said by the main thread, as every other event is.
        self._deliveries: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
        self._webhook: Webhook | None = None
        if url:
            from .webhook import Webhook  # its HTTP client only for a worker that posts alerts

            self._webhook = Webhook(url, self._delivered)
        self._running: list[tuple[subprocess.Popen[bytes], str]] = []

    @property
    def running(self) -> bool:
        """Whether an alert command started here has not been seen to end yet."""
        return bool(self._running)

    def alert(self, out: Outcome) -> None:
        if self._webhook is not None:
            self._post(self._webhook, out)
        if not self.command:
            return
        env = dict(self.env)
        for name in ("JOB_EPOCH", "JOB_CHECKPOINT", "JOB_WORK"):
            env.pop(name, None)
        env.update(
            {
                "JOB_ID": out.job_id,
                "JOB_KIND": out.kind,
                "JOB_ERROR": out.error,
                "JOB_ATTEMPT": str(out.attempt),
                "JOB_STORE": address(self.store),
            }
        )
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", self.command],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            self._emit(Event("alert-failed", out.job_id, out.kind, f"cannot start the alert: {exc}"))
            return
        self._running.append((proc, out.job_id))

    def _post(self, hook: Webhook, out: Outcome) -> None:
        pipeline = None
        with contextlib.suppress(JobError, OSError):  # the message goes without it rather than not at all
            pipeline = pipeline_of(self.store.load(out.job_id))
        from .webhook import message

        body = message(out.job_id, out.kind, out.error, out.attempt, pipeline, self.owner)
        if not hook.post(out.job_id, out.kind, body):
            detail = f"webhook {hook.where}: {hook.backlog} alerts wait for it already; this one is dropped"
            self._emit(Event("alert-failed", out.job_id, out.kind, detail))

    def _delivered(self, delivery: Delivery) -> None:
        """From the webhook's thread: queue the news for the main thread, and wake it."""
        self._deliveries.put(delivery)
        self._wake()

    def _said_deliveries(self) -> None:
        while True:
            try:
                got = self._deliveries.get_nowait()
            except queue.Empty:
                return
            self._emit(Event("alert" if got.ok else "alert-failed", got.job_id, got.kind, got.detail))

    def reap(self, wait: float = 0.0) -> None:
        """Say what became of the alerts that ended; with ``wait``, wait that long for the others, then kill them."""
        self._said_deliveries()
        deadline = time.monotonic() + wait
        keep = []
        for proc, job_id in self._running:
            left = deadline - time.monotonic()
            try:
                code = proc.wait(left) if left > 0 else proc.poll()
            except subprocess.TimeoutExpired:
                code = None
            if code is None:
                if wait > 0:
                    proc.kill()
                    proc.wait()
                    self._emit(Event("alert-failed", job_id, "", "the alert did not finish in time"))
                else:
                    keep.append((proc, job_id))
            elif code == 0:
                self._emit(Event("alert", job_id))
            else:
                self._emit(Event("alert-failed", job_id, "", f"the alert command exited {code}"))
        self._running = keep

    def close(self) -> None:
        """On leaving: wait for the alert commands and the webhook's messages, at most :data:`LEAVING_WAIT` in all."""
        deadline = time.monotonic() + LEAVING_WAIT
        self.reap(wait=LEAVING_WAIT)
        if self._webhook is not None:
            self._webhook.close(wait=deadline - time.monotonic())  # what it leaves is reported failed
            self._said_deliveries()
