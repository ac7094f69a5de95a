"""The output contract for scripts, read from the pages that state it and held to what each command prints.

JSON: every ```json SHAPE``` example of docs/reference/json.md and the table
after it give the keys, in order, and each key's type; each command with
``--json`` is run and every object it prints is checked against its shape,
with the fields filled in (a recall, a result, a pipeline) as well as empty.
Plain lines: the formats of docs/howto/scripting.md's table and of the
command reference (``<id> <state>``, ``removed=N``, ...) are turned into
patterns that each printed line must match whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from clitools import REPO, Jobctl

DOCS = REPO / "docs"
ID = r"[0-9]{13}-[0-9a-f]{20}"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"
STATES = ("pending", "running", "transferred", "complete", "failed", "cancelled")

# -- what json.md says -------------------------------------------------------------------------


def _sections() -> list[tuple[str, dict[str, Any], str]]:
    """Each shape of json.md: its name, its example, and the page's text up to the next shape."""
    text = (DOCS / "reference" / "json.md").read_text(encoding="utf-8")
    found = list(re.finditer(r"```json (\S+)\n(.*?)\n```", text, re.S))
    return [
        (m.group(1), json.loads(m.group(2)), text[m.end() : found[i + 1].start() if i + 1 < len(found) else len(text)])
        for i, m in enumerate(found)
    ]


def _table(after: str) -> dict[str, str]:
    """Key -> documented type, from the key table after an example (``| key | type | meaning |``), if any."""
    body = after.split("\n## ", 1)[0]
    types: dict[str, str] = {}
    if "| key | type |" not in body:
        return types
    body = body.split("| key | type |", 1)[1].split("\n\n", 1)[0]
    for row in re.findall(r"^\| (`[^|]*) \| ([^|]+) \|", body, re.M):
        keys = re.findall(r"`([a-z_]+)`", row[0])
        kinds = [k.strip() for k in row[1].split(",")]
        for key, kind in zip(keys, kinds if len(kinds) == len(keys) else kinds[:1] * len(keys), strict=True):
            types[key] = kind
    return types


def _type_of(value: Any) -> str:
    """A type in the page's words, for a shape whose example is its only statement."""
    if value is None:
        return "JSON"  # the example says nothing more
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "time" if re.fullmatch(TIME, value) else "string"
    if isinstance(value, list):
        return "array of objects" if value and isinstance(value[0], dict) else "array of strings"
    return "object"


def shapes() -> dict[str, list[tuple[str, str]]]:
    """Every documented shape: its keys in order (``v`` first), each with its documented type."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name, example, after in _sections():
        table = _table(after)
        out[name] = [(key, table.get(key) or _type_of(value)) for key, value in example.items()]
    return out


def conforms(value: Any, kind: str) -> bool:
    """Whether ``value`` is of the page's type ``kind`` (``string or null``, ``time``, ``JSON``, ...)."""
    if kind.endswith(" or null"):
        return value is None or conforms(value, kind[: -len(" or null")])
    checks: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "time": lambda v: v is None or (isinstance(v, str) and re.fullmatch(TIME, v) is not None),
        "JSON": lambda v: True,
        "object": lambda v: isinstance(v, dict),
        "array of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "array of objects": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
    }
    assert kind in checks, f"json.md names a type this check does not know: {kind!r}"
    return checks[kind](value)


def check(shape: str, obj: dict[str, Any], nested: bool = False) -> None:
    """``obj`` has exactly the keys of ``shape``, in order, each of its documented type."""
    documented = shapes()[shape][1 if nested else 0 :]
    assert list(obj) == [key for key, _ in documented], f"{shape}: {list(obj)}"
    wrong = {key: obj[key] for key, kind in documented if not conforms(obj[key], kind)}
    assert not wrong, f"{shape}: not of the documented type: {wrong}"
    if not nested:
        assert obj["v"] == 1


def objects(jobctl: Jobctl, *args: str, code: int = 0) -> list[dict[str, Any]]:
    ran = jobctl("--json", *args)  # before the command: after a run's `--` it would be the command's
    assert ran.code == code, ran.err
    return [json.loads(line) for line in ran.lines]


