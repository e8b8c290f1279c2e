"""The layers stay apart: each package imports only the layers beneath it (DESIGN.md), the
faces reach the engine through its services alone, and no module imports itself round a
circle. Read from the source (``tests/import_graph.py``), every import counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from import_graph import Import, all_imports, circles, imports_of, modules, package_of

LAYERS: list[set[str]] = [
    {"trainfleet", "domain", "programs", "checkpoint", "process_exit"},
    {"datadir", "store"},
    {"spec"},
    {"vault", "workdirs", "wire", "scheduling", "environments"},
    {"frameworks", "functions", "workflows"},
    {"backends"},
    {"control"},
    {"cli", "server", "client", "__main__", "starter", "notebook"},
]
"""Lowest first: a package imports its own modules and packages of lower layers."""

LEVEL = {package: level for level, packages in enumerate(LAYERS) for package in packages}

SIDEWAYS = {
    ("store", "datadir"),  # the database file lives in the data directory
    ("cli", "client"),  # the CLI talks to a server through the SDK
    ("__main__", "cli"),
    ("starter", "cli"),  # the console script runs the CLI, warm or in its own process
    ("trainfleet", "domain"),  # ``trainfleet.RemoteError``
    ("notebook", "client"),  # ``%%trainfleet`` on a server
    ("notebook", "cli"),  # ``%%trainfleet`` on this machine (``trainfleet.run``)
}
"""Imports within one layer that are part of the design."""

FORBIDDEN = {
    "cli": {"store", "backends"},
    "server": {"store", "backends"},
    "client": {"control", "backends", "scheduling", "store", "server", "cli"},
}
"""Beyond the order of the layers: the faces call the engine's services, never the store
or a backend (nor does the SDK know the engine at all)."""

ENTRY_POINTS = {("trainfleet.cli.server_command", "server"), ("trainfleet", "cli")}
"""The doors from one face into another: ``trainfleet server`` starts the server, and
``trainfleet.run`` is the embedded engine's (``cli.functions``)."""


def _package(module: str) -> str:
    return package_of(module) or module.split(".")[-1]


def breaks(edge: Import) -> str | None:
    """Why ``edge`` crosses the layers the wrong way, or None when it may."""
    source, target = _package(edge.source), _package(edge.target)
    if source == target or (edge.source, target) in ENTRY_POINTS:
        return None
    if target in FORBIDDEN.get(source, ()):
        return f"{source}/ imports no {target}/"
    if (source, target) in SIDEWAYS:
        return None
    if LEVEL[target] >= LEVEL[source]:
        return f"{source}/ (layer {LEVEL[source]}) imports {target}/ (layer {LEVEL[target]})"
    return None


def test_every_package_has_a_layer() -> None:
    """A new package gets its place in LAYERS before anything imports it."""
    assert {_package(module) for module in modules()} - set(LEVEL) == set()


def test_imports_point_down_only() -> None:
    known = modules()
    wrong = [
        f"{edge}: {why}" for edge in all_imports() if edge.target in known and (why := breaks(edge))
    ]
    assert wrong == []


def test_no_import_circle() -> None:
    assert circles(all_imports(), modules()) == []


@pytest.mark.parametrize(
    ("where", "line", "why"),
    [
        (
            "server/routes_jobs.py",
            "from trainfleet.store.database import Store",
            "server/ imports no store/",
        ),
        ("cli/main.py", "import trainfleet.backends.choose", "cli/ imports no backends/"),
        (
            "backends/api.py",
            "from trainfleet.control import engine",
            "backends/ (layer 5) imports control/",
        ),
        (
            "spec/models.py",
            "from trainfleet.scheduling import cluster",
            "spec/ (layer 2) imports scheduling/",
        ),
        (
            "client.py",
            "from trainfleet.scheduling.resources import x",
            "client/ imports no scheduling/",
        ),
    ],
)
def test_a_forbidden_import_is_caught(tmp_path: Path, where: str, line: str, why: str) -> None:
    """The rule catches one import added anywhere, even inside a function."""
    root = tmp_path / "trainfleet"
    path = root / where
    path.parent.mkdir(parents=True)
    path.write_text(f"def later():\n    {line}\n")
    found = imports_of(path, root)
    assert found and any((reason := breaks(edge)) and reason.startswith(why) for edge in found)


def test_a_circle_is_caught(tmp_path: Path) -> None:
    root = tmp_path / "trainfleet"
    (root / "cli").mkdir(parents=True)
    (root / "cli" / "a.py").write_text("from trainfleet.cli import b\n")
    (root / "cli" / "b.py").write_text("def later():\n    from trainfleet.cli.a import x\n")
    found = [edge for path in root.rglob("*.py") for edge in imports_of(path, root)]
    assert circles(found, modules(root)) == [["trainfleet.cli.a", "trainfleet.cli.b"]]


def _loaded_by(statement: str) -> list[str]:
    """The trainfleet modules a fresh interpreter has loaded after ``statement``."""
    code = (
        f"import sys\n{statement}\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('trainfleet'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_sdk_loads_no_engine_store_or_server() -> None:
    """`import trainfleet.client` loads the wire models and the domain, and nothing of the
    control, backends, scheduling, store or server packages (39 modules before, supervisor
    and scheduler included)."""
    loaded = _loaded_by("import trainfleet.client")
    assert "trainfleet.wire" in loaded and "trainfleet.domain.records" in loaded
    below = ("control", "backends", "scheduling", "store", "server")
    assert [m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in below] == []
