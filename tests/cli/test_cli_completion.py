"""Shell completion, through click: command names, options, and job ids from the store."""

from __future__ import annotations

from pathlib import Path

from clitools import Jobctl


def complete(jobctl: Jobctl, words: str) -> list[str]:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    ran = jobctl(env={"_JOBCTL_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert ran.code == 0, ran.err
    return [line.split(",", 1)[1] for line in ran.lines if line]  # nothing to offer is one empty line


def test_commands_options_and_ids_complete(jobctl: Jobctl) -> None:
    assert complete(jobctl, "jobctl cl") == ["claim"]
    assert "checkpoint" in complete(jobctl, "jobctl c")
    assert "--owner" in complete(jobctl, "jobctl claim --o")
    jobctl.submit("--id", "nightly-1")
    jobctl.submit("--id", "nightly-2")
    jobctl.submit("--id", "other")
    assert complete(jobctl, "jobctl show night") == ["nightly-1", "nightly-2"]
    assert complete(jobctl, "jobctl wait nightly-1 o") == ["other"]


def test_the_bash_script_is_printed(jobctl: Jobctl) -> None:
    ran = jobctl(env={"_JOBCTL_COMPLETE": "bash_source"})
    assert ran.code == 0
    assert "_JOBCTL_COMPLETE=bash_complete" in ran.text


def test_ids_are_not_completed_through_a_linked_jobs_directory(jobctl: Jobctl, tmp_path: Path) -> None:
    jobctl.submit("--id", "nightly-1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private-1.json").write_text("{}")
    (jobctl.root / "jobs").rename(jobctl.root / "jobs.old")
    (jobctl.root / "jobs").symlink_to(elsewhere)
    assert complete(jobctl, "jobctl show p") == []


def test_the_zsh_and_fish_scripts_are_printed(jobctl: Jobctl) -> None:
    for shell, marker in (("zsh", "#compdef jobctl"), ("fish", "complete --no-files --command jobctl")):
        ran = jobctl(env={"_JOBCTL_COMPLETE": f"{shell}_source"})
        assert (ran.code, ran.err) == (0, ""), shell
        assert marker in ran.text, shell
        assert f"_JOBCTL_COMPLETE={shell}_complete" in ran.text, shell


def test_intent_completes_its_values(jobctl: Jobctl) -> None:
    jobctl.submit("--id", "nightly-1")
    assert complete(jobctl, "jobctl intent nightly-1 ") == ["run", "pause", "cancel"]
    assert complete(jobctl, "jobctl intent nightly-1 p") == ["pause"]
    assert complete(jobctl, "jobctl intent night") == ["nightly-1"]
    assert complete(jobctl, "jobctl intent nightly-1 run ") == []
