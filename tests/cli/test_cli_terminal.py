"""What a person sees (rich, colour) and what a pipe gets (plain lines, never a box or an escape).

These run in-process with the terminal decision injected (``State(terminal=…)``);
test_pty.py checks the same under a real pseudo-terminal.
"""

from __future__ import annotations

import json

import pytest
from clitools import Jobctl, has_box

from jobctl.cli.render import Screen


def _jobs(jobctl: Jobctl) -> list[str]:
    first = jobctl.submit("--total", "100", "--pipeline", "nightly")
    second = jobctl.submit("--after", first, "--hold")
    jobctl("claim", first, "--owner", "worker-1", "--ttl", "300")
    jobctl("progress", first, "--epoch", "1", "--done", "40")
    return [first, second]


def test_list_draws_a_coloured_table_on_a_terminal(jobctl: Jobctl) -> None:
    first, second = _jobs(jobctl)
    ran = jobctl("list", terminal=True, env={"COLUMNS": "200"})
    assert ran.code == 0
    assert has_box(ran.text)
    assert "\x1b[" in ran.text
    for word in ("id", "state", "done", "owner", "lease", first, second, "worker-1", "40/100", "nightly/test"):
        assert word in ran.text, word
    assert "left" in ran.text  # lease time left, relative


def test_no_color_keeps_the_table_and_drops_every_escape(jobctl: Jobctl) -> None:
    _jobs(jobctl)
    ran = jobctl("list", terminal=True, env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert has_box(ran.text)
    assert "\x1b" not in ran.text


def test_term_dumb_has_no_colour_unless_forced(jobctl: Jobctl) -> None:
    _jobs(jobctl)
    dumb = jobctl("list", terminal=True, env={"TERM": "dumb", "COLUMNS": "200"})
    assert has_box(dumb.text) and "\x1b" not in dumb.text
    forced = jobctl("list", terminal=True, env={"TERM": "dumb", "FORCE_COLOR": "1", "COLUMNS": "200"})
    assert "\x1b[" in forced.text
    both = jobctl("list", terminal=True, env={"NO_COLOR": "1", "FORCE_COLOR": "1", "COLUMNS": "200"})
    assert "\x1b" not in both.text


@pytest.mark.parametrize("env", [{}, {"FORCE_COLOR": "1"}, {"TERM": "xterm-256color", "COLORTERM": "truecolor"}])
def test_a_pipe_never_gets_a_table_or_an_escape(jobctl: Jobctl, env: dict[str, str]) -> None:
    first, _ = _jobs(jobctl)
    jobctl.submit()  # an orphan, so that orphans has something to print
    for args in (
        ("list",),
        ("orphans",),
        ("show", first),
        ("paths",),
        ("watch", "--quiet-after", "0.1", "--exit-on-quiet"),
    ):
        ran = jobctl(*args, terminal=False, env=env)
        assert ran.code == 0, args
        assert ran.out, args
        assert "\x1b" not in ran.text and not has_box(ran.text), args


def test_json_on_a_terminal_is_still_json(jobctl: Jobctl) -> None:
    first, second = _jobs(jobctl)
    ran = jobctl("list", "--json", terminal=True)
    assert [json.loads(line)["id"] for line in ran.lines] == [first, second]
    assert "\x1b" not in ran.text


def test_show_on_a_terminal_is_a_readable_view(jobctl: Jobctl) -> None:
    first, second = _jobs(jobctl)
    ran = jobctl("show", second, terminal=True, env={"NO_COLOR": "1", "COLUMNS": "160"})
    text = ran.text
    assert ran.code == 0
    for word in ("kind", "state", "pending", "intent", "pause", "after", first, "waiting", "created"):
        assert word in text, word
    assert not text.lstrip().startswith("{")


def test_paths_on_a_terminal_is_a_table(jobctl: Jobctl) -> None:
    ran = jobctl("paths", terminal=True, env={"NO_COLOR": "1", "COLUMNS": "160"})
    assert has_box(ran.text)
    assert "check_lock" in ran.text and "JOB_STORE" in ran.text


def test_watch_on_a_dumb_terminal_prints_the_table_when_it_changes(jobctl: Jobctl) -> None:
    first, _ = _jobs(jobctl)
    ran = jobctl("watch", "--quiet-after", "0.3", "--exit-on-quiet", terminal=True, env={"TERM": "dumb"})
    assert ran.code == 0
    assert has_box(ran.text)
    assert ran.text.count("Ctrl-C to stop") == 1  # nothing changed after the first drawing
    assert first in ran.text


def test_wait_on_a_dumb_terminal_draws_progress(jobctl: Jobctl) -> None:
    job = jobctl.submit("--total", "4")
    jobctl("claim", job, "--owner", "a")
    jobctl("finish", job, "--epoch", "1", "--state", "complete", "--done", "4")
    ran = jobctl("wait", job, terminal=True, env={"TERM": "dumb", "COLUMNS": "160"})
    assert ran.code == 0
    assert has_box(ran.text) and "4/4" in ran.text and "complete" in ran.text


def test_screen_decisions() -> None:
    assert not Screen(False, {"FORCE_COLOR": "1"}).colour
    assert Screen(True, {}).colour and Screen(True, {}).live
    assert not Screen(True, {"NO_COLOR": "x"}).colour
    assert Screen(True, {"NO_COLOR": ""}).colour is not False  # empty NO_COLOR is not set
    dumb = Screen(True, {"TERM": "dumb"})
    assert (dumb.colour, dumb.live) == (False, False)
    assert Screen(True, {"TERM": "dumb", "FORCE_COLOR": "1"}).colour
    assert not Screen(True, {"TERM": "dumb", "FORCE_COLOR": "0"}).colour


# -- an ended job (issue 7 item 7) ---------------------------------------------------


def test_a_finished_job_is_not_shown_as_leased(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "worker-1", "--ttl", "300")
    jobctl("finish", job, "--epoch", "1", "--state", "complete")
    record = jobctl.record(job)
    assert b'"owner": "worker-1"' in record  # the bytes keep the holder's lease, as the contract writes them
    assert jobctl("show", job).out == record
    shown = json.loads(jobctl("show", job, "--json").out)
    assert shown["state"] == "complete" and shown["held"] is False and shown["owner"] == "worker-1"
    assert json.loads(jobctl("list", "--json").out)["held"] is False
    env = {"NO_COLOR": "1", "COLUMNS": "200", "TERM": "dumb"}
    for args in (("show", job), ("list",), ("watch", "--quiet-after", "0.1", "--exit-on-quiet")):
        text = jobctl(*args, terminal=True, env=env).text
        assert "left" not in text, (args, text)
        assert job in text or job[:10] in text, (args, text)


def test_after_the_final_attempt_the_last_attempt_is_shown_and_no_future_time(jobctl: Jobctl) -> None:
    job = jobctl.submit("--retries", "1", "--retry-intervals", "3600")
    assert jobctl("run", job, "--", "sh", "-c", "exit 4").code == 4
    between = json.loads(jobctl("show", job, "--json").out)
    assert (between["state"], between["attempt"]) == ("pending", 2) and between["not_before"] is not None
    assert jobctl("run", job, "--", "sh", "-c", "exit 4").code == 4  # by id: now, whatever the not-before
    shown = json.loads(jobctl("show", job, "--json").out)
    assert shown["state"] == "failed" and shown["error"] == "attempt 2: exit status 4"
    assert shown["attempt"] == 2 and shown["not_before"] is None
    text = jobctl("show", job, terminal=True, env={"NO_COLOR": "1", "COLUMNS": "200"}).text
    assert "not before" not in text
    assert [line.split() for line in text.splitlines() if line.startswith("attempt")] == [["attempt", "2"]]
