"""Worker settings: flags beat the environment beat the config file beat defaults, each with its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobctl import Invalid, settings

pytestmark = pytest.mark.timeout(10)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return tmp_path / "config.ini"


def test_defaults_when_nothing_is_set(config: Path) -> None:
    got = settings.load(env={}, path=str(config))
    assert (got.concurrency, got.poll_interval, got.ttl, got.grace, got.shutdown_grace) == (1, 1.0, 30.0, 10.0, 30.0)
    assert (got.name, got.kinds, got.on_failure, got.handlers) == ("worker", (), "", {})
    assert got.config_state == "absent" and got.warnings == []
    assert all(s.source == "default" for s in got.values.values())
    assert got.retry_intervals.value == [10, 30, 60, 120, 240, 240, 240, 240, 240, 240]


def test_each_rung_and_its_provenance(config: Path) -> None:
    config.write_text("[worker]\nconcurrency = 2\npoll_interval = 0.5\nttl = 60\non_failure = echo $JOB_ID\n")
    env = {"MAX_CONCURRENT_JOBS": "3", "JOB_PROCESSOR_POLL_INTERVAL": "0.25", "JOB_RETRY_INTERVALS": "1,2"}
    got = settings.load({"concurrency": 4}, env=env, path=str(config))
    assert got.values["concurrency"] == settings.Setting("concurrency", 4, "flag --concurrency")
    assert got.values["poll_interval"] == settings.Setting("poll_interval", 0.25, "env JOB_PROCESSOR_POLL_INTERVAL")
    assert got.values["ttl"] == settings.Setting("ttl", 60.0, f"config {config}")
    assert got.on_failure == "echo $JOB_ID"  # no interpolation: shell text stays as written
    assert got.values["grace"].source == "default"
    assert got.retry_intervals == settings.Setting("retry_intervals", [1, 2], "env JOB_RETRY_INTERVALS")
    assert got.config_state == "read"


def test_an_empty_variable_is_not_an_override(config: Path) -> None:
    config.write_text("[worker]\nconcurrency = 2\n")
    got = settings.load(env={"MAX_CONCURRENT_JOBS": " "}, path=str(config))
    assert got.values["concurrency"].source.startswith("config ")


def test_flags_given_as_text_are_parsed(config: Path) -> None:
    got = settings.load({"ttl": "12.5", "kinds": ("shell", "fetch")}, env={}, path=str(config))
    assert got.ttl == 12.5 and got.kinds == ("shell", "fetch")


def test_handlers_from_the_file_and_the_flags(config: Path) -> None:
    config.write_text("[handlers]\nfetch = ./fetch.sh\nresize = convert-it\n")
    got = settings.load(handlers=["fetch=./better-fetch.sh --fast"], env={}, path=str(config))
    assert got.handler_commands() == {"fetch": "./better-fetch.sh --fast", "resize": "convert-it"}
    assert got.handlers["fetch"].source == "flag --handler"
    assert got.handlers["resize"].source == f"config {config}"
    with pytest.raises(Invalid):
        settings.load(handlers=["nocommand"], env={}, path=str(config))


def test_a_file_that_does_not_parse_is_ignored_and_said_so(config: Path) -> None:
    config.write_text("concurrency = 9\n")  # no section header
    got = settings.load(env={}, path=str(config))
    assert got.config_state == "ignored" and got.concurrency == 1
    assert len(got.warnings) == 1 and str(config) in got.warnings[0]


def test_unknown_keys_and_sections_are_warned_about(config: Path) -> None:
    config.write_text("[worker]\nconcurency = 2\n[workers]\nx = 1\n")
    got = settings.load(env={}, path=str(config))
    assert any("concurency" in w for w in got.warnings) and any("[workers]" in w for w in got.warnings)


@pytest.mark.parametrize(
    ("where", "text"),
    [("env", "MAX_CONCURRENT_JOBS=0"), ("env", "JOBCTL_TTL=-1"), ("config", "ttl = soon"), ("flag", "ttl=nan")],
)
def test_a_value_that_makes_no_sense_is_refused_naming_its_source(config: Path, where: str, text: str) -> None:
    name, value = (part.strip() for part in text.split("=", 1))
    env: dict[str, str] = {}
    flags: dict[str, object] = {}
    if where == "env":
        env[name] = value
    elif where == "config":
        config.write_text(f"[worker]\n{name} = {value}\n")
    else:
        flags[name] = value
    with pytest.raises(Invalid) as caught:
        settings.load(flags, env=env, path=str(config))
    assert where in str(caught.value)


def test_the_config_file_location(tmp_path: Path) -> None:
    assert settings.config_path({"JOBCTL_CONFIG": "/etc/x.ini"}) == ("/etc/x.ini", "env JOBCTL_CONFIG")
    path, source = settings.config_path({})
    assert path.endswith("config.ini") and source == "default"


def test_describe_lists_every_setting_with_its_source(config: Path) -> None:
    config.write_text("[worker]\nconcurrency = 2\n[handlers]\nfetch = ./f\n")
    rows = settings.describe({"JOBCTL_CONFIG": str(config), "JOBCTL_GRACE": "3"})
    table = {name: (value, source) for name, value, source in rows}
    assert table["config"] == (str(config), "read, env JOBCTL_CONFIG")
    assert table["concurrency"] == ("2", f"config {config}")
    assert table["grace"] == ("3", "env JOBCTL_GRACE")
    assert table["kinds"] == ("(all)", "default")
    assert table["handler fetch"] == ("./f", f"config {config}")
    assert [r[0] for r in rows][1 : 1 + len(settings.SETTINGS)] == [s.name for s in settings.SETTINGS]


def test_describe_never_refuses(config: Path) -> None:
    rows = settings.describe({"JOBCTL_CONFIG": str(config), "MAX_CONCURRENT_JOBS": "many"})
    assert rows[-1][0] == "worker settings" and "MAX_CONCURRENT_JOBS" in rows[-1][2]


def test_the_trust_settings_from_the_config_file_and_the_environment(config: Path) -> None:
    config.write_text("[worker]\npass_env = AWS_PROFILE, HTTPS_PROXY\nallow_loader_env = yes\nmax_ttl = 3600\n")
    env = {"JOBCTL_CONFIG": str(config)}
    got = settings.load(env=env)
    assert (got.pass_env, got.allow_loader_env, got.max_ttl) == (("AWS_PROFILE", "HTTPS_PROXY"), True, 3600.0)
    assert settings.one("max_ttl", env).value == 3600.0
    got = settings.load({"pass_env": ("A",), "allow_loader_env": False}, env={**env, "JOBCTL_MAX_TTL": "7200"})
    assert (got.pass_env, got.allow_loader_env, got.max_ttl) == (("A",), False, 7200.0)
    for variable, value in (("JOBCTL_PASS_ENV", "A B"), ("JOBCTL_ALLOW_LOADER_ENV", "maybe"), ("JOBCTL_MAX_TTL", "59")):
        with pytest.raises(Invalid, match=variable):
            settings.load(env={**env, variable: value})
    with pytest.raises(Invalid, match="more than max_ttl"):
        settings.load({"ttl": 7200.0}, env=env)
