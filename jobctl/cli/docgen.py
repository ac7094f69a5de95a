"""Write docs/reference/cli.md from the commands' own help text.

``python -m jobctl.cli.docgen`` rewrites the page; ``--check`` exits 1 when
the page on disk differs from what the commands say (a test runs that).
The help is rendered at a fixed width, so the page does not depend on the
terminal that generated it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import click

from .main import CONTEXT, SECTIONS, cli

__all__ = ["render_page", "command_names", "main", "PAGE"]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
WIDTH = 100

_HEADER = """\
# Command reference

Generated from the commands' own help by `python -m jobctl.cli.docgen`; a test
fails when this page and the program disagree, so edit the help text in
`jobctl/cli/`, not this page.

Every command takes `--store DIR` (which store; see [discovery](#jobctl)) and
`--json` (versioned JSON instead of plain lines; see [json.md](json.md)), and
accepts upstream's Go flag spellings too (`-owner me`, `-owner=me`).
Positionals may sit anywhere among the flags. Exit codes:
[exit-codes.md](exit-codes.md).

Shell completion comes from click. Enable it once per shell:

<!-- not run: lines for a login shell's start-up file (bash, zsh, fish);
     tests/cli/test_cli_completion.py checks the scripts they load -->
```sh
# bash (~/.bashrc)
eval "$(_JOBCTL_COMPLETE=bash_source jobctl)"
# zsh (~/.zshrc)
eval "$(_JOBCTL_COMPLETE=zsh_source jobctl)"
# fish (~/.config/fish/completions/jobctl.fish)
_JOBCTL_COMPLETE=fish_source jobctl | source
```
"""


def command_names() -> list[str]:
    """Every command of the group, in the order ``jobctl --help`` shows them."""
    ctx = click.Context(cli, info_name="jobctl")
    names = cli.list_commands(ctx)
    ordered = [name for _, members in SECTIONS for name in members if name in names]
    return ordered + [name for name in names if name not in ordered]


def _help(command: click.Command, name: str, parent: click.Context | None) -> str:
    ctx = click.Context(
        command,
        info_name=name,
        parent=parent,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        help_option_names=CONTEXT["help_option_names"],
    )
    return command.get_help(ctx)


def render_page() -> str:
    """The whole page, as the commands describe themselves now."""
    root = click.Context(
        cli,
        info_name="jobctl",
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        help_option_names=CONTEXT["help_option_names"],
    )
    parts = [_HEADER, "## jobctl\n", "```text", _help(cli, "jobctl", None), "```\n"]
    for name in command_names():
        command = cli.get_command(root, name)
        if command is None or command.hidden:
            continue
        parts += [f"## jobctl {name}\n", "```text", _help(command, name, root), "```\n"]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobctl.cli.docgen", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date; write nothing")
    parser.add_argument("--output", type=Path, default=PAGE, help="where the page goes (default: %(default)s)")
    args = parser.parse_args(argv)
    page = render_page()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != page:
            print(f"{args.output} is out of date: run python -m jobctl.cli.docgen", file=sys.stderr)
            return 1
        return 0
    if current != page:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(page, encoding="utf-8", newline="\n")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
