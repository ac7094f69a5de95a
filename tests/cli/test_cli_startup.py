"""The import budget: what a piped ``jobctl submit`` and ``jobctl list`` must not import.

jobctl is started by cron and by shell loops, so its start-up is its latency
(bench/startup_bench.py measures it). rich is for terminals, platformdirs for
the config-file rung, the worker for ``jobctl run``; none of them belongs on
the path of a piped command. Each case runs the real entry point in a fresh
interpreter and lists ``sys.modules`` as it exits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import Jobctl

from jobctl import FileStore, ids, wire
from jobctl.errors import Invalid

DUMP = """
import atexit, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))  # no json: it is watched for
sys.argv = ["jobctl", *sys.argv[2:]]
from jobctl.cli import main
main()
"""

#: Never on a piped command's path, whatever the store holds.
NEVER = (
    "rich",
    "jobctl.runner",
    "jobctl.worker",
    "jobctl.replay",
    "jobctl.cli.live",
    "jobctl.cli.upkeep",
    "jobctl.cli.docgen",
    "importlib.metadata",
    "subprocess",
    "asyncio",
    "psycopg",  # the PostgreSQL driver: only a postgresql:// store asks for it
    "jobctl.store.postgres",
    "locale",
    "pydoc",
)
if sys.version_info < (3, 11):
    # Python 3.10's platform module imports subprocess at its top, and click
    # (click.types) imports uuid, which imports platform: on 3.10 no click
    # program starts without it. From 3.11 platform imports it only when used.
    NEVER = tuple(name for name in NEVER if name != "subprocess")


def loaded(jobctl: Jobctl, tmp_path: Path, *args: str, **env: str) -> set[str]:
    out = tmp_path / "modules.txt"
    proc = subprocess.run(
        [sys.executable, "-c", DUMP, str(out), *args],
        env=jobctl.subprocess_env(**env),
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"\x1b" not in proc.stdout
    return set(out.read_text().splitlines())


def absent(modules: set[str], *names: str) -> list[str]:
    """Those of ``names`` (or their submodules) that were imported after all."""
    return sorted(m for m in modules for name in names if m == name or m.startswith(name + "."))


@pytest.mark.parametrize(
    "args",
    [
        ("submit", "--kind", "fetch", "--spec", '{"url": "https://example.com/a"}'),
        ("list",),
        ("orphans",),
    ],
)
def test_piped_commands_stay_light(jobctl: Jobctl, tmp_path: Path, args: tuple[str, ...]) -> None:
    jobctl.submit("--after", jobctl.submit(), "--retries", "2")  # scheduling data in the store
    modules = loaded(jobctl, tmp_path, *args)
    assert "jobctl.cli.main" in modules  # the measurement itself worked
    assert absent(modules, *NEVER, "platformdirs", "jobctl.schedule") == []
    # json (~1.2 ms) is for the store's side files and the config file: the record's scanner is its C part, _json.
    assert absent(modules, "json") == []
    # Change notices are for watch and the worker; hashlib would load OpenSSL for the summary cache's name.
    # What click itself loads is not ours to save (Python 3.10's uuid -> platform -> subprocess loads select).
    ours = modules - click_loads()
    assert absent(ours, "jobctl.watch", "jobctl.notices", "select", "hashlib", "_hashlib") == []


def click_loads() -> set[str]:
    """The modules ``import click`` loads by itself, on this interpreter."""
    code = "import json, sys, click; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60)
    return set(json.loads(proc.stdout))


def test_the_public_names_load_on_first_use() -> None:
    code = (
        "import sys, jobctl\n"
        "lazy = ('jobctl.store', 'jobctl.watch', 'jobctl.notices')\n"
        "assert not [m for m in lazy if m in sys.modules], sorted(sys.modules)\n"
        "from jobctl import *\n"
        "import jobctl.watch\n"
        "assert jobctl.watch is watch and callable(watch) and jobctl.FileStore is FileStore\n"
        "missing = [n for n in jobctl.__all__ if not hasattr(jobctl, n)]\n"
        "assert not missing and set(jobctl.__all__) <= set(dir(jobctl)), missing\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False, timeout=60)
    assert proc.stdout == b"ok\n", proc.stderr.decode()


def test_submit_imports_only_its_own_command_module(jobctl: Jobctl, tmp_path: Path) -> None:
    modules = loaded(jobctl, tmp_path, "submit", "--kind", "k")
    shared = ("jobctl.cli.main", "jobctl.cli.params", "jobctl.cli.output", "jobctl.cli.render")  # every command's
    commands = {m for m in modules if m.startswith("jobctl.cli.") and not m.startswith(shared)}
    assert commands == {"jobctl.cli.submit"}  # not even the worker's commands
    assert "jobctl.cli.render" in modules
    assert "jobctl.cli.render.piped" not in modules  # it prints an id: no record's line or JSON
    assert "jobctl.cli.render.piped" in loaded(jobctl, tmp_path, "submit", "--kind", "k", "--json")


SPEC = ("--spec", '{"url": "https://example.com/a", "n": 1.50}')


def test_a_piped_submit_generates_no_dataclass(jobctl: Jobctl, tmp_path: Path) -> None:
    """The store's values are written out (jobctl.store.base.Value): ``dataclasses`` and ``copy`` cost ~1.5 ms."""
    modules = loaded(jobctl, tmp_path, "submit", "--kind", "fetch", *SPEC)
    assert absent(modules - click_loads(), "dataclasses", "copy") == []


