"""``trainfleet run-notebook [--parameters JSON] NOTEBOOK``: a notebook run headless as a task.

Run by the task's own python, which needs ``nbclient`` and ``ipykernel`` (the kernel is that
same python). The parameters become a cell of assignments, injected as papermill does:
after the cell tagged ``parameters``, else first. The executed notebook, outputs and
errors in it, is kept in ``$TRAINFLEET_OUTPUT_DIR``: rank 0's (``RANK``, else the role's
first task) as ``<name>.ipynb``, any other task's as ``<name>-<role>-<index>.ipynb``. A cell
that fails ends the task with exit 1, its index and traceback printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

INJECTED = "injected-parameters"
"""The tag of the cell the parameters are in (papermill's)."""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trainfleet run-notebook")
    parser.add_argument("--parameters", default="{}")
    parser.add_argument("notebook")
    given = parser.parse_args(argv)
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError as error:
        print(
            f"trainfleet: this task's Python ({sys.executable}) cannot run a notebook: "
            f"{error}; give the role an environment or image with nbclient and ipykernel",
            file=sys.stderr,
        )
        return 1
    notebook = nbformat.read(given.notebook, as_version=4)  # type: ignore[no-untyped-call]
    parameters = json.loads(given.parameters)
    if parameters:
        inject(notebook, parameters)
    client = NotebookClient(notebook, kernel_name="python3", timeout=None)
    client.resources = {"metadata": {"path": str(Path(given.notebook).parent.resolve())}}
    failed = None
    try:
        client.execute()
    except CellExecutionError as error:
        failed = error
    finally:
        keep(notebook, Path(given.notebook))
    if failed is not None:
        index, total = _failed_cell(notebook)
        print(
            f"trainfleet: cell {index} of {given.notebook} failed (cells 0-{total - 1}, "
            "the notebook's own numbering):",
            file=sys.stderr,
        )
        print(str(failed), file=sys.stderr)
        return 1
    return 0


def inject(notebook: Any, parameters: dict[str, Any]) -> None:
    """A code cell of ``name = value`` lines, after the ``parameters`` cell or first."""
    import nbformat

    source = "# Parameters\n" + "".join(
        f"{name} = {value!r}\n" for name, value in parameters.items()
    )
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": [INJECTED]})  # type: ignore[no-untyped-call]
    tagged = [
        number
        for number, existing in enumerate(notebook.cells)
        if "parameters" in existing.get("metadata", {}).get("tags", [])
    ]
    notebook.cells.insert(tagged[0] + 1 if tagged else 0, cell)


def keep(notebook: Any, path: Path) -> None:
    import nbformat

    folder = os.environ.get("TRAINFLEET_OUTPUT_DIR")
    if not folder:
        return
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip(".-") or "notebook"
    if not _is_rank_zero():
        stem += f"-{os.environ.get('TRAINFLEET_ROLE', 'task')}-{os.environ.get('TRAINFLEET_INDEX')}"
    partial = Path(folder) / f".{stem}.{os.getpid()}"
    nbformat.write(notebook, str(partial))  # type: ignore[no-untyped-call]
    os.replace(partial, Path(folder) / f"{stem}.ipynb")


def _is_rank_zero() -> bool:
    rank = os.environ.get("RANK")
    return rank == "0" if rank is not None else os.environ.get("TRAINFLEET_INDEX", "0") == "0"


def _failed_cell(notebook: Any) -> tuple[int, int]:
    """The index of the failed cell among the notebook's own (the injected one left out)."""
    own = [
        cell for cell in notebook.cells if INJECTED not in cell.get("metadata", {}).get("tags", [])
    ]
    for number, cell in enumerate(own):
        if any(output.get("output_type") == "error" for output in cell.get("outputs", [])):
            return number, len(own)
    return -1, len(own)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
