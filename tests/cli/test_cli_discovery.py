"""Store root discovery (DIGEST §7): the nearest rung wins, and each answer names its rung."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import Jobctl

from jobctl import discovery


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private XDG_CONFIG_HOME (platformdirs reads the process environment)."""
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def _write_config(config_home: Path, text: str) -> Path:
    path = config_home / "abstraction" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_rungs_in_order(config_home: Path) -> None:
    path = _write_config(config_home, '{"store": "/from/config"}')
    env = {"JOB_STORE": "/from/job", "ABSTRACTION_STORE": "/from/abstraction", "HOME": "/home/u"}
    assert discovery.resolve("/from/flag", env) == ("/from/flag", "the --store flag")
    assert discovery.resolve(None, env) == ("/from/job", "JOB_STORE")
    del env["JOB_STORE"]
    assert discovery.resolve(None, env) == ("/from/abstraction", "ABSTRACTION_STORE")
    del env["ABSTRACTION_STORE"]
    assert discovery.resolve(None, env) == ("/from/config", str(path))
    path.unlink()
    assert discovery.resolve(None, env) == ("/home/u/.abstraction", "the default; nothing is configured")


def test_empty_variables_are_not_overrides(config_home: Path) -> None:
    env = {"JOB_STORE": "", "ABSTRACTION_STORE": "", "HOME": "/home/u"}
    assert discovery.resolve("", env) == ("/home/u/.abstraction", discovery.DEFAULT)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        ('{"store": 7}', '"store" is not a string'),
    ],
)
def test_a_malformed_config_is_reported_and_skipped(config_home: Path, text: str, problem: str) -> None:
    path = _write_config(config_home, text)
    warnings: list[str] = []
    assert discovery.resolve(None, {"HOME": "/home/u"}, warn=warnings.append) == (
        "/home/u/.abstraction",
        discovery.DEFAULT,
    )
    assert len(warnings) == 1
    assert warnings[0].startswith(f"jobctl: {path} {problem}")


def test_a_config_that_names_no_store_is_silent(config_home: Path) -> None:
    _write_config(config_home, json.dumps({"store": "", "other": 1}))
    warnings: list[str] = []
    assert discovery.resolve(None, {"HOME": "/h"}, warn=warnings.append)[1] == discovery.DEFAULT
    assert warnings == []