def test_every_type_the_page_names_is_one_this_check_knows() -> None:
    for name, keys in shapes().items():
        for key, kind in keys:
            assert kind.removesuffix(" or null") in (
                "string",
                "integer",
                "number",
                "boolean",
                "time",
                "JSON",
                "object",
                "array of strings",
                "array of objects",
            ), (name, key, kind)


# -- every command with --json -------------------------------------------------------------------


def _full_job(jobctl: Jobctl) -> str:
    """A job with every optional field set: pipeline, priority, timeout, exclusive key, retries, a recall."""
    job = jobctl.submit(
        "--spec", '{"n": 1}', "--pipeline", "p", "--stage", "s1", "--priority", "5", "--timeout", "15m",
        "--exclusive", "key", "--retries", "2", "--total", "10", "--requires", "gpu",
    )  # fmt: skip
    return job


def test_every_job_command_prints_the_documented_job_with_its_types(jobctl: Jobctl) -> None:
    job = _full_job(jobctl)
    waiting = jobctl.submit("--after", job)
    printed = [
        *objects(jobctl, "show", job),
        *objects(jobctl, "claim", job, "--owner", "a", "--ttl", "300"),
        *objects(jobctl, "progress", job, "--epoch", "1", "--done", "3", "--checkpoint", '{"o": 1}'),
        *objects(jobctl, "checkpoint", job, '{"o": 2}', "--epoch", "1"),
        *objects(jobctl, "renew", job, "--epoch", "1"),
        *objects(jobctl, "recall", job, "--reason", "r"),
        *objects(jobctl, "intent", job, "pause"),
        *objects(jobctl, "approve", job),
        *objects(jobctl, "list"),
        *objects(jobctl, "orphans"),
        *objects(jobctl, "release", job, "--epoch", "1"),
        *objects(jobctl, "claim", "--next", "--owner", "b"),
        *objects(jobctl, "finish", job, "--epoch", "2", "--state", "failed", "--error", "boom"),
        *objects(jobctl, "wait", job, code=11),
        *objects(jobctl, "retry", job),
        *objects(jobctl, "cancel", waiting),
        *objects(jobctl, "submit", "--kind", "k"),
    ]
    for obj in printed:
        check("job", obj)
    assert any(obj["recall"] for obj in printed) and any(obj["blocked"] for obj in printed)
    assert any(obj["expires_at"] for obj in printed) and any(obj["checkpoint"] for obj in printed)


