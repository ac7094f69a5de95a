"""JOB_ID and JOB_EPOCH stand in for the id and --epoch; what is given on the command line wins."""

from __future__ import annotations

import json

from clitools import Jobctl


def _held(jobctl: Jobctl) -> str:
    job = jobctl.submit()
    assert jobctl("claim", job, "--owner", "a", "--ttl", "300").code == 0
    return job


def test_a_command_under_a_lease_needs_no_id_and_no_epoch(jobctl: Jobctl) -> None:
    job = _held(jobctl)
    env = {"JOB_ID": job, "JOB_EPOCH": "1"}
    assert jobctl("checkpoint", '{"offset": 4096}', env=env).out == b'done=0 checkpoint={"offset":4096}\n'
    assert jobctl("progress", "--done", "5", env=env).out == b'done=5 checkpoint={"offset":4096}\n'
    assert jobctl("renew", "--ttl", "60", env=env).code == 0
    assert jobctl("show", env=env).out == jobctl.record(job)
    assert jobctl("intent", "pause", env=env).out == f"{job} pause\n".encode()
    assert jobctl("release", env=env).out == b"state=pending\n"


def test_finish_from_the_environment(jobctl: Jobctl) -> None:
    job = _held(jobctl)
    ran = jobctl("finish", "--state", "complete", "--done", "3", env={"JOB_ID": job, "JOB_EPOCH": "1"})
    assert ran.out == b"state=complete\n"
    assert json.loads(jobctl.record(job))["progress"]["done"] == 3


def test_the_command_line_beats_the_environment(jobctl: Jobctl) -> None:
    job = _held(jobctl)
    other = jobctl.submit()
    env = {"JOB_ID": other, "JOB_EPOCH": "7"}
    assert jobctl("progress", job, "--epoch", "1", "--done", "2", env=env).out == b"done=2 checkpoint=none\n"
    assert jobctl("checkpoint", job, "[]", "--epoch", "1", env=env).out == b"done=2 checkpoint=[]\n"
    assert jobctl("intent", job, "cancel", env=env).out == f"{job} cancel\n".encode()


def test_a_wrong_epoch_in_the_environment_is_refused_as_stale(jobctl: Jobctl) -> None:
    job = _held(jobctl)
    ran = jobctl("checkpoint", "{}", env={"JOB_ID": job, "JOB_EPOCH": "2"})
    assert ran.code == 5
    assert ran.err.startswith("jobctl: stale_epoch: ")


def test_empty_variables_count_as_unset(jobctl: Jobctl) -> None:
    ran = jobctl("checkpoint", "{}", "--epoch", "1", env={"JOB_ID": ""})
    assert ran.code == 2
    assert "JOB_ID" in ran.err
    assert jobctl("show", env={"JOB_ID": ""}).code == 2


def test_a_malformed_epoch_in_the_environment_is_a_usage_error(jobctl: Jobctl) -> None:
    job = _held(jobctl)
    ran = jobctl("renew", job, env={"JOB_EPOCH": "one"})
    assert ran.code == 2
    assert "JOB_EPOCH" in ran.err or "--epoch" in ran.err


def test_claim_next_ignores_a_job_id_left_in_the_environment(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    ran = jobctl("claim", "--next", "--owner", "b", env={"JOB_ID": "some-earlier-job"})
    assert ran.out == f"{job} epoch=1 state=running checkpoint=none\n".encode()


def test_claim_owner_from_the_environment(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, env={"JOB_OWNER": "cron@host"})
    assert json.loads(jobctl.record(job))["lease"]["owner"] == "cron@host"


HOLDER_COMMANDS = [
    ("progress", "--done", "1"),
    ("checkpoint", "{}"),
    ("renew",),
    ("release",),
    ("finish", "--state", "complete"),
]


def test_a_holder_command_without_an_epoch_is_a_usage_error(jobctl: Jobctl) -> None:
    # Epoch 0 used to be the default: the script was told stale_epoch ("somebody
    # claimed it since") and walked away from a job it still held.
    job = _held(jobctl)
    before = jobctl.record(job)
    for command, *rest in HOLDER_COMMANDS:
        args = (command, *rest) if command == "checkpoint" else (command, job, *rest)
        ran = jobctl(*args, env={"JOB_ID": job} if command == "checkpoint" else None)
        assert ran.code == 2, (command, ran.err)
        assert ran.err.splitlines()[-1] == "Error: no epoch: pass --epoch N or export JOB_EPOCH", (command, ran.err)
        assert jobctl.record(job) == before  # nothing was attempted
    # --epoch 0 said out loud is still an epoch: the store judges it.
    assert jobctl("renew", job, "--epoch", "0").code == 5


def test_a_holder_command_without_an_id_says_how_to_give_one(jobctl: Jobctl) -> None:
    for command, *rest in [*HOLDER_COMMANDS, ("show",)]:
        if command == "checkpoint":
            continue  # its only positional is the checkpoint; tested above with JOB_ID empty
        ran = jobctl(command, *rest, "--epoch", "1") if command != "show" else jobctl(command)
        assert ran.code == 2, (command, ran.err)
        assert ran.err.splitlines()[-1] == f"Error: {command} needs a job id: name it, or set JOB_ID", (
            command,
            ran.err,
        )
        usage = jobctl(command, "--help").text
        assert f"jobctl {command} [OPTIONS] [ID]" in usage, usage