def test_no_home_and_nothing_configured(config_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.path.expanduser", lambda path: path)
    with pytest.raises(discovery.Unavailable) as caught:
        discovery.resolve(None, {})
    assert "no home directory" in caught.value.lines[0]
    assert "ABSTRACTION_STORE" in caught.value.lines[1]


def test_a_root_that_cannot_be_opened_names_the_rung(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(discovery.Unavailable) as caught:
        discovery.open_store(str(blocker), "/etc/x/config.json", create=True)
    lines = caught.value.lines
    assert lines[0].startswith(f"jobctl: {blocker}: ")
    assert lines[1] == "  that root came from /etc/x/config.json"


def test_the_command_line_uses_the_config_file_and_warns_on_a_broken_one(jobctl: Jobctl) -> None:
    config = jobctl.home / ".config" / "abstraction" / "config.json"
    config.parent.mkdir(parents=True)
    store = jobctl.home / "configured-store"
    config.write_text(json.dumps({"store": str(store)}))
    env = {"JOB_STORE": None}
    job = jobctl("submit", "--kind", "k", env=env).text.strip()
    assert (store / "jobs" / f"{job}.json").exists()
    facts = dict(line.split("=", 1) for line in jobctl("paths", env=env).lines)
    assert (facts["root"], facts["rung"], facts["config_status"]) == (str(store), str(config), f"names {store}")
    config.write_text("{broken")
    ran = jobctl("list", env=env)
    assert ran.err.startswith(f"jobctl: {config} is not JSON")
    # It fell through to the default, where there is no store: said so, and nothing created.
    default = jobctl.home / ".abstraction"
    assert ran.code == 16 and len(ran.err.splitlines()) == 2, ran.err
    assert ran.err.splitlines()[1].startswith(
        f"jobctl: no_store: {default} does not exist (the root came from the default"
    )
    assert not default.exists()


def test_store_flag_on_the_group_or_the_command(jobctl: Jobctl) -> None:
    elsewhere = jobctl.home / "elsewhere"
    job = jobctl("--store", str(elsewhere), "submit", "--kind", "k").text.strip()
    assert jobctl("list", "--store", str(elsewhere)).lines[0].startswith(job)
    assert jobctl("list").out == b""
    facts = dict(line.split("=", 1) for line in jobctl("paths", "--store", str(elsewhere)).lines)
    assert facts["rung"] == "the --store flag"


# -- a root with no store (issue 7 item 5) ----------------------------------------------

READERS = [
    ("list",),
    ("orphans",),
    ("show", "1787202430967-a752f9a9c2c77b123ffd"),
    ("claim", "--next"),
    ("sweep",),
    ("watch", "--quiet-after", "0", "--exit-on-quiet"),
    ("worker", "--drain"),
    ("pipeline", "nightly"),
    ("wait", "1787202430967-a752f9a9c2c77b123ffd"),
    ("run", "--next", "--", "true"),
]


@pytest.mark.parametrize("args", READERS, ids=[a[0] for a in READERS])
def test_a_mistyped_store_flag_is_reported_and_nothing_is_created(jobctl: Jobctl, args: tuple[str, ...]) -> None:
    typo = jobctl.home / "srv" / "jbos"
    ran = jobctl("--store", str(typo), *args)
    assert ran.code == 16, ran.err
    assert ran.out == b""
    assert ran.err.splitlines() == [
        f"jobctl: no_store: {typo} does not exist (the root came from the --store flag); "
        "check the path (jobctl paths says where jobctl looks); jobctl init DIR creates a store"
    ]
    assert not typo.exists() and not typo.parent.exists()


def test_each_rung_is_named_and_each_kind_of_missing_store(jobctl: Jobctl) -> None:
    not_a_dir = jobctl.home / "file"
    not_a_dir.write_text("x")
    no_jobs = jobctl.home / "empty"
    no_jobs.mkdir()
    cases = [
        ({"JOB_STORE": str(not_a_dir)}, f"{not_a_dir} is not a directory (the root came from JOB_STORE)"),
        (
            {"JOB_STORE": None, "ABSTRACTION_STORE": str(no_jobs)},
            f"{no_jobs} has no jobs/ directory, so it is not a store (the root came from ABSTRACTION_STORE)",
        ),
    ]
    for env, said in cases:
        ran = jobctl("list", env=env)
        assert ran.code == 16 and f"jobctl: no_store: {said}; " in ran.err, ran.err
    assert list(no_jobs.iterdir()) == []


def test_submit_and_init_create_a_store_and_paths_fails_without_one(jobctl: Jobctl) -> None:
    fresh = jobctl.home / "fresh"
    jobctl.env["JOB_STORE"] = str(fresh)
    facts = dict(line.split("=", 1) for line in jobctl("paths").lines)
    assert facts["check_open"].startswith(f"FAILED: {fresh} does not exist")
    assert jobctl("paths").code == 1 and jobctl("doctor").code == 1
    assert not fresh.exists()
    made = jobctl.home / "made"
    assert jobctl("init", str(made)).out == f"{made}\n".encode()
    assert (made / "jobs").is_dir() and (made / "work").is_dir()
    assert jobctl("list", "--store", str(made)).code == 0
    assert jobctl("init").out == f"{fresh}\n".encode()  # the configured root
    assert jobctl("paths").code == 0
    other = jobctl.home / "by-submit"
    assert jobctl("submit", "--store", str(other), "--kind", "k").code == 0
    assert (other / "jobs").is_dir()


def test_the_python_api_still_creates_by_default_and_can_refuse(tmp_path: Path) -> None:
    from jobctl import FileStore
    from jobctl.errors import NoStore

    with pytest.raises(NoStore):
        FileStore(tmp_path / "nowhere", create=False)
    assert not (tmp_path / "nowhere").exists()
    FileStore(tmp_path / "here")
    assert (tmp_path / "here" / "jobs").is_dir()
    assert FileStore(tmp_path / "here", create=False).list() == []


def test_a_fifo_at_a_config_files_name_is_reported_never_waited_on(jobctl: Jobctl) -> None:
    """Nobody writes to it: an open that waited for a writer would hang the command for ever."""
    import os
    import subprocess

    from clitools import JOBCTL

    config = jobctl.home / ".config" / "abstraction" / "config.json"
    config.parent.mkdir(parents=True)
    os.mkfifo(config)
    ran = subprocess.run(
        [JOBCTL, "list"],
        capture_output=True,
        timeout=30,
        env=jobctl.subprocess_env(JOB_STORE=""),
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 16, ran.stderr
    assert ran.stderr.decode().startswith(f"jobctl: {config} cannot be read (not a regular file); ignoring it\n")
    ini = jobctl.home / "worker.ini"
    os.mkfifo(ini)
    job = jobctl.submit()
    ran = subprocess.run(  # a TTL over the smallest max_ttl: the setting is read, from the config file
        [JOBCTL, "claim", job, "--ttl", "3600"],
        capture_output=True,
        timeout=30,
        env=jobctl.subprocess_env(JOBCTL_CONFIG=str(ini)),
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 0, ran.stderr
