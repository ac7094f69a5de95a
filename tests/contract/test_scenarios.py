"""The conformance scenarios, run through the replay driver as a subprocess (DIGEST §6).

Each ``scenarios/*.txt`` is replayed with ``python -m jobctl.replay <workdir>
<scenario>``; the transcript is checked line by line against the scenario's
operations (§6.3) and every ``# expect N: ...`` line is matched against step
N's answer with the rules of §6.5, implemented here independently of the
driver.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobctl import errors

DRIVER = [sys.executable, "-m", "jobctl.replay"]
REPO_ROOT = Path(__file__).resolve().parents[2]

# -- the §6.5 matcher ----------------------------------------------------------------

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*=")
_TAGS = re.compile(r"(?:\s*\[[^\[\]\s]+\])+\s*\Z")
_EXPECT = re.compile(r"#\s*expect\s+(\d+)\s*:\s*(.*)\Z")


@dataclass
class Expectation:
    step: int
    verdict: str | None
    tokens: list[str]
    open_ended: bool  # a trailing "..." was given
    text: str  # as written, tags included


def tokenize(body: str) -> tuple[list[str], bool]:
    """Split an answer (or an expectation body) into tokens.

    Words are separated by whitespace, except that a ``key=value`` token swallows
    the following words up to the next word that starts with ``key=``: bodies are
    split only before each `` key=`` (§6.5), so ``recall=make room`` is one
    token. A ``...`` word is not a token; it marks the expectation open-ended
    and ends the value before it.
    """
    tokens: list[str] = []
    open_ended = False
    joinable = False
    for word in body.split():
        if word == "...":
            open_ended = True
            joinable = False
            continue
        if joinable and _KEY.match(word) is None:
            tokens[-1] += " " + word
            continue
        tokens.append(word)
        joinable = "=" in word and _KEY.match(word) is not None
    return tokens, open_ended


def split_verdict(tokens: list[str]) -> tuple[str | None, list[str]]:
    """A first token without ``=`` is the verdict."""
    if tokens and "=" not in tokens[0]:
        return tokens[0], tokens[1:]
    return None, tokens


def parse_expectation(line: str) -> Expectation:
    m = _EXPECT.match(line.strip())
    if m is None:
        raise ValueError(f"not an expectation line: {line!r}")
    body = m.group(2)
    tag = _TAGS.search(body)
    if tag is not None:  # only the trailing run of [TAG]s is a tag
        body = body[: tag.start()]
    tokens, open_ended = tokenize(body)
    verdict, rest = split_verdict(tokens)
    return Expectation(int(m.group(1)), verdict, rest, open_ended, line.strip())


def _in_order(wanted: list[str], got: list[str]) -> bool:
    it = iter(got)
    return all(any(w == g for g in it) for w in wanted)


def matches(exp: Expectation, answer: str) -> bool:
    """Whether ``answer`` satisfies ``exp`` (DIGEST §6.5)."""
    got_verdict, got_rest = split_verdict(tokenize(answer)[0])
    if exp.verdict is not None and exp.verdict != got_verdict:
        return False
    if exp.open_ended:
        return _in_order(exp.tokens, got_rest)
    # Without "...", the expectation is the whole answer.
    return exp.verdict == got_verdict and exp.tokens == got_rest


def expectations(text: str) -> list[Expectation]:
    return [parse_expectation(line) for line in text.splitlines() if _EXPECT.match(line.strip())]


def operations(text: str) -> list[str]:
    """The operation lines as the driver must echo them (§6.3)."""
    ops = []
    for raw in text.split("\n"):
        line = raw.rstrip("\r ").lstrip()
        if line and not line.startswith("#"):
            ops.append(line)
    return ops


# -- the matcher itself ----------------------------------------------------------------

ANSWER = (
    "ok state=pending epoch=2 held=no recall=make room want=run done=8 err=none "
    'cp={"verified_prefix":8} content=abstraction.job/base@1,abstraction.job/recall@1 '
    "crit=abstraction.job/base@1,abstraction.job/recall@1 awake=no"
)


@pytest.mark.parametrize(
    ("line", "answer", "expected"),
    [
        # a value holding a space is one token, found in order
        ("# expect 15: recall=make room ... [JOB-R6]", ANSWER, True),
        ("# expect 15: ok ... [JOB-R6]", ANSWER, True),
        ("# expect 15: state=pending ...", ANSWER, True),
        ("# expect 15: ok state=pending held=no ...", ANSWER, True),
        # verdict differs
        ("# expect 15: lease_held ...", ANSWER, False),
        # tokens must appear in order
        ("# expect 15: held=no state=pending ...", ANSWER, False),
        # a token is compared whole: done=8 is not done=80, recall=make is not recall=make room
        ("# expect 15: done=80 ...", ANSWER, False),
        ("# expect 15: recall=make ...", ANSWER, False),
        # without "..." the expectation is the whole answer
        ("# expect 15: ok state=pending", ANSWER, False),
        ("# expect 9: ok A", "ok A", True),
        ("# expect 9: ok A", "ok A B", False),
        ("# expect 9: ok A B C", "ok A B C", True),
        ("# expect 9: ok A C [JOB-I11] [JOB-T2]", "ok A B C", False),
        ("# expect 9: ok A C ... [JOB-I11] [JOB-T2]", "ok A B C", True),
        ("# expect 9: ok -", "ok -", True),
        ("# expect 9: ok -", "ok A", False),
        ("# expect 2: changed -  [WATCH-P1]", "changed -", True),
        ("# expect 4: changed A=pending/0", "changed A=pending/0", True),
        ("# expect 4: changed A=pending/0", "changed A=running/0", False),
        # a bare verdict answer (load failed) against an open-ended expectation
        ("# expect 6: unknown_schema ... [JOB-D7]", "unknown_schema", True),
        ("# expect 6: unknown_schema ... [JOB-D7]", "invalid", False),
        # no verdict in the expectation and no "...": the answer's verdict makes it differ
        ("# expect 3: state=pending", "ok state=pending", False),
        # a bracketed word inside a value is not a trailing tag
        ("# expect 1: ok recall=[x] now ...", "ok recall=[x] now want=run", True),
    ],
)
def test_matcher(line: str, answer: str, expected: bool) -> None:
    assert matches(parse_expectation(line), answer) is expected


def test_matcher_parses_tags_and_values() -> None:
    exp = parse_expectation("# expect 15: recall=make room ... [JOB-R6] [JOB-X1]")
    assert exp == Expectation(15, None, ["recall=make room"], True, exp.text)
    exp = parse_expectation("# expect 8: content=a,b ... [JOB-I7]")
    assert (exp.step, exp.verdict, exp.tokens, exp.open_ended) == (8, None, ["content=a,b"], True)
    exp = parse_expectation("# expect 4: ok A B C")
    assert (exp.verdict, exp.tokens, exp.open_ended) == ("ok", ["A", "B", "C"], False)


def test_matcher_can_fail_on_a_real_transcript_line() -> None:
    """The matcher is not a tautology: a wrong expectation is reported as wrong."""
    exp = parse_expectation("# expect 15: recall=yield ... [JOB-R6]")
    assert not matches(exp, ANSWER)
    with pytest.raises(AssertionError, match="recall=yield"):
        check_expectations("demo", [exp], {15: ANSWER})


def test_operations_parsing() -> None:
    text = "# requires: store\n\n  submit A size=1\r\nclaim A alpha 5  \n# expect 1: ok ...\n"
    assert operations(text) == ["submit A size=1", "claim A alpha 5"]


# -- running the driver -------------------------------------------------------------------


def run_driver(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*DRIVER, *args], capture_output=True, timeout=100, cwd=cwd or REPO_ROOT, check=False, stdin=subprocess.DEVNULL
    )


def check_expectations(name: str, exps: list[Expectation], answers: dict[int, str]) -> None:
    failures = []
    for exp in exps:
        answer = answers.get(exp.step)
        if answer is None:
            failures.append(f"{exp.text}\n    no step {exp.step} in the transcript")
        elif not matches(exp, answer):
            failures.append(f"{exp.text}\n    actual {exp.step:02d}: {answer}")
    assert not failures, f"{name}: {len(failures)} expectation(s) failed:\n  " + "\n  ".join(failures)


def test_scenario(contract_dir: Path, scenario_name: str, tmp_path: Path) -> None:
    run_scenario(contract_dir / scenario_name, scenario_name, tmp_path)


def test_scenario_on_postgres(contract_dir: Path, scenario_name: str, tmp_path: Path, pg_url: str) -> None:
    """Every upstream scenario again, through the same driver, against a PostgreSQL store."""
    from jobctl.store import postgres

    postgres.init(pg_url)
    run_scenario(contract_dir / scenario_name, scenario_name, tmp_path, "--store", pg_url)


OWN_SCENARIOS = sorted((REPO_ROOT / "tests" / "data" / "scenarios").glob("*.txt"))


@pytest.mark.parametrize("scenario", OWN_SCENARIOS, ids=[p.name for p in OWN_SCENARIOS])
def test_own_scenario(scenario: Path, tmp_path: Path) -> None:
    """The project's own scenarios: the driver runs with nothing outside the repository."""
    run_scenario(scenario, scenario.name, tmp_path)