def test_a_result_is_embedded_in_the_job(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    assert jobctl("run", job, "--", "sh", "-c", 'echo \'{"x": 1}\' > "$JOB_RESULT"').code == 0
    (shown,) = objects(jobctl, "show", job)
    check("job", shown)
    assert shown["result"] == {"x": 1}


def test_watch_events_have_their_types(jobctl: Jobctl) -> None:
    _full_job(jobctl)
    events = objects(jobctl, "watch", "--quiet-after", "0.1", "--exit-on-quiet")
    assert [e["event"] for e in events] == ["change", "quiet"]
    check("watch-change", events[0])
    check("job", events[0]["job"], nested=True)
    check("watch-quiet", events[1])


def test_run_prints_the_documented_object(jobctl: Jobctl) -> None:
    retried = jobctl.submit("--retries", "1")
    ran = objects(jobctl, "run", retried, "--", "sh", "-c", "exit 3", code=3)
    ran += objects(jobctl, "run", retried, "--", "true")
    ran += objects(jobctl, "run", jobctl.submit(), "--", "/nonexistent/command", code=127)
    for obj in ran:
        check("run", obj)
    assert [(o["state"], o["exit_code"], o["retried"]) for o in ran] == [
        ("pending", 3, True),
        ("complete", 0, False),
        ("failed", 127, False),
    ]
    assert ran[0]["not_before"] is not None


def test_run_prints_nothing_on_stdout_for_a_refusal_before_its_attempt(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "somebody")
    assert objects(jobctl, "run", job, "--", "true", code=4) == []
    assert objects(jobctl, "run", "--next", "--", "true", code=3) == []


def test_worker_events_logs_and_pipeline(jobctl: Jobctl) -> None:
    first = jobctl.submit("--pipeline", "p", "--stage", "a")
    jobctl(
        "submit", "--kind", "shell", "--pipeline", "p", "--stage", "b", "--after", first, "--", "sh", "-c", "echo hi"
    )
    jobctl("run", first, "--", "true")
    events = objects(jobctl, "worker", "--drain", "--poll-interval", "0.05")
    assert [e["event"] for e in events] == ["started", "complete"]
    check("worker-event", events[1])
    check("run", events[1]["outcome"], nested=True)
    # "outcome" only on the event that ends a run: the others have every key but that one.
    documented = [(key, kind) for key, kind in shapes()["worker-event"] if key != "outcome"]
    assert list(events[0]) == [key for key, _ in documented]
    assert all(conforms(events[0][key], kind) for key, kind in documented)
    logs = objects(jobctl, "logs", first)
    assert len(logs) == 1
    check("logs", logs[0])
    stages = objects(jobctl, "pipeline", "p")
    assert [s["stage"] for s in stages] == ["a", "b"]
    for stage in stages:
        check("pipeline", stage)


def test_schedules_init_import_sweep_gc_paths(jobctl: Jobctl, tmp_path: Any) -> None:
    (added,) = objects(jobctl, "schedule", "add", "beat", "--every", "5m", "--kind", "ping", "--spec", '{"a": 1}')
    objects(jobctl, "schedule", "add", "nightly", "--cron", "30 2 * * *", "--kind", "ping")
    listed = objects(jobctl, "schedule", "list")
    for obj in (added, *listed):
        check("schedule", obj)
    check("schedule-remove", *objects(jobctl, "schedule", "remove", "beat"))
    check("init", *objects(jobctl, "init", str(tmp_path / "other")))
    job = jobctl.submit()
    exported = jobctl("export").out
    other = {"JOB_STORE": str(tmp_path / "other")}
    ran = jobctl("import", "--json", input=exported, env=other)
    assert ran.code == 0, ran.err
    check("import", json.loads(ran.text))
    check("sweep", *objects(jobctl, "sweep"))
    jobctl("cancel", job)
    check("gc", *objects(jobctl, "gc", "--older-than", "0s"))
    check("paths", *objects(jobctl, "paths"))
    check("paths", *objects(jobctl, "doctor"))


def test_db_commands(jobctl: Jobctl, pg_url: str) -> None:
    for command in ("init", "migrate"):
        (obj,) = objects(jobctl, "--store", pg_url, "db", command)
        check("db", obj)


def test_the_commands_without_v_print_the_same_with_json(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("run", job, "--", "sh", "-c", 'echo \'{"x": 1.50}\' > "$JOB_RESULT"')
    for args in (("result", job), ("export",)):
        assert jobctl(*args, "--json").out == jobctl(*args).out


# -- plain lines ---------------------------------------------------------------------------------

_PLACES = {
    "<id>": ID,
    "<new id>": ID,
    "<old id>": ID,
    "<n>": r"\d+",
    "N": r"\d+",
    "M": r"\d+",
    "<s>": "(?:" + "|".join(STATES) + ")",
    "<state>": "(?:" + "|".join(STATES) + ")",
    "<k>": r"\S+",
    "<want>": "(?:run|pause|cancel)",
    "<json or none>": r"(?:none|[\[{].*)",
    "<json>": r"[\[{].*",
    "<time>": TIME,
    "<time, whole seconds>": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
}


def pattern(documented: str) -> re.Pattern[str]:
    """A documented plain line (``<id> kind=<k> state=<s>``) as a pattern a printed line must match whole."""
    pieces = re.split("(" + "|".join(re.escape(p) for p in sorted(_PLACES, key=len, reverse=True)) + ")", documented)
    return re.compile("".join(_PLACES.get(piece, re.escape(piece)) for piece in pieces))


def _scripting_table() -> dict[str, str]:
    text = (DOCS / "howto" / "scripting.md").read_text(encoding="utf-8")
    section = text.split("## Plain lines", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (`jobctl [^|]*`) \| (.*) \|$", section, re.M)
    return {command: re.sub(r"^`([^`]*)`.*", r"\1", said) for command, said in rows}


def test_the_plain_lines_of_the_scripting_guide_are_what_is_printed(jobctl: Jobctl) -> None:
    job = jobctl.submit("--total", "10")
    other = jobctl.submit()
    runs: dict[str, list[tuple[str, ...]]] = {
        "`jobctl submit --kind K --spec JSON`": [("submit", "--kind", "k", "--spec", '{"a": 1}')],
        "`jobctl claim ID --owner O`": [("claim", job, "--owner", "o")],
        "`jobctl progress ID --epoch N --done N`": [
            ("progress", job, "--epoch", "1", "--done", "2"),
            ("progress", job, "--epoch", "1", "--done", "3", "--checkpoint", '{"at": 3}'),
        ],
        "`jobctl checkpoint ID JSON`": [("checkpoint", job, '{"at": 4}', "--epoch", "1")],
        "`jobctl renew ID --epoch N`": [("renew", job, "--epoch", "1")],
        "`jobctl recall ID --reason WHY`": [("recall", job, "--reason", "r")],
        "`jobctl intent ID WANT` / `jobctl approve ID`": [("intent", job, "pause"), ("approve", job)],
        "`jobctl list`": [("list",)],
        "`jobctl orphans`": [("orphans",)],
        "`jobctl show ID`": [],  # "the record file": tests/cli/test_cli_plain.py holds it byte for byte
        "`jobctl release ID --epoch N`": [("release", job, "--epoch", "1")],
        "`jobctl claim --next`": [("claim", "--next", "--owner", "o")],
        "`jobctl finish ID --epoch N --state S`": [("finish", job, "--epoch", "2", "--state", "complete")],
        "`jobctl cancel ID`": [("cancel", other)],
        "`jobctl wait ID…`": [("wait", job, other)],
        "`jobctl sweep`": [("sweep",)],
    }
    table = _scripting_table()
    assert set(table) == set(runs), "the guide's table and this test name different commands"
    for row, invocations in runs.items():
        for args in invocations:
            ran = jobctl(*args)
            assert ran.lines, (row, ran.err)
            for line in ran.lines:
                assert pattern(table[row]).fullmatch(line), (row, table[row], line)


def _said(command: str, documented: str) -> str:
    """``documented``, after checking that the command reference still says it in ``command``'s section."""
    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    section = text.split(f"\n## jobctl {command}\n", 1)[1].split("\n## ", 1)[0]
    assert documented in re.sub(r"\s+", " ", section), (command, documented)
    return documented.strip("`")


def test_the_plain_lines_of_the_command_reference_are_what_is_printed(jobctl: Jobctl, tmp_path: Any) -> None:
    first = jobctl.submit("--pipeline", "p", "--stage", "a")
    jobctl("run", first, "--", "false")
    (new,) = jobctl("retry", first).lines
    assert pattern(_said("retry", "`<new id> <old id>`")).fullmatch(new)
    jobctl("cancel", new.split()[0])
    for line in jobctl("wait", first).lines:
        assert pattern(_said("wait", "`<id> <state>`")).fullmatch(line)
    for line in jobctl("gc", "--older-than", "0s", "--dry-run").lines:
        assert pattern(_said("gc", "`<id> <state>`")).fullmatch(line)
    for command in ("list", "orphans"):
        documented = {
            "list": "`<id> kind=K state=S done=N checkpoint=C`",
            "orphans": "`<id> kind=K state=S checkpoint=C`",
        }
        said = _said(command, documented[command])
        said = said.replace("kind=K", "kind=<k>").replace("state=S", "state=<s>").replace("=C", "=<json or none>")
        for line in jobctl(command).lines or [f"{first} kind=test state=failed checkpoint=none"]:
            assert pattern(said.replace("done=N", "done=<n>")).fullmatch(line), line
    assert pattern(_said("sweep", "`removed=N`")).fullmatch(jobctl("sweep").text.rstrip("\n"))
    head = jobctl("pipeline", "p").lines[0]
    assert re.fullmatch(r"pipeline p (running|waiting_for_approval|retry_scheduled|failed|waiting|complete)", head)
    assert "First `pipeline NAME STATE`" in (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    exported = jobctl("export").out
    ran = jobctl("import", input=exported, env={"JOB_STORE": str(tmp_path / "other")})
    assert pattern(_said("import", "`imported=N refused=M`")).fullmatch(ran.text.rstrip("\n"))
    assert jobctl("init", str(tmp_path / "third")).text == f"{tmp_path / 'third'}\n"  # "print its root"
