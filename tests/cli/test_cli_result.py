"""Results on the reading side: `jobctl result`, and the result in `show`, `show --json` and `list --json`.

Results are written here as a worker writes them: with `set_result`, in the
fenced write (`store.update` under the lease's epoch) that completes the job.
"""

from __future__ import annotations

import json
from typing import Any

from clitools import Jobctl

from jobctl import errors
from jobctl.cli import main as cli_main
from jobctl.record import RESULT, Record
from jobctl.results import set_result


def ended(jobctl: Jobctl, value: Any = None, *, state: str = "complete", error: str = "", keep: bool = True) -> str:
    """A job its holder ended in ``state``, leaving ``value`` as its result when ``keep``."""
    store = jobctl.store()
    job = jobctl.submit()
    claimed = store.claim(job, "w", 60)

    def finish(rec: Record) -> None:
        rec.state = state
        rec.error = error
        if keep:
            set_result(rec, value)

    store.update(job, claimed.lease.epoch, finish)
    return job


def no_result(ran: Any, job: str) -> str:
    assert ran.code == errors.NoResult.exit_code == 18, (ran.code, ran.err)
    assert ran.out == b""
    lines = ran.err.splitlines()
    assert len(lines) == 1, ran.err
    assert lines[0].startswith(f"jobctl: no_result: job {job} "), lines[0]
    return str(lines[0])


def test_no_result_has_a_code_of_its_own() -> None:
    taken = {cls.exit_code for cls in errors.VERDICTS.values()} | {
        errors.EXIT_FAILURE,
        errors.EXIT_USAGE,
        errors.EXIT_WRITE_FAILED,
        errors.NoStore.exit_code,
        cli_main.EXIT_FAILED,
        cli_main.EXIT_CANCELLED,
        cli_main.EXIT_ENDED_OTHERWISE,
        cli_main.EXIT_DRAIN_INCOMPLETE,
        cli_main.EXIT_TIMEOUT,
    }
    assert errors.NoResult.exit_code == 18 and errors.NoResult.exit_code not in taken
    assert "no_result" not in errors.VERDICTS  # jobctl's own, not a verdict of the contract


def test_result_prints_the_stored_json_compact_or_pretty(jobctl: Jobctl) -> None:
    value = {"chars": 1832, "file": "out/script.txt", "tags": ["a", "b"], "ratio": 0.25, "é": None}
    job = ended(jobctl, value)
    ran = jobctl("result", job)
    assert ran.code == 0, ran.err
    assert ran.text == json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n"
    assert jobctl("result", job, "--json").out == ran.out  # JSON either way
    pretty = jobctl("result", job, "--pretty")
    assert pretty.code == 0
    assert json.loads(pretty.text) == value
    assert pretty.lines[0] == "{" and pretty.lines[1] == '  "chars": 1832,' and pretty.lines[-1] == "}"
    assert '    "a",' in pretty.lines


def test_result_keeps_the_spelling_it_was_stored_with(jobctl: Jobctl) -> None:
    job = ended(jobctl, {"n": 1})
    path = jobctl.root / "jobs" / f"{job}.json"
    text = path.read_text(encoding="utf-8")
    assert '"n": 1\n' in text
    path.write_text(text.replace('"n": 1\n', '"n": 1.50, "big": 12345678901234567890\n'), encoding="utf-8")
    assert jobctl("result", job).text == '{"n":1.50,"big":12345678901234567890}\n'


def test_a_null_result_is_a_result(jobctl: Jobctl) -> None:
    job = ended(jobctl, None)
    ran = jobctl("result", job)
    assert (ran.code, ran.text) == (0, "null\n")


def test_a_job_that_has_not_ended_has_no_result_yet(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    line = no_result(jobctl("result", job), job)
    assert "has no result yet: it is pending" in line and f"jobctl wait {job}" in line
    jobctl("claim", job, "--owner", "w")
    assert "it is running" in no_result(jobctl("result", job), job)


def test_a_job_that_ended_without_one_says_so(jobctl: Jobctl) -> None:
    done = ended(jobctl, keep=False)
    assert "is complete and left no result" in no_result(jobctl("result", done), done)
    failed = ended(jobctl, state="failed", error="exit 3: disk\nfull", keep=False)
    line = no_result(jobctl("result", failed), failed)
    assert "ended failed and left no result: exit 3: disk full" in line and f"jobctl logs {failed}" in line
    cancelled = jobctl.submit()
    jobctl("cancel", cancelled)
    assert "ended cancelled and left no result" in no_result(jobctl("result", cancelled), cancelled)


def test_result_of_a_missing_job_is_not_found(jobctl: Jobctl) -> None:
    ran = jobctl("result", "1787202430967-a752f9a9c2c77b123ffd")
    assert ran.code == errors.NotFound.exit_code and ran.out == b""


def test_result_takes_the_id_from_job_id(jobctl: Jobctl) -> None:
    job = ended(jobctl, [1, 2])
    assert jobctl("result", env={"JOB_ID": job}).text == "[1,2]\n"


def test_show_json_and_list_json_carry_the_result(jobctl: Jobctl) -> None:
    job = ended(jobctl, {"chars": 3})
    pending = jobctl.submit()
    shown = json.loads(jobctl("show", job, "--json").text)
    assert list(shown)[-1] == "result" and shown["result"] == {"chars": 3}
    assert json.loads(jobctl("show", pending, "--json").text)["result"] is None
    rows = {row["id"]: row for row in map(json.loads, jobctl("list", "--json").lines)}
    assert rows[job]["result"] == {"chars": 3} and rows[pending]["result"] is None
    # Piped, show prints the record itself, the result in its extensions.
    record = json.loads(jobctl("show", job).text)
    assert record["extensions"][RESULT] == {"chars": 3}


def test_show_on_a_terminal_shows_the_result_cut_to_size(jobctl: Jobctl) -> None:
    env = {"NO_COLOR": "1", "COLUMNS": "120"}
    small = ended(jobctl, {"t": "[bold]x[/bold]"})
    text = jobctl("show", small, terminal=True, env=env).text
    assert "result" in text and '{"t":"[bold]x[/bold]"}' in text  # brackets are data, not markup
    big = ended(jobctl, {"s": "y" * 5000})
    text = jobctl("show", big, terminal=True, env=env).text
    assert "y" * 300 in "".join(text.split())
    assert "y" * 1000 not in "".join(text.split())
    flat = " ".join(text.split())
    assert "5008 bytes;" in flat and f"jobctl result {big} prints it whole" in flat
    assert "result" not in jobctl("show", jobctl.submit(), terminal=True, env=env).text


def test_result_on_a_postgresql_store(jobctl: Jobctl, pg_url: str) -> None:
    from jobctl.store import postgres

    postgres.init(pg_url)
    store = postgres.PostgresStore(pg_url)
    try:
        env = {"JOB_STORE": pg_url}
        job = jobctl("submit", "--kind", "test", env=env).text.strip()
        assert "it is pending" in no_result(jobctl("result", job, env=env), job)
        claimed = store.claim(job, "w", 60)

        def finish(rec: Record) -> None:
            rec.state = "complete"
            set_result(rec, {"n": 2, "s": "é"})

        store.update(job, claimed.lease.epoch, finish)
    finally:
        store.close()
    assert jobctl("result", job, env=env).text == '{"n":2,"s":"é"}\n'
    assert json.loads(jobctl("show", job, "--json", env=env).text)["result"] == {"n": 2, "s": "é"}
