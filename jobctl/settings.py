"""Worker settings: from flags, then the environment, then a config file, then defaults.

Each resolved value remembers where it came from, so ``jobctl paths`` can
show which rung applied [CFG-P1]. An empty environment variable is not an
override [CFG-E1]. A config file that does not parse is ignored, and said so
in :attr:`Settings.warnings`, never silently [CFG-T2]; a value that parses but
makes no sense (``concurrency = lots``) is refused with ``Invalid`` naming
where it came from.

The config file is INI (standard library, no quoting needed for shell
commands), at ``$JOBCTL_CONFIG`` when set, else ``config.ini`` in the per-user
config directory (platformdirs: ``~/.config/jobctl`` on Linux)::

    [worker]
    concurrency = 4
    poll_interval = 0.5
    ttl = 60
    grace = 10
    shutdown_grace = 30
    name = batch
    kinds = shell, fetch
    max_ttl = 86400
    pass_env = AWS_PROFILE, HTTPS_PROXY
    allow_loader_env = no
    on_failure = curl -fsS -d "text=job $JOB_ID ($JOB_KIND) failed: $JOB_ERROR" https://example.invalid/hook
    on_failure_url = https://hooks.slack.com/services/T000/B000/XXXX

    [handlers]
    fetch = ./bin/fetch-one
"""

from __future__ import annotations

import configparser
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import limits
from .errors import Invalid
from .limits import Range
from .schedule import DEFAULT_INTERVALS, parse_intervals

__all__ = ["Setting", "Settings", "load", "one", "describe", "config_path", "parse_handler", "SETTINGS"]

DEFAULT = "default"


@dataclass(frozen=True)
class Setting:
    """One resolved value and where it came from: ``flag --x``, ``env NAME``, ``config PATH``, ``default``."""

    name: str
    value: Any
    source: str

    def text(self) -> str:
        value = self.value
        if isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value) if value else "(all)" if self.name == "kinds" else ""
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float) and value.is_integer():
            return f"{value:g}"
        if self.name == "on_failure_url" and value:
            from .webhook import where

            return where(str(value))  # a webhook's path is often its secret: never printed
        return str(value)


def _whole(bounds: Range) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not bounds.holds(value):
            raise ValueError
        return value

    parse.__doc__ = bounds.text()
    return parse


def _seconds(bounds: Range) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not math.isfinite(value) or not bounds.holds(value):
            raise ValueError
        return value

    parse.__doc__ = bounds.text()
    return parse


def _switch(text: str) -> bool:
    word = text.strip().lower()
    if word in ("1", "yes", "true", "on"):
        return True
    if word in ("0", "no", "false", "off"):
        return False
    raise ValueError


def _names(text: str) -> tuple[str, ...]:
    """Environment variable names, comma-separated; each a shell name (``A-Z a-z 0-9 _``, no leading digit)."""
    names = _words(text)
    for name in names:
        if not name.replace("_", "a").isalnum() or not name.isascii() or name[0].isdigit():
            raise ValueError
    return names


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.strip() for w in text.split(",") if w.strip())


def _text(text: str) -> str:
    return text.strip()


def _url(text: str) -> str:
    """An http or https URL with a host."""
    from .webhook import check_url

    return check_url(text)


@dataclass(frozen=True)
class _Spec:
    name: str
    flag: str
    env: str
    parse: Callable[[str], Any]
    default: Any
    what: str


