"""The library's imports point down: no circle, and no store reached from below (docs/architecture.md).

Read as Python's ``ast`` sees them, function-level imports included (a
function-level import is still a circle a reader must hold in mind);
imports under ``if TYPE_CHECKING:`` are left out, since they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jobctl

PACKAGE = Path(jobctl.__file__).parent
#: Modules below every store: they may not import jobctl.store (nor anything above it).
BELOW_THE_STORES = (
    "jobctl.record",
    "jobctl.schedule",
    "jobctl.recurring",
    "jobctl.cron",
    "jobctl.priority",
    "jobctl.timeout",
    "jobctl.summary",
    "jobctl.wire",
    "jobctl.errors",
)

#: Standard-library modules the rules may use beside the ground floor: a submitter's name, the shell kind's spec.
STANDALONE = ("jobctl.submitter", "jobctl.shell")


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = ["jobctl", *path.relative_to(root).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def edges(root: Path) -> dict[str, set[str]]:
    """Each module's imports of other jobctl modules (the longest module prefix of what is named)."""
    mods = modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = out.setdefault(name, set())
        pending: list[ast.AST] = [ast.parse(path.read_text())]
        while pending:
            node = pending.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                if isinstance(child, ast.Import):
                    targets.update(t for a in child.names if (t := resolve(a.name)))
                elif isinstance(child, ast.ImportFrom):
                    base = package
                    for _ in range(child.level - 1):
                        base = base.rpartition(".")[0]
                    source = child.module or "" if not child.level else ".".join(filter(None, (base, child.module)))
                    targets.update(t for a in child.names if (t := resolve(f"{source}.{a.name}")))
                pending.append(child)
        targets.discard(name)
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_two_modules_import_each_other() -> None:
    # The CLI included: its output (cli.output, cli.render) sits below its commands and its group (cli.main).
    assert circles(edges(PACKAGE)) == []


def test_the_clis_output_imports_no_command() -> None:
    below = ("jobctl.cli.output", "jobctl.cli.render")
    up = {(a, b) for a, bs in edges(PACKAGE).items() if a.startswith(below) for b in bs if b.startswith("jobctl.cli")}
    assert {(a, b) for a, b in up if not b.startswith(below)} == set()


def test_the_rules_below_the_stores_import_no_store() -> None:
    up = {
        (a, b)
        for a, bs in edges(PACKAGE).items()
        if a.startswith(BELOW_THE_STORES)
        for b in bs
        if not b.startswith(
            (*BELOW_THE_STORES, "jobctl.ids", "jobctl.limits", "jobctl.fanout", "jobctl.fsio", *STANDALONE)
        )
    }
    assert up == set()


def test_the_walk_sees_a_function_level_import() -> None:
    # jobctl.store.file imports jobctl.store.picking inside FileStore.claim_some only.
    assert "jobctl.store.picking" in edges(PACKAGE)["jobctl.store.file"]
