"""The directory and PostgreSQL stores side by side: the same verdict for every operation, the same bytes.

Hypothesis drives random sequences of operations -- several owners,
expiring leases, intent and recall, dependencies, retries and their
not-before times, pipelines, malformed scheduling data, upstream records
imported as their bytes, terminal states, bad epochs and bad words,
malformed checkpoints and counts (judged after the record's verdicts) --
against a :class:`jobctl.FileStore` and a :class:`PostgresStore` on one
clock. Every operation must get the same answer from both: the same verdict
with the same message, or the same record back (its canonical bytes). After
every step both stores hold the same jobs with the same bytes (what
``jobctl export`` writes), and the same orphans. A holder's write answers
the record's own verdict (terminal, stale epoch, lapsed lease: DIGEST §5)
whenever the record has one, whatever it was given to write.

The PostgreSQL store does each step in one statement whose WHERE clause is
the contract's precondition, and names a refusal by running the file
store's rules on the row. A precondition dropped from a statement makes
that statement accept what the rules refuse: the answers part. A statement
stricter than the rules is caught too: its refusal would be overruled by
the rules, and counted (``PostgresStore.moved``), which nothing here ever
gives cause to.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
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
from jobctl import ids, replay, schedule
from jobctl.errors import JobError
from jobctl.priority import PRIORITY
from jobctl.record import RETRY, encode, held
from jobctl.wire import JsonText, Raw

OWNERS = ["alpha", "beta", "gamma"]
KINDS = ["fetch", "convert"]
STATES = ["pending", "running", "transferred", "complete", "failed", "cancelled", "bogus"]
WANTS = ["run", "pause", "cancel", "maybe"]

jobs_ix = st.integers(min_value=0, max_value=5)
owners = st.sampled_from(OWNERS)
ttls = st.sampled_from([0, 1, 5, 30, 3600, 3600])
skews = st.sampled_from([0, 0, 0, -1, 1])  # the epoch an owner presents: mostly its own, or one off
checkpoints = st.sampled_from(
    [
        None,
        {"offset": 7},
        Raw('{"n": 1.50, "a\\/b": "\\u00e9", "zebra": 1, "apple": 2}'),
        Raw('{"verified": [[4, 8], [0, 4], [10, 12]], "etag": "x"}'),
        Raw('{"sha": "abc"}'),
        "null-json",
        # Malformed: refused invalid, but only once terminal, stale epoch and lapsed lease are ruled out.
        {"x": float("nan")},
        JsonText(b'{"a": NaN}'),
        JsonText(b'"\xff"', "--checkpoint"),
        {"verified": [[4, 2]]},
    ]
)


def _checkpoint(choice: Any) -> Any:
    return Raw("null") if choice == "null-json" else choice


class SideBySide(RuleBasedStateMachine):
    """One random history, applied to both stores at once."""

    clock_factory: Callable[[], Any]
    pg_factory: Callable[[Any], Any]
    vectors: list[bytes]

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="jobctl-diff-")
        self.clock = self.clock_factory()
        self.file = jobctl.FileStore(Path(self.dir) / "store", clock=self.clock)
        self.pg = self.pg_factory(self.clock)
        self.ids: list[str] = []
        self.epochs: dict[tuple[str, str], int] = {}
        self.holders: dict[str, str] = {}  # the owner of each job's last claim
        self.steps = 0

    def teardown(self) -> None:
        self.pg.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- plumbing ---------------------------------------------------------------------------

    def pick(self, ix: int) -> str:
        return self.ids[ix % len(self.ids)]

    def both(self, what: str, call: Callable[[Any], Any]) -> Any:
        """``call`` on each store: the same answer from both, or the test fails naming the step."""
        self.steps += 1
        answers = []
        for store in (self.file, self.pg):
            try:
                answers.append(("ok", _shown(call(store))))
            except JobError as exc:
                answers.append((exc.verdict, exc.message))
        assert answers[0] == answers[1], f"{what}: directory {answers[0]!r}, PostgreSQL {answers[1]!r}"
        event(f"{what.split()[0]}: {answers[0][0]}")  # --hypothesis-show-statistics: what the histories reached
        return answers[0]

    def remember(self, owner: str, job_id: str, answer: Any) -> None:
        if answer[0] == "ok" and answer[1] is not None:
            for line in answer[1]:
                if line.startswith("epoch="):
                    self.epochs[(owner, job_id)] = int(line[6:])
                    self.holders[job_id] = owner

    def first(self, job_id: str, epoch: int) -> str | None:
        """The record's own verdict for a holder's write at ``epoch``, in the contract's order; None if it has none."""
        try:
            rec = self.file.load(job_id)
        except JobError:
            return None
        if rec.terminal:
            return "terminal"
        if rec.lease.epoch != epoch:
            return "stale_epoch"
        return None if held(rec.lease, self.clock.now) else "lease_expired"

    def holders_write(self, what: str, job_id: str, epoch: int, call: Callable[[Any], Any]) -> None:
        """:meth:`both`, and the answer is the record's verdict whenever it has one (before the content's)."""
        first = self.first(job_id, epoch)
        answer = self.both(what, call)
        if first is not None:
            assert answer[0] == first, f"{what}: {answer!r}, but the record says {first}"

    def epoch(self, owner: str, job_id: str, skew: int) -> int:
        """The epoch ``owner`` presents: the last it obtained (0 if none), or one off; mostly its last claimer's."""
        if skew == 0 or owner == OWNERS[0]:
            owner = self.holders.get(job_id, owner)
        return max(0, self.epochs.get((owner, job_id), 0) + skew)

    # -- submit and import ---------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.submit("fetch", False, False, False, 0)

    @precondition(lambda self: len(self.ids) < 6)
    @rule(
        kind=st.sampled_from(KINDS),
        retries=st.booleans(),
        hold=st.booleans(),
        pipeline=st.booleans(),
        after=st.integers(min_value=0, max_value=3),
        priority=st.sampled_from([None, None, 3, 3, -2, 1000, "high", 5000]),  # the last two: not priorities, 0
    )
    def submit(self, kind: str, retries: bool, hold: bool, pipeline: bool, after: int, priority: object = None) -> None:
        job_id = ids.mint()
        rec = jobctl.Record(id=job_id, kind=kind, spec=Raw('{"n": 1.0, "url": "a\\/b", "x": "\\u00e9"}'))
        deps = {0: [], 1: self.ids[-1:], 2: self.ids[:2], 3: [ids.mint()]}[after]  # 3: one that does not exist
        schedule.plan(
            rec,
            retries=2 if retries else None,
            intervals=[1, 5] if retries else None,
            after=deps,
            pipeline="nightly" if pipeline else None,
            hold=hold,
            by="ops",
        )
        if priority is not None:
            rec.extensions[PRIORITY] = priority  # as any writer may: the picks order by what priority_of reads
        self.both("submit", lambda s: s.submit(rec.replace(extensions=dict(rec.extensions))))
        self.ids.append(job_id)

    @precondition(lambda self: len(self.ids) < 6)
    @rule(start_in=st.sampled_from([0, 2, 40]))
    def submit_not_before(self, start_in: float) -> None:
        job_id = ids.mint()
        rec = jobctl.Record(id=job_id, kind="fetch", spec={"n": 2})
        schedule.plan(rec, start_after=self.clock.now + timedelta(seconds=start_in))
        self.both("submit not before", lambda s: s.submit(rec.replace(extensions=dict(rec.extensions))))
        self.ids.append(job_id)

    @precondition(lambda self: len(self.ids) < 6)
    @rule()
    def submit_malformed_schedule(self) -> None:
        job_id = ids.mint()
        rec = jobctl.Record(id=job_id, kind="fetch", spec={"n": 3}, extensions={RETRY: {"intervals": "soon"}})
        self.both("submit malformed", lambda s: s.submit(rec.replace(extensions=dict(rec.extensions))))
        self.ids.append(job_id)

    @precondition(lambda self: len(self.ids) < 6)
    @rule(which=st.integers(min_value=0, max_value=1000))
    def import_vector(self, which: int) -> None:
        """An upstream writer's record, as its bytes, under a fresh id: kept as written until the next write."""
        if not self.vectors:
            return
        data = self.vectors[which % len(self.vectors)]
        job_id = ids.mint()
        old = jobctl.record.decode(data).id
        data = data.replace(f'"{old}"'.encode(), f'"{job_id}"'.encode())
        answer = self.both("import", lambda s: s.import_bytes(data))
        if answer[0] == "ok":
            self.ids.append(job_id)

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix, where=st.sampled_from(["content", "critical"]))
    def plant(self, ix: int, where: str) -> None:
        """A newer writer's model name in a record (replay's `plant`): carried if advisory, refused if critical."""
        job_id = self.pick(ix)
        self.both(f"plant {where} {job_id}", lambda s: replay.plant(s, job_id, where, "abstraction.test/hovercraft@7"))

    # -- the lease ------------------------------------------------------------------------------

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix, owner=owners, ttl=ttls, again=st.booleans())
    def claim(self, ix: int, owner: str, ttl: float, again: bool) -> None:
        """A claim by anybody, or ``again`` by the job's last claimer (a re-claim [JOB-O2], refused if recalled)."""
        job_id = self.pick(ix)
        if again:
            owner = self.holders.get(job_id, owner)
        self.remember(owner, job_id, self.both(f"claim {job_id} by {owner}", lambda s: s.claim(job_id, owner, ttl)))

    @rule(owner=owners, ttl=ttls, kinds=st.sampled_from([None, ["fetch"], ["convert", "fetch"]]))
    def claim_next(self, owner: str, ttl: float, kinds: list[str] | None) -> None:
        def pick(s: Any) -> Any:
            skipped: list[tuple[str, JobError]] = []
            rec = s.claim_next(owner, ttl, kinds, skipped=skipped)
            return rec, sorted(job_id for job_id, _ in skipped)

        answer = self.both(f"claim_next by {owner}", pick)
        if answer[0] == "ok" and answer[1][0] is not None:
            job_id = answer[1][0][2][len("id=") :]
            self.remember(owner, job_id, (answer[0], answer[1][0]))

    @rule(owner=owners, ttl=ttls, limit=st.integers(min_value=1, max_value=3))
    def claim_some(self, owner: str, ttl: float, limit: int) -> None:
        answer = self.both(f"claim_some {limit} by {owner}", lambda s: s.claim_some(owner, ttl, limit))
        if answer[0] == "ok":
            for shown in answer[1]:
                self.remember(owner, shown[2][len("id=") :], ("ok", shown))

    @precondition(lambda self: self.ids)
    @rule(ixs=st.lists(jobs_ix, min_size=1, max_size=3), owner=owners, ttl=ttls)
    def claim_each(self, ixs: list[int], owner: str, ttl: float) -> None:
        """The claims of a worker's free slots, in one statement on PostgreSQL: each judged as its own claim."""
        job_ids = list(dict.fromkeys(self.pick(ix) for ix in ixs))
        answer = self.both(f"claim_each {' '.join(job_ids)} by {owner}", lambda s: s.claim_each(job_ids, owner, ttl))
        for job_id, shown in zip(job_ids, answer[1], strict=True):
            if isinstance(shown, list):
                self.remember(owner, job_id, ("ok", shown))

    @precondition(lambda self: self.ids)
    @rule(
        ix=jobs_ix,
        then=jobs_ix,
        owner=owners,
        skew=skews,
        state=st.sampled_from(STATES),
        error=st.sampled_from([None, "exit 3"]),
        ttl=ttls,
    )
    def finish_and_claim(
        self, ix: int, then: int, owner: str, skew: int, state: str, error: str | None, ttl: float
    ) -> None:
        """A slot's finish and its next claim, in one round trip on PostgreSQL: each its own verdict."""
        job_id = self.pick(ix)
        next_id = self.pick(ix + 1 + then % max(1, len(self.ids) - 1))  # another job, unless there is one only
        owner = self.holders.get(job_id, owner) if skew == 0 else owner  # mostly its holder finishing
        epoch = self.epoch(owner, job_id, skew)

        def call(s: Any) -> Any:
            return s.finish_and_claim(job_id, epoch, state, error=error, next_id=next_id, owner=owner, ttl_seconds=ttl)

        answer = self.both(f"finish_and_claim {job_id} {state} at {epoch}, then {next_id}", call)
        if answer[0] == "ok" and isinstance(answer[1][1], list):
            self.remember(owner, next_id, ("ok", answer[1][1]))

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix, owner=owners, skew=skews, ttl=ttls)
    def renew(self, ix: int, owner: str, skew: int, ttl: float) -> None:
        job_id = self.pick(ix)
        epoch = self.epoch(owner, job_id, skew)
        self.both(f"renew {job_id} at {epoch}", lambda s: s.renew(job_id, epoch, ttl))

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix, owner=owners, skew=skews)
    def release(self, ix: int, owner: str, skew: int) -> None:
        job_id = self.pick(ix)
        epoch = self.epoch(owner, job_id, skew)
        self.both(f"release {job_id} at {epoch}", lambda s: s.release(job_id, epoch))

    # -- the holder's writes ------------------------------------------------------------------------

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix, owner=owners, skew=skews, done=st.integers(min_value=-1, max_value=9), cp=checkpoints)
    def progress(self, ix: int, owner: str, skew: int, done: int, cp: Any) -> None:
        job_id = self.pick(ix)
        epoch = self.epoch(owner, job_id, skew)
        given = _checkpoint(cp)
        self.holders_write(
            f"progress {job_id} at {epoch}", job_id, epoch, lambda s: s.progress(job_id, epoch, done, given)
        )

    @precondition(lambda self: self.ids)
    @rule(
        ix=jobs_ix,
        owner=owners,
        skew=skews,
        state=st.sampled_from(STATES),
        error=st.sampled_from([None, "", "exit 3"]),
        cp=st.one_of(st.just("unset"), checkpoints),
        done=st.sampled_from([None, 4, -1]),
    )
    def finish(self, ix: int, owner: str, skew: int, state: str, error: str | None, cp: Any, done: int | None) -> None:
        job_id = self.pick(ix)
        epoch = self.epoch(owner, job_id, skew)
        kwargs: dict[str, Any] = {"error": error, "done": done}
        if cp != "unset":
            kwargs["checkpoint"] = _checkpoint(cp)

        def call(s: Any) -> Any:
            return s.finish(job_id, epoch, state, **kwargs)

        self.holders_write(f"finish {job_id} {state} at {epoch}", job_id, epoch, call)

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix, owner=owners, skew=skews, what=st.sampled_from(["error", "extension", "fail-retry", "priority"]))
    def update(self, ix: int, owner: str, skew: int, what: str) -> None:
        job_id = self.pick(ix)
        epoch = self.epoch(owner, job_id, skew)
        now = self.clock.now

        def mutate(rec: jobctl.Record) -> None:
            if what == "error":
                rec.error = "half way"
            elif what == "extension":
                rec.extensions["vendor.example/note@1"] = Raw('{"b": 1, "a": [1.0, 2e1]}')
            elif what == "priority":
                rec.extensions[PRIORITY] = 9  # a holder's write moves the job up the pick order
            else:
                schedule.record_failure(rec, 1, now)

        self.both(f"update {job_id} {what} at {epoch}", lambda s: s.update(job_id, epoch, mutate))

    # -- everybody else's ---------------------------------------------------------------------

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix, want=st.sampled_from(WANTS), by=st.sampled_from(["", "ops"]))
    def set_intent(self, ix: int, want: str, by: str) -> None:
        job_id = self.pick(ix)
        self.both(f"intent {job_id} {want}", lambda s: s.set_intent(job_id, want, by))

    @precondition(lambda self: self.ids)
    @rule(
        ix=jobs_ix,
        owner=owners,
        skew=skews,
        reason=st.sampled_from(["", "host drains", "move", "move"]),
        grace=st.sampled_from([0, 2, 60, 60]),
    )
    def recall(self, ix: int, owner: str, skew: int, reason: str, grace: float) -> None:
        job_id = self.pick(ix)
        epoch = self.epoch(owner, job_id, skew)
        self.both(f"recall {job_id} at {epoch}", lambda s: s.recall(job_id, epoch, reason, "ops", grace))

    @precondition(lambda self: self.ids)
    @rule(
        ix=jobs_ix,
        owner=owners,
        grace=st.sampled_from([0, 2, 60]),
        wait=st.sampled_from([0, 1, 3]),
        then=st.sampled_from(["reclaim", "renew", "progress", "release", "other"]),
    )
    def recall_round(self, ix: int, owner: str, grace: float, wait: float, then: str) -> None:
        """Claim, recall, and the holder (or another owner) acts while the recall stands [JOB-R1]..[JOB-R7]."""
        job_id = self.pick(ix)
        self.claim(ix, owner, 3600, False)
        epoch = self.epoch(owner, job_id, 0)
        self.both(f"recall {job_id} at {epoch}", lambda s: s.recall(job_id, epoch, "move", "ops", grace))
        self.clock.advance(wait)
        if then == "reclaim":
            self.claim(ix, owner, 30, True)
        elif then == "renew":
            self.both(f"renew {job_id} at {epoch}", lambda s: s.renew(job_id, epoch, 3600))
        elif then == "progress":
            self.both(f"progress {job_id} at {epoch}", lambda s: s.progress(job_id, epoch, 3, {"at": 3}))
        elif then == "release":
            self.both(f"release {job_id} at {epoch}", lambda s: s.release(job_id, epoch))
        else:
            self.claim(ix, OWNERS[(OWNERS.index(owner) + 1) % len(OWNERS)], 30, False)

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix, by=owners)
    def cancel(self, ix: int, by: str) -> None:
        job_id = self.pick(ix)
        self.both(f"cancel {job_id}", lambda s: s.cancel(job_id, by))

    @precondition(lambda self: self.ids)
    @rule(ix=jobs_ix)
    def remove(self, ix: int) -> None:
        job_id = self.pick(ix)
        if self.both(f"remove {job_id}", lambda s: s.remove(job_id)) == ("ok", True):
            self.ids.remove(job_id)

    @rule(seconds=st.sampled_from([0.5, 0.5, 1, 2, 6, 31, 3601]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- after every step -------------------------------------------------------------------------

    @invariant()
    def same_bytes(self) -> None:
        assert self.file.ids() == self.pg.ids()
        for job_id in self.file.ids():
            assert self.file.load_bytes(job_id) == self.pg.load_bytes(job_id), f"{job_id} differs"

    @invariant()
    def same_orphans(self) -> None:
        assert [r.id for r in self.file.orphans()] == [r.id for r in self.pg.orphans()]

    @invariant()
    def statements_never_stricter_than_the_rules(self) -> None:
        assert self.pg.moved == 0, "a statement refused a step its rules allowed"

    @invariant()
    def unfinished_is_true_to_the_state(self) -> None:
        with self.pg.session.tx() as conn:
            wrong = conn.execute(
                "SELECT count(*) FROM jobctl_jobs"
                " WHERE unfinished <> (state NOT IN ('complete', 'failed', 'cancelled'))"
            ).fetchone()
        assert wrong == (0,)


def _shown(got: Any) -> Any:
    """What an answer is compared by: a record as its canonical bytes' lines, plain values as they are."""
    if isinstance(got, jobctl.Record):
        return _record_lines(got)
    if isinstance(got, JobError):  # one verdict among several answers (claim_each, finish_and_claim)
        return (got.verdict, got.message)
    if isinstance(got, tuple):
        return tuple(_shown(item) for item in got)
    if isinstance(got, list):
        return [_shown(item) for item in got]
    return got


def _record_lines(rec: jobctl.Record) -> list[str]:
    """The record's canonical bytes, a line a field, the lease's epoch and the id first (the machine reads them)."""
    text = encode(rec).decode()
    return [f"epoch={rec.lease.epoch}", f"state={rec.state}", f"id={rec.id}", *text.splitlines()]


def _vectors(contract: Path | None) -> list[bytes]:
    """Upstream-written records whose ids the test can replace: readable ones, of any era (ours, and the contract's)."""
    paths = sorted((Path(__file__).resolve().parents[1] / "data").glob("*.json"))
    if contract is not None:
        paths += sorted((contract / "vectors" / "records").glob("*.json"))
    out = []
    for path in paths:
        data = path.read_bytes()
        try:
            rec = jobctl.record.decode(data)
        except JobError:
            continue
        if data.count(f'"{rec.id}"'.encode()) == 1:
            out.append(data)
    return out


@pytest.mark.timeout(900)
def test_the_two_stores_answer_every_history_alike(make_clock: Callable[[], Any], pg_server: Any) -> None:
    """Random histories (JOBCTL_DIFF_EXAMPLES of them, default 60) on both stores, compared step by step."""
    import os

    from contractdir import locate_contract

    from jobctl.store import postgres

    url = pg_server.fresh_schema()
    postgres.init(url)

    def open_postgres(clock: Any) -> Any:
        store = postgres.PostgresStore(url, clock=clock)
        with store.session.tx() as conn:
            conn.execute("DELETE FROM jobctl_jobs")  # each example starts empty, in the one schema
        return store

    contract = locate_contract()

    class Machine(SideBySide):
        clock_factory = staticmethod(make_clock)  # type: ignore[assignment]
        pg_factory = staticmethod(open_postgres)
        vectors = _vectors(contract if contract.is_dir() else None)

    examples = int(os.environ.get("JOBCTL_DIFF_EXAMPLES", "60"))
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
