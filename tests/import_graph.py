"""trainfleet's own imports, read from its source with ``ast`` (no module is run).

Every import counts: at the top of a module, inside a function and under
``TYPE_CHECKING`` alike, since each is a door from one layer into another.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "trainfleet"


@dataclass(frozen=True)
class Import:
    """One import of a trainfleet module by another: ``source`` imports ``target``."""

    source: str
    target: str
    line: int
    top_level: bool
    """At module level (not in a function nor under ``if TYPE_CHECKING``): runs on import."""

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def module_name(path: Path, root: Path = SOURCE) -> str:
    """``trainfleet.a.b`` for ``root/a/b.py`` (a package for its ``__init__.py``)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, top: bool) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        inner = top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(child, ast.If) and _is_type_checking(child):
            inner = False
        yield child, inner
        yield from _walk(child, inner)


def imports_of(path: Path, root: Path = SOURCE) -> list[Import]:
    """The trainfleet modules (or names of modules) ``path`` imports."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    for node, top in _walk(ast.parse(path.read_text(), str(path)), True):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        found += [
            Import(name, target, node.lineno, top)
            for target in targets
            if target.split(".")[0] == root.name
        ]
    return found


def all_imports(root: Path = SOURCE) -> list[Import]:
    """Every trainfleet import in the tree under ``root``."""
    return [found for path in sorted(root.rglob("*.py")) for found in imports_of(path, root)]


def modules(root: Path = SOURCE) -> set[str]:
    return {module_name(path, root) for path in root.rglob("*.py")}


def package_of(module: str) -> str:
    """The first folder under trainfleet (``cli`` for ``trainfleet.cli.main``), or the
    module's own name for a top-level module (``client``, ``wire``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def circles(found: list[Import], known: set[str]) -> list[list[str]]:
    """Strongly connected groups of two or more modules, over every import (one inside a
    function is a circle all the same: it only waits for its first call), by Tarjan's
    algorithm, iterative."""
    graph: dict[str, set[str]] = {module: set() for module in known}
    for edge in found:
        if edge.target in known and edge.target != edge.source:
            graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return groups
