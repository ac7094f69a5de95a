"""`jobctl retry` on both stores: a gate stays a gate, one replacement per ended job, retry where the cause is."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from clitools import JOBCTL, Jobctl

from jobctl import Store
from jobctl.cli.main import EXIT_DRAIN_INCOMPLETE
from jobctl.errors import CancelledByDependency, Retried
from jobctl.lifecycle import replacement_id
from jobctl.schedule import APPROVAL, after_of, gated, retry_of_link

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, jobctl: Jobctl) -> Iterator[Store]:
    """``jobctl`` pointed at a directory store, then at a PostgreSQL one; the store, to look at."""
    if request.param == "file":
        yield jobctl.store()
        return
    from jobctl.store import postgres

    url = request.getfixturevalue("pg_url")
    postgres.init(url)
    jobctl.env["JOB_STORE"] = url
    store = postgres.PostgresStore(url)
    yield store
    store.close()


def _submit(jobctl: Jobctl, *args: str) -> str:
    ran = jobctl("submit", *args)
    assert ran.code == 0, ran.err
    return ran.text.strip()


def _drain(jobctl: Jobctl, code: int = EXIT_DRAIN_INCOMPLETE) -> None:
    ran = subprocess.run([JOBCTL, "worker", "--drain", "-q"], env=jobctl.subprocess_env(), capture_output=True)
    assert ran.returncode == code, ran.stderr


def _pipeline(jobctl: Jobctl, store: Store) -> tuple[str, str, str]:
    """fetch fails; build (after fetch) and publish (after build) are cancelled by the worker because of it."""
    fetch = _submit(jobctl, "--pipeline", "p", "--stage", "fetch", "--retries", "0", "--", "sh", "-c", "exit 4")
    build = _submit(jobctl, "--pipeline", "p", "--stage", "build", "--after", fetch, "--", "true")
    publish = _submit(jobctl, "--pipeline", "p", "--stage", "pub", "--after", build, "--", "true")
    _drain(jobctl)
    assert [store.load(job).state for job in (fetch, build, publish)] == ["failed", "cancelled", "cancelled"]
    return fetch, build, publish


def _runs_of(store: Store, job: str) -> list[str]:
    """The ids of the jobs that retry ``job``."""
    return sorted(rec.id for rec in store.list() if retry_of_link(rec) == job)


# -- a gate stays a gate -----------------------------------------------------------------------


def test_a_rejected_gate_is_held_again_and_nothing_runs_it(jobctl: Jobctl, where: Store) -> None:
    gate = _submit(jobctl, "--hold", "--by", "ops", "--", "true")
    assert jobctl("cancel", gate, "--by", "alice").code == 0  # rejected
    assert where.load(gate).state == "cancelled" and where.load(gate).want == "cancel"
    ran = jobctl("retry", gate, "--by", "bob")
    assert ran.code == 0, ran.err
    new = ran.text.split()[0]
    rec = where.load(new)
    assert (rec.state, rec.want, rec.intent.by if rec.intent else None) == ("pending", "pause", "bob")
    assert rec.extensions[APPROVAL] == {"required": True}
    _drain(jobctl, 0)  # nothing runnable: the replacement waits for its approval
    assert where.load(new).state == "pending"
    assert jobctl("approve", new, "--by", "carol").code == 0
    _drain(jobctl, 0)
    assert where.load(new).state == "complete"


def test_a_gate_that_failed_after_its_approval_needs_a_new_one(jobctl: Jobctl, where: Store) -> None:
    gate = _submit(jobctl, "--hold", "--retries", "0", "--", "sh", "-c", "exit 3")
    assert jobctl("approve", gate).code == 0
    _drain(jobctl)
    failed = where.load(gate)
    assert (failed.state, failed.want) == ("failed", "run")  # the intent alone no longer says it was a gate
    new = jobctl("retry", gate).text.split()[0]
    assert where.load(new).want == "pause" and gated(where.load(new))


def test_a_gate_cancelled_for_its_dependency_comes_back_held_with_the_root(jobctl: Jobctl, where: Store) -> None:
    fetch = _submit(jobctl, "--pipeline", "g", "--retries", "0", "--", "false")
    gate = _submit(jobctl, "--pipeline", "g", "--stage", "approve", "--after", fetch, "--hold", "--", "true")
    _drain(jobctl)
    assert where.load(gate).state == "cancelled"
    ran = jobctl("retry", fetch, "--with-dependents")
    assert ran.code == 0, ran.err
    new = dict(reversed(line.split()) for line in ran.lines)
    assert where.load(new[gate]).want == "pause"
    assert where.load(new[fetch]).want == "run"  # only a gate is held


# -- one replacement per ended job --------------------------------------------------------------


def test_a_second_retry_names_the_replacement_and_makes_nothing(jobctl: Jobctl, where: Store) -> None:
    job = _submit(jobctl, "--retries", "0", "--", "false")
    _drain(jobctl)
    first = jobctl("retry", job)
    assert first.code == 0, first.err
    new = first.text.split()[0]
    assert new == replacement_id(where.load(job))
    again = jobctl("retry", job)
    assert again.code == Retried.exit_code == 19
    assert again.lines == [f"{new} {job}"]
    assert again.err.count("\n") == 1 and again.err.startswith("jobctl: retried: ") and new in again.err
    assert _runs_of(where, job) == [new]


def test_concurrent_retries_from_many_processes_make_one_of_each_job(jobctl: Jobctl, where: Store) -> None:
    fetch, build, publish = _pipeline(jobctl, where)
    procs = [
        subprocess.Popen(
            [JOBCTL, "retry", fetch, "--with-dependents"],
            env=jobctl.subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    done = [(proc.wait(60), *proc.communicate()) for proc in procs]
    codes = sorted(code for code, _, _ in done)
    assert codes == [0] + [Retried.exit_code] * 7, [err for _, _, err in done]
    for job in (fetch, build, publish):
        assert len(_runs_of(where, job)) == 1, job
    new_fetch, new_build = _runs_of(where, fetch)[0], _runs_of(where, build)[0]
    assert after_of(where.load(new_build)) == [new_fetch]
    assert after_of(where.load(_runs_of(where, publish)[0])) == [new_build]
    for _code, out, err in done:  # every process names the same replacement of fetch first
        assert out.splitlines()[0] == f"{new_fetch} {fetch}", err


def test_a_retry_that_stopped_half_way_is_completed_by_the_next(jobctl: Jobctl, where: Store) -> None:
    fetch, build, publish = _pipeline(jobctl, where)
    alone = jobctl("retry", fetch)  # the job alone: its dependents stay cancelled
    assert alone.code == 0 and len(alone.lines) == 1
    more = jobctl("retry", fetch, "--with-dependents")
    assert more.code == Retried.exit_code
    assert [line.split()[1] for line in more.lines] == [fetch, build, publish]
    assert [len(_runs_of(where, job)) for job in (fetch, build, publish)] == [1, 1, 1]


def test_a_job_in_the_way_of_the_replacement_is_refused_not_taken(jobctl: Jobctl, where: Store) -> None:
    job = _submit(jobctl, "--retries", "0", "--", "false")
    _drain(jobctl)
    squatter = _submit(jobctl, "--kind", "test", "--id", replacement_id(where.load(job)), "--hold")
    ran = jobctl("retry", job)
    assert ran.code == 10 and f"job {squatter} is in the way" in ran.err and ran.out == b""


# -- retry where the cause is -----------------------------------------------------------------


def test_a_stage_cancelled_for_its_dependency_is_refused_naming_the_root(jobctl: Jobctl, where: Store) -> None:
    fetch, build, publish = _pipeline(jobctl, where)
    for job, dep in ((build, fetch), (publish, build)):
        ran = jobctl("retry", job)
        assert ran.code == CancelledByDependency.exit_code == 20
        assert ran.out == b"" and ran.err.count("\n") == 1
        assert ran.err.startswith(
            f"jobctl: cancelled_by_dependency: job {job} was cancelled because its dependency {dep} "
        )
        assert ran.err.rstrip().endswith(f"jobctl retry {fetch} --with-dependents")  # the root, past build
    assert len(where.list()) == 3  # nothing submitted
    ran = jobctl("retry", fetch, "--with-dependents")
    assert ran.code == 0 and len(ran.lines) == 3
    again = jobctl("retry", build)  # it has its replacement now: named, nothing made
    assert again.code == Retried.exit_code and again.lines == [f"{_runs_of(where, build)[0]} {build}"]
    assert [len(_runs_of(where, job)) for job in (fetch, build, publish)] == [1, 1, 1]


# -- the guide's retry rule ----------------------------------------------------------------------


def test_a_configured_retry_schedule_gives_one_retry_per_interval(jobctl: Jobctl, where: Store) -> None:
    from jobctl.schedule import retry_of

    env = {"JOB_RETRY_INTERVALS": "0,0"}
    job = jobctl("submit", "--", "false", env=env).text.strip()
    policy = retry_of(where.load(job))
    assert policy is not None and policy.intervals == [0, 0]
    jobctl.env.update(env)
    _drain(jobctl)
    assert where.load(job).error.startswith("attempt 3: ")  # the first attempt and two retries
    out = jobctl("submit", "--retries", "0", "--", "false", env=env).text.strip()
    assert retry_of(where.load(out)).intervals == []  # type: ignore[union-attr]  # opted out
    given = jobctl("submit", "--retry-intervals", "5", "--", "false", env=env).text.strip()
    assert retry_of(where.load(given)).intervals == [5]  # type: ignore[union-attr]
    plain = jobctl("submit", "--", "false", env={"JOB_RETRY_INTERVALS": None}).text.strip()
    assert retry_of(where.load(plain)) is None  # nothing configured: no retries
