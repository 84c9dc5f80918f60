"""The import structure of src/kvtier, read from every module's imports (ast), as docs/engines.md
and the package docstrings state it:

    cli -> report -> sim / observe -> ledger -> engines -> spec / logs
                                   (errors, units, files, payload, routers: under all)

An import runs down the layers only, never sideways between two packages of one layer, nor
between two engines' packages; ledger/ reaches an engine only through its rules (engines/rules.py);
cache/ and store/ stand apart (sim drives the cache, the SGLang integration the store). No import
circle, except one made only of imports under `if TYPE_CHECKING:`. An import inside a function
counts like any other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Layered packages, highest first; two packages of one layer never import each other.
LAYERS = {
    "__main__": 7,
    "cli": 6,
    "report": 5,
    "sim": 4,
    "observe": 4,
    "ledger": 3,
    "engines": 2,
    "model": 1,  # what the model and hardware are
    "logs": 1,  # the records every engine's log grammar shares
}
BASE = {"kvtier", "errors", "units", "files", "payload", "routers"}  # anyone may import these
# Packages that stand apart, and the only packages that may import each.
APART = {"cache": {"sim"}, "store": {"integrations"}, "integrations": set()}
APART_FLOOR = 1  # what an apart package may import: the layers up to model and logs


@dataclass(frozen=True, slots=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported module, dotted (the package when a name is imported from it)
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


def modules(src: Path) -> dict[str, Path]:
    """Every module under `src`, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(node: ast.AST, typing_only: bool) -> Iterator[tuple[ast.stmt, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            for inner in child.body:
                yield inner, True
                yield from _statements(inner, True)
            for inner in child.orelse:
                yield inner, typing_only
                yield from _statements(inner, typing_only)
            continue
        if isinstance(child, ast.stmt):
            yield child, typing_only
        yield from _statements(child, typing_only)


def imports(src: Path) -> list[Import]:
    """Every import of one `kvtier` module by another, resolved to the module it names."""
    known = modules(src)
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for stmt, typing_only in _statements(ast.parse(path.read_text()), False):
            for target in dict.fromkeys(_targets(stmt, package, known)):
                if target in known and target != name:
                    found.append(Import(name, target, stmt.lineno, typing_only))
    return found


def _targets(stmt: ast.stmt, package: str, known: dict[str, Path]) -> list[str]:
    if isinstance(stmt, ast.Import):
        return [alias.name for alias in stmt.names]
    if not isinstance(stmt, ast.ImportFrom):
        return []
    base = stmt.module or ""
    if stmt.level:
        parts = package.split(".")
        parts = parts[: len(parts) - stmt.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in stmt.names]


def package_of(module: str) -> str:
    """The top-level package of a `kvtier` module (`kvtier` itself for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def engine_of(module: str, engines: set[str]) -> str | None:
    """The engine whose package holds `module` (engines/<engine>/), or None."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "engines" and parts[2] in engines:
        return parts[2]
    return None


def engine_packages(src: Path) -> set[str]:
    root = src / "kvtier" / "engines"
    return {p.parent.name for p in root.glob("*/__init__.py")}


def layer_breaks(found: list[Import]) -> list[str]:
    """Imports that run up a layer, sideways in one, or into or out of an apart package."""
    broken = []
    for imp in found:
        source, target = package_of(imp.source), package_of(imp.target)
        if source == target or target in BASE or source in BASE:
            continue
        if source in APART or target in APART:
            allowed = source in APART.get(target, set()) or (
                source in APART and LAYERS.get(target, APART_FLOOR + 1) <= APART_FLOOR
            )
            if not allowed:
                broken.append(f"{imp}: {source}/ and {target}/ stand apart")
            continue
        if source not in LAYERS or target not in LAYERS:
            broken.append(f"{imp}: {source if source not in LAYERS else target}/ is in no layer")
        elif LAYERS[source] == LAYERS[target]:
            broken.append(f"{imp}: sideways between {source}/ and {target}/")
        elif LAYERS[source] < LAYERS[target]:
            broken.append(f"{imp}: {source}/ lies below {target}/")
    return broken


def engine_breaks(found: list[Import], engines: set[str]) -> list[str]:
    """An engine's package importing another's, or ledger/ importing any engine's package."""
    broken = []
    for imp in found:
        source, target = engine_of(imp.source, engines), engine_of(imp.target, engines)
        if target is None:
            continue
        if source is not None and source != target:
            broken.append(f"{imp}: engines/{source}/ imports engines/{target}/")
        if package_of(imp.source) == "ledger":
            broken.append(f"{imp}: ledger/ reaches engines/{target}/ other than by its rules")
    return broken


def cycles(found: list[Import]) -> list[list[str]]:
    """Import circles (strongly connected modules) over imports that run when a module loads."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        if not imp.typing_only:
            graph.setdefault(imp.source, set()).add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            circle = []
            while (top := stack.pop()) != node:
                circle.append(top)
            if circle:
                circles.append(sorted([node, *circle]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


@pytest.fixture(scope="module")
def found() -> list[Import]:
    return imports(SRC)


def test_the_reader_sees_the_imports_the_project_is_built_on(found: list[Import]) -> None:
    pairs = {(i.source, i.target) for i in found}
    assert ("kvtier.ledger.plan", "kvtier.engines.rules") in pairs  # from x import name
    assert ("kvtier.engines.rules", "kvtier.engines.sglang.rules") in pairs  # from x import y as z
    assert ("kvtier.engines.sglang.rules", "kvtier.engines.sglang.explain") in pairs  # x import mod
    typing = {(i.source, i.target) for i in found if i.typing_only}
    assert ("kvtier.report.explain_view", "kvtier.ledger.explain") in typing


def test_imports_run_down_the_layers_never_sideways(found: list[Import]) -> None:
    assert layer_breaks(found) == []


def test_no_engine_imports_another_and_ledger_imports_none(found: list[Import]) -> None:
    engines = engine_packages(SRC)
    assert engines == {"sglang", "vllm"}
    assert engine_breaks(found, engines) == []


def test_no_import_circle_outside_type_only_imports(found: list[Import]) -> None:
    assert cycles(found) == []


def test_each_check_catches_what_it_forbids(tmp_path: Path) -> None:
    """A small tree with one fault of each kind: the checks name each one."""
    files = {
        "kvtier/__init__.py": "",
        "kvtier/ledger/__init__.py": "",
        "kvtier/ledger/a.py": "from kvtier.engines.vllm import pool\n",
        "kvtier/ledger/b.py": "def f():\n    from kvtier.cli import main\n",
        "kvtier/sim/__init__.py": "",
        "kvtier/sim/s.py": "from kvtier.observe import o\nfrom kvtier.cache import c\n",
        "kvtier/observe/__init__.py": "",
        "kvtier/observe/o.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from kvtier.observe import p\n",
        "kvtier/observe/p.py": "from kvtier.observe import o\n",
        "kvtier/cli/__init__.py": "",
        "kvtier/cli/main.py": "from . import loop\n",
        "kvtier/cli/loop.py": "from .main import run\n",
        "kvtier/cache/__init__.py": "",
        "kvtier/cache/c.py": "from kvtier.ledger import a\n",
        "kvtier/engines/__init__.py": "",
        "kvtier/engines/vllm/__init__.py": "",
        "kvtier/engines/vllm/pool.py": "from kvtier.engines.sglang.pool import cells\n",
        "kvtier/engines/sglang/__init__.py": "",
        "kvtier/engines/sglang/pool.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = imports(tmp_path)
    assert layer_breaks(found) == [
        "kvtier.cache.c -> kvtier.ledger.a (line 1): cache/ and ledger/ stand apart",
        "kvtier.ledger.b -> kvtier.cli.main (line 2): ledger/ lies below cli/",
        "kvtier.sim.s -> kvtier.observe.o (line 1): sideways between sim/ and observe/",
    ]
    assert engine_breaks(found, engine_packages(tmp_path)) == [
        "kvtier.engines.vllm.pool -> kvtier.engines.sglang.pool (line 1): "
        "engines/vllm/ imports engines/sglang/",
        "kvtier.ledger.a -> kvtier.engines.vllm.pool (line 1): "
        "ledger/ reaches engines/vllm/ other than by its rules",
    ]
    assert cycles(found) == [["kvtier.cli.loop", "kvtier.cli.main"]]
