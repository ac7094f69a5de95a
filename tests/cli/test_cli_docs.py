"""The documentation cannot drift: the command reference is generated, exit codes are pinned."""

from __future__ import annotations

import re

import click
import pytest
from clitools import REPO

import jobctl.cli.main as cli_main
from jobctl import errors
from jobctl.cli import docgen

DOCS = REPO / "docs"


def test_the_command_reference_is_current() -> None:
    page = docgen.PAGE.read_text(encoding="utf-8")
    assert page == docgen.render_page(), "docs/reference/cli.md is stale: run python -m jobctl.cli.docgen"
    assert docgen.main(["--check"]) == 0


def test_docgen_check_fails_on_a_stale_page(tmp_path: object) -> None:
    from pathlib import Path

    stale = Path(str(tmp_path)) / "cli.md"
    stale.write_text("# old\n")
    assert docgen.main(["--check", "--output", str(stale)]) == 1
    assert docgen.main(["--output", str(stale)]) == 0
    assert docgen.main(["--check", "--output", str(stale)]) == 0


@pytest.mark.parametrize("name", docgen.command_names())
def test_every_command_has_help_and_a_section(name: str) -> None:
    ctx = click.Context(cli_main.cli, info_name="jobctl")
    command = cli_main.cli.get_command(ctx, name)
    assert command is not None
    assert (command.help or "").strip(), f"{name} has no help text"
    assert command.get_short_help_str(80).strip(), f"{name} has no short help"
    assert f"\n## jobctl {name}\n" in docgen.PAGE.read_text(encoding="utf-8"), f"{name} is not in cli.md"
    if name in cli_main.LAZY:
        assert "Example" in (command.help or ""), f"{name} shows no example"


def test_every_lazy_command_exists_and_is_a_job_command() -> None:
    ctx = click.Context(cli_main.cli, info_name="jobctl")
    for name in cli_main.LAZY:
        command = cli_main.cli.get_command(ctx, name)
        assert isinstance(command, cli_main.JobCommand), name
        assert command.name == name, name
    placed = [name for _, members in cli_main.SECTIONS for name in members]
    assert len(placed) == len(set(placed))
    assert set(placed) >= {*cli_main.LAZY, "help"}


def _exit_table() -> dict[int, str]:
    text = (DOCS / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    return {int(code): name for code, name in re.findall(r"^\| (\d+) \| `([a-z_]+)` \|", text, re.M)}


def test_the_exit_code_page_matches_the_program() -> None:
    expected = {
        cli_main.EXIT_OK: "ok",
        errors.EXIT_FAILURE: "failure",
        errors.EXIT_USAGE: "usage",
        cli_main.EXIT_FAILED: "wait_failed",
        cli_main.EXIT_CANCELLED: "wait_cancelled",
        cli_main.EXIT_ENDED_OTHERWISE: "wait_ended_otherwise",
        cli_main.EXIT_TIMEOUT: "timeout",
        cli_main.EXIT_INTERRUPTED: "interrupted",
        cli_main.EXIT_BROKEN_PIPE: "broken_pipe",
        errors.EXIT_WRITE_FAILED: "write_failed",
        errors.NoStore.exit_code: errors.NoStore.verdict,
        errors.NoResult.exit_code: errors.NoResult.verdict,
        errors.Retried.exit_code: errors.Retried.verdict,
        errors.CancelledByDependency.exit_code: errors.CancelledByDependency.verdict,
        errors.KeyHeld.exit_code: errors.KeyHeld.verdict,
        cli_main.EXIT_DRAIN_INCOMPLETE: "drain_incomplete",
    }
    for cls in set(errors.VERDICTS.values()):
        expected[cls.exit_code] = cls.verdict
    assert _exit_table() == expected


def test_the_how_to_guides_exist_and_use_real_commands() -> None:
    scripting = (DOCS / "howto" / "scripting.md").read_text(encoding="utf-8")
    recovery = (DOCS / "howto" / "recovery.md").read_text(encoding="utf-8")
    assert "crontab" in scripting and "claim --next" in scripting
    assert "jobctl orphans" in recovery
    known = set(docgen.command_names())
    for page in (scripting, recovery):
        code = re.findall(r"```.*?```", page, re.S) + re.findall(r"`[^`\n]+`", page)
        for used in re.findall(r"\bjobctl ([a-z][a-z-]+)", "\n".join(code)):
            assert used in known or used in ("run", "worker", "logs", "pipeline"), used


def test_every_page_gives_an_exit_code_its_own_name() -> None:
    """`17 (`drain_incomplete`)`, `` `invalid` (exit 9) ``: wherever a page pairs a code and a name, the table's."""
    names = {name: code for code, name in _exit_table().items()}
    pages = [*DOCS.rglob("*.md"), REPO / "README.md", REPO / "CHANGELOG.md"]
    pairs = []
    for page in pages:
        if not page.exists():
            continue
        text = page.read_text(encoding="utf-8")
        found = [(int(c), n) for c, n in re.findall(r"\b(\d{1,3}) \(`([a-z_]+)`\)", text)]
        found += [(int(c), n) for n, c in re.findall(r"`([a-z_]+)` \((?:exit )?(\d{1,3})\)", text)]
        pairs += [(page.name, code, name) for code, name in found if name in names]
    assert pairs, "no page pairs a code with its name any more: the pattern is stale"
    wrong = [(page, code, name) for page, code, name in pairs if names[name] != code]
    assert wrong == []
