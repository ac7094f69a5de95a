"""What a job sees of the worker's environment: the allow-list, --pass-env, and the spec env it may not set.

The secret is read back the way an attacker who can submit jobs would read
it: from the job's own attempt log (``jobctl logs``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from workertools import no_config, submit

from jobctl import FileStore, Invalid, Record, schedule
from jobctl.cli.main import EXIT_DRAIN_INCOMPLETE, State, cli
from jobctl.jobenv import DEFAULT_PASS, JobEnvironment

pytestmark = pytest.mark.timeout(60)

SECRET = "hooks.example.invalid/T000/s3cr3t"
SHOW = ["sh", "-c", 'echo "hook=${SLACK_WEBHOOK:-unset} lang=${LC_ALL:-unset} path=${PATH:+set} id=$JOB_ID"']


def invoke(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    environ = {
        "JOB_STORE": str(root),
        "JOBCTL_CONFIG": no_config(),
        "SLACK_WEBHOOK": SECRET,
        "LC_ALL": "C.UTF-8",
        **(env or {}),
    }
    state = State(terminal=False, env=environ)
    return CliRunner().invoke(cli, list(args), obj=state, env=environ, catch_exceptions=False)


def log_of(root: Path, job: str) -> str:
    result = invoke(root, "logs", job)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_a_secret_in_the_worker_env_does_not_reach_the_job(store: FileStore, root: Path) -> None:
    job = submit(store, SHOW)
    result = invoke(root, "worker", "--drain")
    assert result.exit_code == 0, result.stderr
    log = log_of(root, job)
    assert f"hook=unset lang=C.UTF-8 path=set id={job}" in log
    assert SECRET not in log


def test_pass_env_passes_a_named_variable(store: FileStore, root: Path) -> None:
    job = submit(store, SHOW)
    assert invoke(root, "worker", "--drain", "--pass-env", "SLACK_WEBHOOK").exit_code == 0
    assert f"hook={SECRET}" in log_of(root, job)


def test_pass_env_is_a_setting_shown_by_paths(store: FileStore, root: Path) -> None:
    job = submit(store, SHOW)
    assert invoke(root, "worker", "--drain", env={"JOBCTL_PASS_ENV": "SLACK_WEBHOOK"}).exit_code == 0
    assert f"hook={SECRET}" in log_of(root, job)
    paths = invoke(root, "paths", env={"JOBCTL_PASS_ENV": "SLACK_WEBHOOK, AWS_PROFILE"}).stdout
    assert "worker.pass_env=SLACK_WEBHOOK,AWS_PROFILE (env JOBCTL_PASS_ENV)" in paths.splitlines()
    assert "worker.allow_loader_env=no (default)" in paths.splitlines()
    assert "worker.max_ttl=86400 (default)" in paths.splitlines()
    bad = invoke(root, "worker", "--drain", "--pass-env", "NOT A NAME")
    assert bad.exit_code == Invalid.exit_code and "pass_env" in bad.stderr


def test_jobctl_run_applies_the_same_list(store: FileStore, root: Path) -> None:
    job = submit(store, SHOW)
    result = invoke(root, "run", job)
    assert result.exit_code == 0 and "hook=unset" in result.stdout and SECRET not in result.stdout
    again = submit(store, SHOW)
    assert f"hook={SECRET}" in invoke(root, "run", again, "--pass-env", "SLACK_WEBHOOK").stdout


def test_the_alert_keeps_the_whole_environment(store: FileStore, root: Path, tmp_path: Path) -> None:
    out = tmp_path / "alert"
    job = submit(store, ["sh", "-c", 'echo "hook=${SLACK_WEBHOOK:-unset}"; exit 3'])
    result = invoke(root, "worker", "--drain", "--on-failure", f'echo "$JOB_ID $SLACK_WEBHOOK" > {out}')
    assert result.exit_code == EXIT_DRAIN_INCOMPLETE, result.stderr  # the job failed
    assert out.read_text() == f"{job} {SECRET}\n"
    assert "hook=unset" in log_of(root, job)


@pytest.mark.parametrize("name", ["JOB_ID", "JOB_EPOCH", "JOB_STORE", "JOB_ANYTHING"])
def test_a_spec_may_not_set_job_variables(store: FileStore, root: Path, name: str) -> None:
    rec = Record(kind="shell", spec={"argv": ["true"], "env": {name: "x"}})
    schedule.plan(rec, retries=3, intervals=[0])
    job = store.submit(rec)
    result = invoke(root, "worker", "--drain", "--allow-loader-env")
    assert result.exit_code == EXIT_DRAIN_INCOMPLETE, result.stderr  # the job failed
    final = store.load(job)
    assert final.state == "failed"  # at once: the same spec would be refused again
    assert schedule.attempt(final) == 1
    assert job in final.error and name in final.error and "JOB_*" in final.error


def with_env(store: FileStore, argv: list[str], env: dict[str, str]) -> str:
    return store.submit(Record(kind="shell", spec={"argv": argv, "env": env}))


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"])
def test_loader_variables_need_the_workers_consent(store: FileStore, root: Path, name: str) -> None:
    # LD_LIBRARY_PATH at a missing directory is harmless; the other two name a missing
    # object, which the loader reports and ignores.
    value = "/nonexistent" if name == "LD_LIBRARY_PATH" else "/nonexistent/x.so"
    argv = ["sh", "-c", f'echo "{name}=${{{name}}}"']
    job = with_env(store, argv, {name: value})
    assert invoke(root, "worker", "--drain").exit_code == EXIT_DRAIN_INCOMPLETE  # the job failed
    refused = store.load(job)
    assert refused.state == "failed" and name in refused.error and "--allow-loader-env" in refused.error
    assert job in refused.error
    allowed = with_env(store, argv, {name: value})
    assert invoke(root, "worker", "--drain", "--allow-loader-env").exit_code == 0
    assert store.load(allowed).state == "complete"
    assert f"{name}={value}" in log_of(root, allowed)


def test_the_policy_object() -> None:
    policy = JobEnvironment(pass_env=("AWS_PROFILE", "JOB_TOKEN"))
    worker = {
        "PATH": "/bin",
        "LC_TIME": "C",
        "LCX": "no",
        "AWS_PROFILE": "p",
        "AWS_SECRET_ACCESS_KEY": "k",
        "JOB_OWNER": "w",
        "JOB_TOKEN": "t",
    }
    assert policy.base(worker) == {"PATH": "/bin", "LC_TIME": "C", "AWS_PROFILE": "p", "JOB_TOKEN": "t"}
    assert set(DEFAULT_PASS) >= {"PATH", "HOME", "LANG", "LC_*", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM"}
    policy.check({"FOO": "1"}, "j")
    with pytest.raises(Invalid, match="JOB_ID"):
        policy.check({"JOB_ID": "x"}, "j")
    with pytest.raises(Invalid, match="LD_PRELOAD"):
        policy.check({"LD_PRELOAD": "x"}, "j")
    JobEnvironment(allow_loader_env=True).check({"LD_PRELOAD": "x"}, "j")
