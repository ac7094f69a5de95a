"""A model of the store's lease protocol, checked against the file store (DIGEST §5).

A pure-Python model predicts, for each operation, the verdict and the record
afterwards (state, epoch, owner, held, want, recall, expiry, done, lists);
hypothesis drives submit/claim/renew/progress/release/finish/set_intent/recall
and the clock, and the real FileStore must agree at every step. Owners present
the epoch they last obtained from a successful claim (0 if they never did), as
the replay driver's owners do (§6.4), so every refusal path is reachable.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import jobctl
from jobctl.errors import Invalid, JobError, LeaseExpired, LeaseHeld, StaleEpoch, Terminal

BASE = "abstraction.job/base@1"
INTENT = "abstraction.job/intent@1"
TERMINAL_MODEL = "abstraction.job/terminal@1"
RECALL = "abstraction.job/recall@1"
TERMINAL = {"complete", "failed", "cancelled"}
STATES = ["pending", "running", "transferred", "complete", "failed", "cancelled"]
OWNERS = ["alpha", "beta"]

jobs_ix = st.integers(min_value=0, max_value=2)
owners = st.sampled_from(OWNERS)
seconds = st.sampled_from([0, 0.5, 1, 2, 5, 30])
ttls = st.sampled_from([0, 1, 5, 30, 60])


@dataclass
class Job:
    state: str = "pending"
    epoch: int = 0
    owner: str = ""
    expires: datetime | None = None
    intent: str | None = None
    recall: tuple[str, datetime] | None = None  # reason, until
    done: int = 0

    def held(self, now: datetime) -> bool:
        return self.owner != "" and self.expires is not None and now < self.expires

    def lists(self) -> tuple[list[str], list[str]]:
        content, critical = [BASE], [BASE]
        for present, name in (
            (self.intent is not None, INTENT),
            (self.state in TERMINAL, TERMINAL_MODEL),
            (self.recall is not None, RECALL),
        ):
            if present:
                content.append(name)
                critical.append(name)
        return content, critical


class StoreModel(RuleBasedStateMachine):
    clock_factory: Callable[[], Any]
    #: Opens the store under test on a clock; None: a file store in a temporary directory.
    store_factory: Callable[[Any], Any] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="jobctl-model-")
        self.clock = self.clock_factory()
        if self.store_factory is None:
            self.store = jobctl.FileStore(Path(self.dir) / "store", clock=self.clock)
        else:
            self.store = self.store_factory(self.clock)
        self.ids: list[str] = []
        self.model: dict[str, Job] = {}
        self.epochs: dict[tuple[str, str], int] = {}

    def teardown(self) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- plumbing ---------------------------------------------------------------------------

    def pick(self, ix: int) -> str:
        return self.ids[ix % len(self.ids)]

    def now(self) -> datetime:
        return self.clock.now  # type: ignore[no-any-return]

    def apply(self, job_id: str, expected: type[JobError] | None, call: Callable[[], object]) -> None:
        before = self.store.load_bytes(job_id)
        try:
            call()
            got: type[JobError] | None = None
        except JobError as exc:
            got = type(exc)
        assert got is expected, f"store answered {got and got.__name__}, model says {expected and expected.__name__}"
        if expected is not None:
            assert self.store.load_bytes(job_id) == before, "a refusal changed the record"

    def who(self, job: Job, owner: str, holder: bool) -> str:
        """Mostly the current holder (so writes land), sometimes anybody (so refusals happen)."""
        return job.owner if holder and job.owner else owner

    def holder_refusal(self, job: Job, epoch: int) -> type[JobError] | None:
        """update/progress/finish/release: terminal, then stale epoch, then lapsed."""
        if job.state in TERMINAL:
            return Terminal
        if epoch != job.epoch:
            return StaleEpoch
        if not job.held(self.now()):
            return LeaseExpired
        return None

    # -- rules ------------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.submit()

    @precondition(lambda self: len(self.ids) < 3)
    @rule()
    def submit(self) -> None:
        job_id = self.store.submit(jobctl.Record(kind="download", spec={"n": len(self.ids)}))
        self.ids.append(job_id)
        self.model[job_id] = Job()

    @rule(ix=jobs_ix, owner=owners, ttl=ttls)
    def claim(self, ix: int, owner: str, ttl: float) -> None:
        job_id = self.pick(ix)
        job = self.model[job_id]
        now = self.now()
        expected: type[JobError] | None = None
        if job.state in TERMINAL:
            expected = Terminal
        elif job.held(now) and (job.owner != owner or job.recall is not None):
            expected = LeaseHeld
        self.apply(job_id, expected, lambda: self.store.claim(job_id, owner, ttl))
        if expected is None:
            job.epoch += 1
            job.owner = owner
            job.expires = now + timedelta(seconds=ttl)
            job.recall = None
            if job.state in ("pending", "running"):
                job.state = "running"
            self.epochs[(job_id, owner)] = job.epoch

    @rule(ix=jobs_ix, owner=owners, ttl=ttls, holder=st.booleans())
    def renew(self, ix: int, owner: str, ttl: float, holder: bool) -> None:
        job_id = self.pick(ix)
        job = self.model[job_id]
        owner = self.who(job, owner, holder)
        epoch = self.epochs.get((job_id, owner), 0)
        now = self.now()
        expected: type[JobError] | None = None
        if epoch != job.epoch:
            expected = StaleEpoch
        elif not job.held(now):
            expected = LeaseExpired
        self.apply(job_id, expected, lambda: self.store.renew(job_id, epoch, ttl))
        if expected is None:
            expires = now + timedelta(seconds=ttl)
            if job.recall is not None and expires > job.recall[1]:
                expires = job.recall[1]
            job.expires = expires

    @rule(ix=jobs_ix, owner=owners, done=st.integers(min_value=0, max_value=1000), holder=st.booleans())
    def progress(self, ix: int, owner: str, done: int, holder: bool) -> None:
        job_id = self.pick(ix)
        job = self.model[job_id]
        owner = self.who(job, owner, holder)
        epoch = self.epochs.get((job_id, owner), 0)
        expected = self.holder_refusal(job, epoch)
        self.apply(job_id, expected, lambda: self.store.progress(job_id, epoch, done))
        if expected is None:
            job.done = done

    @rule(ix=jobs_ix, owner=owners, holder=st.booleans())
    def release(self, ix: int, owner: str, holder: bool) -> None:
        job_id = self.pick(ix)
        job = self.model[job_id]
        owner = self.who(job, owner, holder)
        epoch = self.epochs.get((job_id, owner), 0)
        expected = self.holder_refusal(job, epoch)
        self.apply(job_id, expected, lambda: self.store.release(job_id, epoch))
        if expected is None:
            job.owner = ""
            job.expires = self.now()
            if job.state == "running":
                job.state = "pending"

    @rule(ix=jobs_ix, owner=owners, state=st.sampled_from([*STATES, "done"]), holder=st.booleans())
    def finish(self, ix: int, owner: str, state: str, holder: bool) -> None:
        job_id = self.pick(ix)
        job = self.model[job_id]
        owner = self.who(job, owner, holder)
        epoch = self.epochs.get((job_id, owner), 0)
        expected = self.holder_refusal(job, epoch)
        if expected is None and state not in STATES:
            expected = Invalid
        self.apply(job_id, expected, lambda: self.store.finish(job_id, epoch, state))
        if expected is None:
            job.state = state

    @rule(ix=jobs_ix, want=st.sampled_from(["run", "pause", "cancel", "halt"]))
    def set_intent(self, ix: int, want: str) -> None:
        job_id = self.pick(ix)
        job = self.model[job_id]
        expected: type[JobError] | None = None
        if want not in ("run", "pause", "cancel"):
            expected = Invalid
        elif job.state in TERMINAL:
            expected = Terminal
        self.apply(job_id, expected, lambda: self.store.set_intent(job_id, want, "model"))
        if expected is None:
            job.intent = want

    @rule(
        ix=jobs_ix,
        owner=owners,
        grace=seconds,
        reason=st.sampled_from(["", " ", "yield", "make room"]),
        holder=st.booleans(),
    )
    def recall(self, ix: int, owner: str, grace: float, reason: str, holder: bool) -> None:
        job_id = self.pick(ix)
        job = self.model[job_id]
        owner = self.who(job, owner, holder)
        epoch = self.epochs.get((job_id, owner), 0)
        now = self.now()
        expected: type[JobError] | None = None
        if not reason.strip():
            expected = Invalid
        elif job.state in TERMINAL:
            expected = Terminal
        elif epoch != job.epoch:
            expected = StaleEpoch
        elif not job.held(now):
            expected = LeaseExpired
        self.apply(job_id, expected, lambda: self.store.recall(job_id, epoch, reason, "model", grace))
        if expected is None:
            until = now + timedelta(seconds=grace)
            job.recall = (reason, until)
            if job.expires is None or until < job.expires:
                job.expires = until

    @rule(dt=seconds)
    def advance(self, dt: float) -> None:
        self.clock.advance(dt)

    # -- agreement ------------------------------------------------------------------------------------

    @invariant()
    def records_agree(self) -> None:
        now = self.now()
        for job_id in self.ids:
            job = self.model[job_id]
            rec = self.store.load(job_id)
            got = {
                "state": rec.state,
                "epoch": rec.lease.epoch,
                "owner": rec.lease.owner,
                "held": jobctl.record.held(rec.lease, now),
                "want": rec.want,
                "intent": rec.intent.want if rec.intent else None,
                "recall": (rec.lease.recall.reason, rec.lease.recall.until) if rec.lease.recall else None,
                "expires": rec.lease.expires_at if job.expires is not None else None,
                "done": rec.progress.done,
                "lists": (rec.content, rec.critical),
            }
            want = {
                "state": job.state,
                "epoch": job.epoch,
                "owner": job.owner,
                "held": job.held(now),
                "want": job.intent or "run",
                "intent": job.intent,
                "recall": job.recall,
                "expires": job.expires,
                "done": job.done,
                "lists": job.lists(),
            }
            assert got == want, f"{job_id}: store {got} != model {want}"

    @invariant()
    def orphans_agree(self) -> None:
        now = self.now()
        expected = sorted(
            job_id
            for job_id, job in self.model.items()
            if job.state not in TERMINAL
            and not job.held(now)
            and job.state != "transferred"
            and (job.intent != "pause" or job.state == "running")
        )
        assert [r.id for r in self.store.orphans()] == expected


def test_store_agrees_with_the_model(make_clock: Callable[[], Any]) -> None:
    class Machine(StoreModel):
        clock_factory = staticmethod(make_clock)  # type: ignore[assignment]

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=80,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_postgres_store_agrees_with_the_model(make_clock: Callable[[], Any], pg_server: Any) -> None:
    """The same machine against PostgreSQL, a fresh schema per example (fewer examples: each costs a schema)."""
    from jobctl.store import postgres

    def open_postgres(clock: Any) -> Any:
        url = pg_server.fresh_schema()
        postgres.init(url)
        return postgres.PostgresStore(url, clock=clock)

    class Machine(StoreModel):
        clock_factory = staticmethod(make_clock)  # type: ignore[assignment]
        store_factory = staticmethod(open_postgres)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=10,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
