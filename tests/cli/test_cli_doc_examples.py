"""Every shell example in README.md and docs/ runs, as written, against a real store.

A fenced block whose info string is ``sh``, ``bash`` or ``shell`` is an
example a user would paste, and this test runs it with ``sh -e`` in a
scratch directory: ``jobctl`` from this checkout first on ``PATH``, ``HOME``
and the config file private to the run, and every ``/srv/`` path moved under
the scratch directory (the docs' store is ``/srv/jobs``, which becomes the
run's ``JOB_STORE``, created with ``jobctl init``). It must exit 0 without a
traceback or a usage error. Blocks of any other info string (``console``
transcripts, ``cron`` tables, ``text``, ``json``) are for reading only.

HTML comments on the lines right before a block say more (they do not show
when the page is rendered):

``<!-- not run: WHY -->``
    a shell block that cannot run here (systemd, a webhook, a login shell's
    start-up file); WHY is required.
``<!-- setup: SHELL -->``
    runs first, in the same shell: what the reader is assumed to have (a job
    in ``$ID``, a held lease, a script the example calls).
``<!-- stop after: SECONDS -->``
    the example runs until stopped (a worker, ``watch``); it gets SIGTERM
    after SECONDS and must not have failed by then.

and one right after a block:

``<!-- then: SHELL -->``
    runs afterwards in a fresh shell and must exit 0: what the example
    should have achieved (it may end with ``exit``, so this is separate).

An unmarked shell block that fails fails this test: there is no list of
exceptions here, so an example added anywhere under docs/ is run too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHELL_INFO = frozenset(("sh", "bash", "shell"))
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_COMMENT = re.compile(r"<!--\s*(not run|setup|stop after|then):(.*?)-->", re.S)

pytestmark = pytest.mark.timeout(300)


@dataclass
class Example:
    page: str
    line: int
    info: str
    body: str
    notes: dict[str, str]
    then: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _notes(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in _COMMENT.finditer(text)}


def examples() -> list[Example]:
    found = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            info = m.group(1).strip().split(" ")[0]
            # The comments that belong to a block: those just before it (blank lines between allowed) ...
            before = text[: m.start()].rstrip()
            lead = ""
            while before.endswith("-->"):
                opening = before.rfind("<!--")
                if opening == -1:
                    break
                lead = before[opening:] + lead
                before = before[:opening].rstrip()
            # ... and a `then` comment just after it.
            after = text[m.end() :].lstrip("\n")
            then = ""
            tail = re.match(r"<!--\s*then:(.*?)-->", after, re.S)
            if tail:
                then = tail.group(1).strip()
            line = text[: m.start()].count("\n") + 1
            found.append(Example(str(page.relative_to(REPO)), line, info, m.group(2), _notes(lead), then))
    return found


SHELL_EXAMPLES = [e for e in examples() if e.info in SHELL_INFO]


def test_the_examples_are_found() -> None:
    # The pages hold shell examples, and the extraction sees their notes.
    assert len(SHELL_EXAMPLES) >= 20
    assert any("not run" in e.notes for e in SHELL_EXAMPLES)
    assert any("setup" in e.notes for e in SHELL_EXAMPLES)
    assert any(e.then for e in SHELL_EXAMPLES)


def _env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_", "ABSTRACTION_"))}
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(scratch / "home"),
            "XDG_CONFIG_HOME": str(scratch / "home" / ".config"),
            "JOBCTL_CONFIG": str(scratch / "no-config.ini"),
            "JOB_STORE": str(scratch / "srv" / "jobs"),
            "NO_COLOR": "1",
        }
    )
    return env


def _local(text: str, scratch: Path) -> str:
    return text.replace("/srv/", f"{scratch}/srv/")


def _run(script: str, cwd: Path, env: dict[str, str], stop_after: float | None) -> tuple[int, str, str]:
    out, err = cwd.parent / "stdout", cwd.parent / "stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        # Output to files, not pipes: a background `sleep` an example leaves
        # behind would hold a pipe open and the run would wait for it.
        proc = subprocess.Popen(
            ["sh", "-e", "-c", script], cwd=cwd, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        try:
            if stop_after is not None:
                try:
                    proc.wait(stop_after)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGTERM)
            code = proc.wait(120)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the example left running
            except ProcessLookupError:
                pass
    return code, out.read_text(errors="replace"), err.read_text(errors="replace")


@pytest.mark.parametrize("example", SHELL_EXAMPLES, ids=[e.name for e in SHELL_EXAMPLES])
def test_the_shell_example_runs(example: Example, tmp_path: Path) -> None:
    if "not run" in example.notes:
        assert example.notes["not run"], f"{example.name}: say why it is not run"
        pytest.skip("not run: " + " ".join(example.notes["not run"].split()))
    scratch = tmp_path
    cwd = scratch / "cwd"
    cwd.mkdir()
    (scratch / "home").mkdir()
    env = _env(scratch)
    init = subprocess.run(["jobctl", "init"], env=env, capture_output=True, text=True, check=False, timeout=60)
    assert init.returncode == 0, init.stderr
    setup = example.notes.get("setup", "")
    stop_after = float(example.notes["stop after"]) if "stop after" in example.notes else None
    script = _local(f"{setup}\n{example.body}", scratch)
    started = time.monotonic()
    code, out, err = _run(script, cwd, env, stop_after)
    said = f"{example.name} exited {code}\n--- stdout\n{out}--- stderr\n{err}"
    assert "Traceback" not in err and "Usage:" not in err, said
    stopped = stop_after is not None and time.monotonic() - started >= stop_after
    if not stopped:
        assert code == 0, said
    if example.then:
        code, out, err = _run(_local(example.then, scratch), cwd, env, None)
        assert code == 0, f"{example.name}: its `then` check failed ({code})\n{out}{err}"