def test_a_piped_submit_loads_no_decoder(jobctl: Jobctl, tmp_path: Path) -> None:
    """``submit`` decodes nothing: the decoder (and its fast paths) load on the first decode, not with the store;
    the exclusive keys' module with the first claim that takes keys."""
    decoder = ("jobctl.record.fast", "jobctl.record.canonical", "jobctl.record.decoder", "jobctl.record.finished")
    modules = loaded(jobctl, tmp_path, "submit", "--kind", "fetch", *SPEC)
    assert absent(modules, *decoder, "jobctl.store.keys") == []
    jobctl.submit()
    assert set(decoder[:3]) <= loaded(jobctl, tmp_path, "list")  # a command that reads records has them
    assert "jobctl.store.keys" in loaded(jobctl, tmp_path, "claim", "--next")


def test_a_piped_submit_loads_an_extension_s_module_with_its_option(jobctl: Jobctl, tmp_path: Path) -> None:
    """``--priority``, ``--timeout``, ``--exclusive``: each extension's rules load when the option is given."""
    lazy = ("jobctl.priority", "jobctl.timeout", "jobctl.exclusive")
    assert absent(loaded(jobctl, tmp_path, "submit", "--kind", "fetch", *SPEC), *lazy) == []
    asked = ("--priority", "5", "--timeout", "1m", "--exclusive", "db")
    assert set(lazy) <= loaded(jobctl, tmp_path, "submit", "--kind", "fetch", *SPEC, *asked)
    assert "jobctl.exclusive" in loaded(jobctl, tmp_path, "claim", "--next")  # a claim judges a job's key


NAMED = """
import atexit, collections, sys
out, made, real = sys.argv[1], [], collections.namedtuple
def namedtuple(name, *args, **kwargs):
    f = sys._getframe(1)
    while f.f_code.co_filename.endswith("typing.py"):  # typing.NamedTuple's own frames
        f = f.f_back
    made.append(name) if "jobctl" in f.f_code.co_filename else None  # made by jobctl, not by what it imports
    return real(name, *args, **kwargs)
collections.namedtuple = namedtuple
atexit.register(lambda: open(out, "w").write("\\n".join(made)))
sys.argv = ["jobctl", *sys.argv[2:]]
from jobctl.cli import main
main()
"""


