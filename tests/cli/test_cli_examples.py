"""The worker examples in examples/ parse, name commands jobctl accepts, and are the ones the how-to shows.

``examples/systemd`` holds a worker service and a drain service with its
timer, ``examples/cron`` a crontab; docs/howto/workers.md shows each of them
verbatim. The units are parsed here (sections, KEY=VALUE lines, the keys
systemd knows in each section); ``systemd-analyze verify`` checks them too
wherever it works (in some containers it cannot: then it is skipped, said
so, and the parse checks remain). Every jobctl command line in them is run
with ``--help`` appended, which exits 0 only when jobctl accepts its flags.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import REPO

EXAMPLES = REPO / "examples"
HOWTO = REPO / "docs" / "howto" / "workers.md"
UNITS = sorted((EXAMPLES / "systemd").iterdir())
CRONTAB = EXAMPLES / "cron" / "jobctl-worker.crontab"
JOBCTL = "/opt/jobctl/bin/jobctl"  # where the README's install puts it

#: The keys these units may use, per section (a misspelled key is an error here, not a silent no-op).
KNOWN = {
    "Unit": {"Description", "After", "Wants", "Requires", "Documentation"},
    "Service": {
        "Type",
        "User",
        "Group",
        "WorkingDirectory",
        "Environment",
        "EnvironmentFile",
        "ExecStart",
        "KillMode",
        "KillSignal",
        "TimeoutStopSec",
        "Restart",
        "RestartSec",
    },
    "Timer": {"OnCalendar", "Persistent", "RandomizedDelaySec"},
    "Install": {"WantedBy"},
}


def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections and their KEY=VALUE settings, in order; fails on anything else."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: str | None = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        where = f"{path.name}:{number}"
        text = line.strip()
        if not text or text[0] in "#;":
            continue
        if text.startswith("["):
            assert text.endswith("]"), f"{where}: a section header without ]"
            current = text[1:-1]
            assert current in KNOWN, f"{where}: unknown section [{current}]"
            assert current not in sections, f"{where}: [{current}] twice"
            sections[current] = []
            continue
        assert current is not None, f"{where}: a setting before any section"
        key, sep, value = text.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z]+", key), f"{where}: not KEY=VALUE: {text!r}"
        assert key in KNOWN[current], f"{where}: {key} is not a [{current}] key"
        sections[current].append((key, value))
    return sections


def settings(unit: dict[str, list[tuple[str, str]]], section: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for key, value in unit.get(section, []):
        found.setdefault(key, []).append(value)
    return found


def accepted(argv: list[str], env: dict[str, str] | None = None) -> None:
    """jobctl accepts this command line: with --help appended it exits 0 (an unknown flag exits 2)."""
    assert argv[0] == JOBCTL, argv
    ran = subprocess.run(
        [sys.executable, "-m", "jobctl", *argv[1:], "--help"],
        env={**(env or {}), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert ran.returncode == 0, f"{shlex.join(argv)}: {ran.stderr}"
    assert ran.stdout.startswith(f"Usage: jobctl {argv[1]}")


def test_the_examples_are_the_ones_the_howto_shows() -> None:
    page = HOWTO.read_text()
    assert [p.name for p in UNITS] == ["jobctl-drain.service", "jobctl-drain.timer", "jobctl-worker.service"]
    for path in [*UNITS, CRONTAB]:
        assert path.read_text() in page, f"{path.relative_to(REPO)} differs from docs/howto/workers.md"


def test_the_worker_service_stops_the_worker_first_and_waits_for_its_jobs() -> None:
    unit = parse_unit(EXAMPLES / "systemd" / "jobctl-worker.service")
    service = settings(unit, "Service")
    [start] = service["ExecStart"]
    accepted(shlex.split(start))
    assert service["KillMode"] == ["mixed"]  # SIGTERM to the worker alone, not to every job at once
    # Longer than the worker's default shutdown grace (30 s) plus its grace (10 s).
    assert int(service["TimeoutStopSec"][0]) > 30 + 10
    assert "JOB_STORE=/srv/jobs" in service["Environment"]
    assert settings(unit, "Install")["WantedBy"] == ["multi-user.target"]
    assert settings(unit, "Unit")["Description"]


def test_the_drain_timer_starts_a_oneshot_drain() -> None:
    service = settings(parse_unit(EXAMPLES / "systemd" / "jobctl-drain.service"), "Service")
    assert service["Type"] == ["oneshot"]  # a oneshot does not start again while it runs
    [start] = service["ExecStart"]
    argv = shlex.split(start)
    assert argv[1:3] == ["worker", "--drain"]
    accepted(argv)
    timer = parse_unit(EXAMPLES / "systemd" / "jobctl-drain.timer")
    assert settings(timer, "Timer")["OnCalendar"] == ["minutely"]
    assert settings(timer, "Install")["WantedBy"] == ["timers.target"]


def test_a_misspelled_key_or_a_stray_line_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "bad.service"
    bad.write_text("[Service]\nExecStrat=/bin/true\n")
    with pytest.raises(AssertionError, match="ExecStrat is not a"):
        parse_unit(bad)
    bad.write_text("[Service]\nExecStart /bin/true\n")
    with pytest.raises(AssertionError, match="not KEY=VALUE"):
        parse_unit(bad)


_FIELD = r"(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*"
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def test_the_crontab_drains_every_minute_with_a_command_jobctl_accepts() -> None:
    env: dict[str, str] = {}
    jobs: list[str] = []
    for line in CRONTAB.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assignment = re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(\S*)", line)
        if assignment:
            env[assignment[1]] = assignment[2]
            continue
        fields = line.split(None, 5)
        assert len(fields) == 6, f"not a crontab line: {line!r}"
        for field, (low, high) in zip(fields[:5], _RANGES, strict=True):
            assert re.fullmatch(_FIELD, field), f"bad time field {field!r}"
            assert all(low <= int(n) <= high for n in re.findall(r"(?<![/\d])\d+", field)), field
        jobs.append(fields[5])
    assert env == {"JOB_STORE": "/srv/jobs", "MAX_CONCURRENT_JOBS": "4"}
    [command] = jobs
    words = shlex.split(command)
    assert words[:3] == ["flock", "-n", "/tmp/jobctl-worker.lock"]  # one drain at a time
    argv = words[3 : words.index(">>/var/log/jobctl-worker.log")]
    assert argv[1:3] == ["worker", "--drain"]
    accepted(argv, env)


def _verify(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here; the units are still parsed by the tests above")
    probe = tmp_path / "probe" / "jobctl-probe.service"
    probe.parent.mkdir()
    probe.write_text("[Unit]\nDescription=probe\n\n[Service]\nType=oneshot\nExecStart=/bin/true\n")
    ran = _verify([probe])
    if ran.returncode != 0 or ran.stderr.strip():
        pytest.skip(f"systemd-analyze verify does not work here (a trivial unit: {ran.stderr.strip()[:200]})")
    # verify insists that ExecStart is executable: the copies point at a stand-in for the installed jobctl.
    stand_in = tmp_path / "bin" / "jobctl"
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)
    copies = []
    for unit in UNITS:
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text().replace(JOBCTL, str(stand_in)))
        copies.append(copy)
    ran = _verify(copies)
    assert (ran.returncode, ran.stderr) == (0, ""), ran.stderr
    # And it does complain about a unit it should: the check above could fail.
    bogus = tmp_path / "bogus" / "jobctl-bogus.service"
    bogus.parent.mkdir()
    bogus.write_text("[Service]\nType=oneshot\nExecStart=/bin/true\nBogus=1\n")
    assert "Bogus" in _verify([bogus]).stderr