#: Every worker setting: name, flag, environment variable, parser, default, meaning.
SETTINGS: tuple[_Spec, ...] = (
    _Spec(
        "concurrency",
        "--concurrency",
        "MAX_CONCURRENT_JOBS",
        _whole(limits.CONCURRENCY),
        1,
        f"jobs run at once, {limits.CONCURRENCY.text()}",
    ),
    _Spec(
        "poll_interval",
        "--poll-interval",
        "JOB_PROCESSOR_POLL_INTERVAL",
        _seconds(limits.POLL_INTERVAL),
        1.0,
        "seconds between looks at the store when idle (changes wake it sooner on Linux), "
        + limits.POLL_INTERVAL.text(),
    ),
    _Spec(
        "ttl",
        "--ttl",
        "JOBCTL_TTL",
        _seconds(limits.RUN_TTL),
        30.0,
        f"lease length in seconds; renewed every third; {limits.RUN_TTL.text()} and at most max_ttl",
    ),
    _Spec(
        "grace",
        "--grace",
        "JOBCTL_GRACE",
        _seconds(limits.GRACE),
        10.0,
        f"seconds between SIGTERM and SIGKILL when stopping a job, {limits.GRACE.text()}",
    ),
    _Spec(
        "shutdown_grace",
        "--shutdown-grace",
        "JOBCTL_SHUTDOWN_GRACE",
        _seconds(limits.SHUTDOWN_GRACE),
        30.0,
        f"seconds running jobs may go on after SIGTERM to the worker, {limits.SHUTDOWN_GRACE.text()}",
    ),
    _Spec(
        "max_ttl",
        "",
        "JOBCTL_MAX_TTL",
        _seconds(limits.MAX_TTL),
        limits.DEFAULT_MAX_TTL,
        f"the longest lease claim and renew grant, and what list/show/doctor flag beyond; {limits.MAX_TTL.text()}",
    ),
    _Spec(
        "pass_env",
        "--pass-env",
        "JOBCTL_PASS_ENV",
        _names,
        (),
        "names of variables passed to jobs beyond the default list (docs/security.md)",
    ),
    _Spec(
        "allow_loader_env",
        "--allow-loader-env",
        "JOBCTL_ALLOW_LOADER_ENV",
        _switch,
        False,
        "whether a spec's env may set LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT (yes/no)",
    ),
    _Spec("name", "--name", "JOBCTL_WORKER_NAME", _text, "worker", "lease owner prefix: NAME@HOST:PID"),
    _Spec("kinds", "--kind", "JOBCTL_KINDS", _words, (), "only these kinds (default: every kind it can run)"),
    _Spec("on_failure", "--on-failure", "JOBCTL_ON_FAILURE", _text, "", "shell command run when a job finally fails"),
    _Spec(
        "on_failure_url",
        "--on-failure-url",
        "JOBCTL_ON_FAILURE_URL",
        _url,
        "",
        "http or https URL a JSON message is posted to when a job finally fails",
    ),
)
_BY_NAME = {spec.name: spec for spec in SETTINGS}


