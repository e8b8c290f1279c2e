"""A real notebook, executed headless by nbclient in a real kernel, calls functions and
runs a cell as distributed jobs on a real server (PyTorch, gloo on CPU)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from server.harness import LiveServer, add_user

from trainfleet.client import Client

CLOSURE = """
from trainfleet.client import Client

base = 5  # captured by the function

def contribute():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(base + dist.get_rank())])
    dist.all_reduce(value)
    print("all-reduced", value.item())
    return value.item()

with Client() as client:  # TRAINFLEET_SERVER and TRAINFLEET_TOKEN
    total = client.run(contribute, workers=3, framework="pytorch")
assert total == 5 + 6 + 7, total
print("total", total)
"""

RAISES = """
def parse(text):
    return int(text)

with Client() as client:
    client.run(parse, "twelve", framework="generic")
"""

CELL = """%%trainfleet --workers 2 --framework pytorch
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
mine = torch.tensor([float(base * 10 + dist.get_rank())])
dist.all_reduce(mine)
mine.item()
"""


@pytest.fixture
def server(tmp_path: Path, reap: Path) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path / "data").start()
    yield live
    live.stop()


def test_a_notebook_runs_functions_and_a_cell_as_jobs_on_a_server(
    server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    member, _ = add_user(server.engine.store, "nora")
    monkeypatch.setenv("TRAINFLEET_SERVER", server.url)
    monkeypatch.setenv("TRAINFLEET_TOKEN", member)
    work = tmp_path / "work"
    work.mkdir()
    cells = [CLOSURE, RAISES, "%load_ext trainfleet.notebook", CELL]
    notebook = new_notebook(cells=[new_code_cell(text) for text in cells])
    runner = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(work)}},
    )
    runner.execute()
    nbformat.validate(notebook)
    closure, raises, _, cell = (cell.outputs for cell in notebook.cells)

    printed = "".join(out.get("text", "") for out in closure)
    assert "total 18.0" in printed, closure
    assert "worker/2 | all-reduced 18.0" in printed

    errors = [out for out in raises if out.output_type == "error"]
    assert len(errors) == 1, raises
    error = errors[0]
    assert error.ename == "RemoteError"
    assert "worker/0: ValueError: invalid literal for int() with base 10: 'twelve'" in error.evalue
    assert "in parse" in error.evalue  # the remote traceback, in the cell's

    results = [out for out in cell if out.output_type == "execute_result"]
    assert len(results) == 1, cell  # what the cell printed or raised, where it did not end
    result = results[0]
    assert result.data["text/plain"] == str(50.0 + 51.0)

    with Client(server.url, member) as client:
        jobs = list(client.list_jobs())
    assert sorted((job.name, job.state) for job in jobs) == [
        ("cell", "succeeded"),
        ("contribute", "succeeded"),
        ("parse", "failed"),
    ]
    assert all(job.user == "nora" for job in jobs)