def run_scenario(scenario: Path, scenario_name: str, tmp_path: Path, *store: str) -> None:
    text = scenario.read_text(encoding="utf-8")
    ops = operations(text)
    exps = expectations(text)
    assert ops, f"{scenario_name} has no operations"
    assert exps, f"{scenario_name} has no expectations"

    workdir = tmp_path / "work"
    workdir.mkdir()
    proc = run_driver(*store, str(workdir), str(scenario))
    assert proc.returncode == 0, f"driver broke on {scenario_name}: rc={proc.returncode}\n{proc.stderr.decode()}"
    out = proc.stdout
    assert b"\r" not in out, "the transcript must be LF only (§6.2)"
    transcript = out.decode("utf-8")
    assert transcript.endswith("\n")
    lines = transcript[:-1].split("\n")
    assert len(lines) == len(ops), f"{len(ops)} operations but {len(lines)} transcript lines:\n{transcript}"

    answers: dict[int, str] = {}
    for n, (op, line) in enumerate(zip(ops, lines, strict=True), start=1):
        prefix = f"{n:02d} {op} -> "
        assert line.startswith(prefix), f"line {n} should start {prefix!r}: {line!r}"
        answers[n] = line[len(prefix) :]
    check_expectations(scenario_name, exps, answers)


# -- the informational modes -------------------------------------------------------------