def config_path(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(path, source)`` of the config file: ``$JOBCTL_CONFIG``, else the user config directory's ``config.ini``."""
    env = os.environ if env is None else env
    given = env.get("JOBCTL_CONFIG", "")
    if given:
        return given, "env JOBCTL_CONFIG"
    import platformdirs

    return os.path.join(platformdirs.user_config_dir("jobctl", appauthor=False), "config.ini"), DEFAULT


def parse_handler(text: str) -> tuple[str, str]:
    """``KIND=CMD`` -> ``(kind, cmd)``."""
    kind, sep, command = text.partition("=")
    if not sep or not kind.strip() or not command.strip():
        raise Invalid(f"handler {text!r} is not KIND=COMMAND")
    return kind.strip(), command.strip()


@dataclass
class Settings:
    """Resolved worker settings, each a :class:`Setting` with its provenance."""

    values: dict[str, Setting] = field(default_factory=dict)
    handlers: dict[str, Setting] = field(default_factory=dict)
    retry_intervals: Setting = field(
        default_factory=lambda: Setting("retry_intervals", list(DEFAULT_INTERVALS), DEFAULT)
    )
    config: str = ""
    config_source: str = DEFAULT
    config_state: str = "absent"
    warnings: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value

    @property
    def concurrency(self) -> int:
        return int(self["concurrency"])

    @property
    def poll_interval(self) -> float:
        return float(self["poll_interval"])

    @property
    def ttl(self) -> float:
        return float(self["ttl"])

    @property
    def grace(self) -> float:
        return float(self["grace"])

    @property
    def shutdown_grace(self) -> float:
        return float(self["shutdown_grace"])

    @property
    def name(self) -> str:
        return str(self["name"])

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self["kinds"])

    @property
    def on_failure(self) -> str:
        return str(self["on_failure"])

    @property
    def on_failure_url(self) -> str:
        return str(self["on_failure_url"])

    @property
    def max_ttl(self) -> float:
        return float(self["max_ttl"])

    @property
    def pass_env(self) -> tuple[str, ...]:
        return tuple(self["pass_env"])

    @property
    def allow_loader_env(self) -> bool:
        return bool(self["allow_loader_env"])

    def handler_commands(self) -> dict[str, str]:
        return {kind: str(s.value) for kind, s in self.handlers.items()}

    def describe(self) -> list[tuple[str, str, str]]:
        """``(name, value, source)`` rows for ``jobctl paths``: the config file first, then every setting."""
        rows = [("config", self.config, f"{self.config_state}, {self.config_source}")]  # one level of brackets
        for spec in SETTINGS:
            setting = self.values[spec.name]
            rows.append((spec.name, setting.text(), setting.source))
        for kind in sorted(self.handlers):
            setting = self.handlers[kind]
            rows.append((f"handler {kind}", str(setting.value), setting.source))
        rows.append(
            ("retry_intervals", self.retry_intervals.text(), self.retry_intervals.source + ", submit's default")
        )
        return rows


def _read_config(path: str, out: Settings) -> configparser.ConfigParser | None:
    parser = configparser.ConfigParser(interpolation=None)
    from .fsio import read_regular

    try:
        parser.read_string(read_regular(path).decode("utf-8"), source=path)  # a FIFO there: refused, not waited on
    except FileNotFoundError:
        out.config_state = "absent"
        return None
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        out.config_state = "ignored"
        out.warnings.append(f"{path}: ignored, it could not be read: {exc}".replace("\n", " "))
        return None
    out.config_state = "read"
    for section in parser.sections():
        if section not in ("worker", "handlers"):
            out.warnings.append(f"{path}: section [{section}] is not one jobctl reads (worker, handlers)")
    if parser.has_section("worker"):
        for key in parser["worker"]:
            if key not in _BY_NAME:
                out.warnings.append(f"{path}: [worker] {key} is not a setting ({', '.join(_BY_NAME)})")
    return parser


def _parse(spec: _Spec, text: str, source: str) -> Any:
    try:
        return spec.parse(text)
    except ValueError:
        raise Invalid(f"{spec.name} from {source}: {text!r} is not valid ({spec.what})") from None