def test_a_piped_submit_generates_one_named_tuple(jobctl: Jobctl, tmp_path: Path) -> None:
    """The encoder's Prepared and the shell spec have slots: generating a NamedTuple is ~0.1 ms (the listing's
    FileIdentity, a tuple its cache compares, is the one left)."""
    out = tmp_path / "named.txt"
    argv = [sys.executable, "-c", NAMED, str(out), "submit", "--kind", "fetch", *SPEC]
    proc = subprocess.run(argv, env=jobctl.subprocess_env(), capture_output=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert out.read_text().splitlines() == ["FileIdentity"]


COMPILED = """
import atexit, json, re, sys
out = sys.argv[1]
compiled = []
real = re._compile
def compile(pattern, flags):
    # The frames walked as they are: traceback's extract_stack reads source lines (linecache, tokenize),
    # and on 3.13 a pattern tokenize compiles at its own import came back here half imported.
    f = sys._getframe(1)
    while f is not None and not isinstance(pattern, re.Pattern):
        if "jobctl" in f.f_code.co_filename:
            compiled.append(pattern if isinstance(pattern, str) else pattern.decode("latin-1"))
            break
        f = f.f_back
    return real(pattern, flags)
re._compile = compile
atexit.register(lambda: open(out, "w").write(json.dumps(compiled)))
sys.argv = ["jobctl", *sys.argv[2:]]
from jobctl.cli import main
main()
"""


def compiled(jobctl: Jobctl, tmp_path: Path, *args: str) -> list[str]:
    """The regular expressions compiled while jobctl's code is on the stack, in a fresh interpreter."""
    out = tmp_path / "compiled.json"
    proc = subprocess.run(
        [sys.executable, "-c", COMPILED, str(out), *args],
        env=jobctl.subprocess_env(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    patterns: list[str] = json.loads(out.read_text())
    return patterns


def test_a_piped_submit_compiles_only_the_patterns_it_uses(jobctl: Jobctl, tmp_path: Path) -> None:
    """A URL's password masks, the delay's syntax and the surrogate checks compile when first used, not at import."""
    patterns = compiled(jobctl, tmp_path, "submit", "--kind", "fetch", *SPEC)
    assert any("[{}" in p for p in patterns)  # the measurement itself worked: the spec's layout is on the path
    lazy = ("[\ud800-\udfff]", r"\\u[dD][89a-fA-F]")  # wire's surrogate checks: only for a non-ASCII or escaped text
    unused = [p for p in patterns if "password" in p or "://" in p or "smhd" in p or p in lazy]
    assert unused == []
    # A plain ASCII text's escape, the spec's outer whitespace and a minted id's check need no pattern.
    shortcut = (wire._PLAIN.pattern, wire._WS.pattern, ids._SAFE.pattern)
    assert [p for p in patterns if p in shortcut] == []
    assert wire._PLAIN.pattern in compiled(jobctl, tmp_path, "submit", "--kind", "caf\u00e9")  # not ASCII: the pattern
    # each of them where it is used
    assert any("smhd" in p for p in compiled(jobctl, tmp_path, "submit", "--kind", "k", "--not-before", "5m"))
    surrogate = compiled(jobctl, tmp_path, "submit", "--kind", "k", "--spec", '{"a": "\\ud83d\\ude00"}')
    assert lazy[1] in surrogate


def test_a_spec_that_is_not_json_is_refused_as_before_json_loads(jobctl: Jobctl, tmp_path: Path) -> None:
    """The real entry point, json not loaded: the scanner's first error is the line and exit code CliRunner sees."""
    for spec in ('{"a": 1,}', '{"a": "\\x"}', '{"a\\x": 1}', '{"a": 1'):
        args = ("submit", "--kind", "k", "--spec", spec)
        proc = subprocess.run(
            [sys.executable, "-c", DUMP, str(tmp_path / "modules.txt"), *args],
            env=jobctl.subprocess_env(),
            capture_output=True,
            check=False,
            timeout=60,
        )
        in_process = jobctl(*args)
        assert in_process.code == Invalid.exit_code and "--spec is not JSON: " in in_process.err, in_process.err
        assert (proc.returncode, proc.stderr.decode()) == (in_process.code, in_process.err), spec
        assert len(in_process.err.splitlines()) == 1
    assert list((jobctl.root / "jobs").iterdir()) == []


def test_platformdirs_only_when_the_ladder_reaches_the_config_file(jobctl: Jobctl, tmp_path: Path) -> None:
    FileStore(jobctl.home / ".abstraction")  # the default rung's store: list refuses a missing one
    modules = loaded(jobctl, tmp_path, "list", JOB_STORE="", ABSTRACTION_STORE="")
    assert "platformdirs" in modules
    assert absent(modules, *NEVER) == []
    modules = loaded(jobctl, tmp_path, "list", JOB_STORE="", ABSTRACTION_STORE=str(jobctl.root))
    assert absent(modules, "platformdirs") == []


def test_rich_only_for_a_terminal(jobctl: Jobctl, tmp_path: Path) -> None:
    jobctl.submit()
    for args in (("list", "--json"), ("show", "--json", jobctl.submit()), ("claim", "--next", "--format", "env")):
        assert absent(loaded(jobctl, tmp_path, *args), "rich") == [], args


def test_a_short_lease_does_not_read_the_max_ttl_setting(jobctl: Jobctl, tmp_path: Path) -> None:
    job = jobctl.submit()
    # A cron consumer's claim: a TTL within the smallest max_ttl needs no config file.
    modules = loaded(jobctl, tmp_path, "claim", "--next", "--ttl", "30")
    assert absent(modules, "platformdirs", "configparser", "jobctl.settings") == []
    modules = loaded(jobctl, tmp_path, "renew", job, "--epoch", "1", "--ttl", "600")
    assert "jobctl.settings" in modules  # a longer one is judged against the setting


def test_the_record_package_loads_its_modules_on_first_use() -> None:
    """``import jobctl`` and ``import jobctl.record`` load none of the record's modules; every name is there on use."""
    code = (
        "import sys, jobctl, jobctl.record as record\n"
        "assert not [m for m in sys.modules if m.startswith('jobctl.record.')], sorted(sys.modules)\n"
        "assert 'jobctl.wire' not in sys.modules and 'json' not in sys.modules, sorted(sys.modules)\n"
        "from jobctl.record import Record, encode\n"
        "assert 'jobctl.record.decoder' not in sys.modules, 'the encoder alone loaded the decoder'\n"
        "import jobctl.record.model as model, jobctl.record.decoder as decoder, jobctl.record.canonical as canonical\n"
        "assert record.Record is model.Record is jobctl.Record and record.decode is decoder.decode\n"
        "assert record._canonical is canonical._canonical  # the private names the decoder tests reach\n"
        "names = list(record.__all__) + list(record._FROM)\n"
        "missing = [n for n in names if not hasattr(record, n)]\n"
        "assert not missing and set(names) <= set(dir(record)), missing\n"
        "from jobctl.record import *\n"
        "try:\n"
        "    record.nothing_of_that_name\n"
        "except AttributeError as exc:\n"
        "    assert 'nothing_of_that_name' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('an unknown name was found')\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False, timeout=60)
    assert proc.stdout == b"ok\n", proc.stderr.decode()


GC_SEEN = """
import gc, json, sys
from jobctl.cli import main  # the console script's entry point (before the submodule of that name binds)
import jobctl.cli.main as group
seen = []
group.cli.main = lambda **kw: seen.append(gc.isenabled())  # the command: what it finds
gc.disable() if sys.argv[1] == "off" else None
main()
print(json.dumps([seen, gc.isenabled()]))
"""


@pytest.mark.parametrize(("before", "during"), [("on", True), ("off", False)])
def test_the_collector_is_as_it_was_when_the_command_runs(before: str, during: bool) -> None:
    """Start-up imports with the collector off; the command itself (a worker runs for days) has it back."""
    proc = subprocess.run([sys.executable, "-c", GC_SEEN, before], capture_output=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout) == [[during], during]


def test_start_up_imports_with_the_collector_off() -> None:
    """Whatever ``main`` imports is imported with the collector off (the collector's passes are what it saves)."""
    code = (
        "import gc, json, sys\n"
        "sys.argv = ['jobctl', '--version']\n"
        "seen = []\n"
        "gc.callbacks.append(lambda phase, info: seen.append(phase) if phase == 'start' else None)\n"
        "from jobctl.cli import main\n"
        "seen.clear()\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps([len(seen), 'click' in sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout.splitlines()[-1]) == [0, True]  # after the version's line