def test_capabilities() -> None:
    proc = run_driver("--capabilities")
    assert proc.returncode == 0
    assert proc.stdout == b"store\n"


MODELS = """\
abstraction.download/ranges@1 never-critical
abstraction.job/base@1 critical-ok
abstraction.job/delegation@1 critical-ok
abstraction.job/envelope@1 critical-ok
abstraction.job/intent@1 critical-ok
abstraction.job/recall@1 critical-ok
abstraction.job/step@1 never-critical
abstraction.job/terminal@1 critical-ok
"""


def test_models() -> None:
    """The roster of DIGEST §3.7, sorted, with critical-ok/never-critical as in the table."""
    proc = run_driver("--models")
    assert proc.returncode == 0
    assert proc.stdout.decode() == MODELS
    names = [line.split()[0] for line in MODELS.splitlines()]
    assert names == sorted(names)


def test_refusals() -> None:
    """Eight refusal words, sorted, no ``ok``, in the underscore spelling jobctl prints (§10.1)."""
    proc = run_driver("--refusals")
    assert proc.returncode == 0
    words = proc.stdout.decode().split("\n")
    assert words[-1] == ""
    words = words[:-1]
    assert words == [
        "invalid",
        "lease_expired",
        "lease_held",
        "not_found",
        "refused",
        "stale_epoch",
        "terminal",
        "unknown_schema",
    ]
    assert words == sorted(words)
    # Every word names a verdict class, and every class's word is printed.
    classes = {errors.verdict_class(w) for w in words}
    assert len(classes) == 8
    assert {cls.verdict for cls in classes} == set(words)


def test_usage_error_is_not_success() -> None:
    proc = run_driver("only-one-argument")
    assert proc.returncode not in (0, None)