def check(name: str, value: Any) -> Any:
    """A setting given as a Python value (``jobctl.Worker(ttl=...)``), judged by the rules its flag follows.

    Returns the value as the setting holds it; ``Invalid`` names the setting,
    the value and what it takes. A number must be one (``True`` is not 1),
    a whole one where the setting counts.
    """
    spec = _BY_NAME.get(name)
    if spec is None:
        raise Invalid(f"{name} is not a worker setting ({', '.join(_BY_NAME)})")
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool) and spec.parse is _switch:
        text = "yes" if value else "no"
    elif isinstance(value, (list, tuple)) and spec.parse in (_names, _words):
        text = ",".join(str(v) for v in value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and spec.parse not in (_text, _url):
        text = repr(value)
    else:
        raise Invalid(f"{name}: {value!r} is not valid ({spec.what})")
    try:
        return spec.parse(text)
    except ValueError:
        raise Invalid(f"{name}: {value!r} is not valid ({spec.what})") from None


def load(
    flags: Mapping[str, Any] | None = None,
    handlers: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    path: str | None = None,
    sources: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every worker setting: ``flags`` (name -> value, None = not given) > env > config file > default.

    ``handlers`` are ``KIND=CMD`` strings from the command line; they override
    the config file's ``[handlers]`` kind by kind. ``sources`` names where a
    flag-level value came from when it was not a flag (``--app myapp:worker``).
    """
    sources = sources or {}
    env = os.environ if env is None else env
    flags = flags or {}
    out = Settings()
    if path is None:
        out.config, out.config_source = config_path(env)
    else:
        out.config, out.config_source = path, "given"
    parser = _read_config(out.config, out)
    section = parser["worker"] if parser is not None and parser.has_section("worker") else None
    for spec in SETTINGS:
        flag = flags.get(spec.name)
        if flag is not None and flag != ():
            source = sources.get(spec.name, f"flag {spec.flag}")
            value = flag
            if isinstance(flag, str) and spec.parse is not _text:
                value = _parse(spec, flag, source)
            elif isinstance(flag, (list, tuple)):
                value = tuple(flag)
            if isinstance(value, tuple) and spec.parse is _names:
                value = _parse(spec, ",".join(value), source)
            out.values[spec.name] = Setting(spec.name, value, source)
            continue
        text = env.get(spec.env, "")
        if text.strip():
            out.values[spec.name] = Setting(spec.name, _parse(spec, text, f"env {spec.env}"), f"env {spec.env}")
            continue
        if section is not None and spec.name in section and section[spec.name].strip():
            source = f"config {out.config}"
            out.values[spec.name] = Setting(spec.name, _parse(spec, section[spec.name], source), source)
            continue
        out.values[spec.name] = Setting(spec.name, spec.default, DEFAULT)
    if out.ttl > out.max_ttl:
        raise Invalid(
            f"ttl from {out.values['ttl'].source}: {out.ttl:g} is more than max_ttl "
            f"({out.max_ttl:g}, {out.values['max_ttl'].source}), the longest lease jobctl grants"
        )
    if parser is not None and parser.has_section("handlers"):
        for kind, command in parser["handlers"].items():
            if command.strip():
                out.handlers[kind] = Setting(kind, command.strip(), f"config {out.config}")
    for text in handlers:
        kind, command = parse_handler(text)
        out.handlers[kind] = Setting(kind, command, "flag --handler")
    intervals = env.get("JOB_RETRY_INTERVALS", "")
    if intervals.strip():
        out.retry_intervals = Setting(
            "retry_intervals", parse_intervals(intervals, "JOB_RETRY_INTERVALS"), "env JOB_RETRY_INTERVALS"
        )
    return out


def one(name: str, env: Mapping[str, str] | None = None) -> Setting:
    """One setting from the environment, else the config file, else its default (no flags).

    For the commands that need a single value (``max_ttl`` for ``claim``,
    ``renew``, ``list``, ``show``) without judging every other setting: a
    bad value elsewhere in the config is not theirs to refuse.
    """
    spec = _BY_NAME[name]
    env = os.environ if env is None else env
    text = env.get(spec.env, "")
    if text.strip():
        return Setting(name, _parse(spec, text, f"env {spec.env}"), f"env {spec.env}")
    scratch = Settings()
    scratch.config, scratch.config_source = config_path(env)
    parser = _read_config(scratch.config, scratch)
    if parser is not None and parser.has_section("worker"):
        section = parser["worker"]
        if name in section and section[name].strip():
            source = f"config {scratch.config}"
            return Setting(name, _parse(spec, section[name], source), source)
    return Setting(name, spec.default, DEFAULT)


def describe(env: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """What ``jobctl paths`` prints for the worker: every setting, its value and its source.

    Never refuses: a bad value is shown with the reason instead.
    """
    try:
        resolved = load(env=env)
    except Invalid as exc:
        path, source = config_path(env)
        return [("config", path, source), ("worker settings", "unusable", exc.message)]
    rows = resolved.describe()
    rows.extend(("warning", text, "") for text in resolved.warnings)
    return rows
