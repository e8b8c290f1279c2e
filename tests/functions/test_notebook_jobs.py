"""A notebook as a job (``notebook:`` and ``parameters:`` instead of ``command``): every
task runs it headless under nbclient in a real kernel; the executed notebook is the job's
output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from helpers import run_cli
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def _write(folder: Path, name: str, *cells: object) -> None:
    nbformat.write(new_notebook(cells=list(cells)), str(folder / name))


def _job_id(output: str) -> str:
    found = re.search(r"job (\S+):", output)
    assert found, output
    return found.group(1)


@pytest.fixture
def work(tmp_path: Path, data_dir: Path, reap: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def test_parameters_are_injected_and_each_task_keeps_its_executed_notebook(work: Path) -> None:
    _write(
        work,
        "train.ipynb",
        new_markdown_cell("# Training"),
        new_code_cell("lr = 1.0\nepochs = 1", metadata={"tags": ["parameters"]}),
        new_code_cell(
            "import os\nrank = os.environ['TRAINFLEET_INDEX']\n"
            "print(f'rank {rank}: lr={lr} epochs={epochs} name={name}')\nlr * 10"
        ),
    )
    (work / "job.yaml").write_text(
        "name: nb\nroles:\n  worker:\n    replicas: 2\n    notebook: train.ipynb\n"
        "    parameters: {lr: 0.5, name: ada}\n"
    )
    ran = run_cli("run", work / "job.yaml", timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    job_id = _job_id(ran.stdout)

    listed = run_cli("logs", job_id, "--output")
    assert listed.returncode == 0, listed.stderr
    assert "train.ipynb" in listed.stdout and "train-worker-1.ipynb" in listed.stdout

    shown = run_cli("logs", job_id, "--output", "train.ipynb")
    executed = nbformat.reads(shown.stdout, as_version=4)
    sources = [cell.source for cell in executed.cells]
    assert sources[2] == "# Parameters\nlr = 0.5\nname = 'ada'\n"  # after the tagged cell
    assert executed.cells[2].metadata.tags == ["injected-parameters"]
    last = executed.cells[-1].outputs
    assert "rank 0: lr=0.5 epochs=1 name=ada" in last[0]["text"]
    assert last[1]["data"]["text/plain"] == "5.0"
    other = run_cli("logs", job_id, "--output", "train-worker-1.ipynb")
    assert "rank 1: lr=0.5" in other.stdout
    assert json.loads(other.stdout)["cells"][2]["metadata"]["tags"] == ["injected-parameters"]
    assert (work / "train.ipynb").read_text().count("injected-parameters") == 0  # untouched


def test_a_failing_cell_fails_the_job_naming_the_cell_and_its_traceback(work: Path) -> None:
    _write(
        work,
        "fail.ipynb",
        new_code_cell("x = 1"),
        new_code_cell("print('before')"),
        new_code_cell("x / 0"),
        new_code_cell("print('never')"),
    )
    (work / "job.yaml").write_text(
        "name: nbfail\nroles:\n  worker:\n    notebook: fail.ipynb\n    parameters: {y: 2}\n"
    )
    ran = run_cli("run", work / "job.yaml", timeout=180)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "worker/0 | trainfleet: cell 2 of fail.ipynb failed" in ran.stdout
    assert "ZeroDivisionError" in ran.stdout
    job_id = _job_id(ran.stdout)
    kept = nbformat.reads(run_cli("logs", job_id, "--output", "fail.ipynb").stdout, 4)
    assert kept.cells[0].source == "# Parameters\ny = 2\n"  # no cell tagged: first
    assert kept.cells[2].outputs[0]["text"] == "before\n"
    assert kept.cells[3].outputs[0]["ename"] == "ZeroDivisionError"
    assert kept.cells[4].outputs == []


@pytest.mark.parametrize(
    ("role", "field", "problem"),
    [
        ("notebook: a.ipynb\n    command: python x.py", "roles.worker", "not both"),
        ("notebook: /etc/a.ipynb", "roles.worker.notebook", "inside the job's directory"),
        ("notebook: a.py", "roles.worker.notebook", "must be a .ipynb file"),
        ("notebook: a.ipynb\n    parameters: {1x: 2}", "roles.worker.parameters", "not a Python"),
        ("command: 'true'\n    parameters: {lr: 1}", "roles.worker", "only a role with a notebook"),
    ],
)
def test_a_bad_notebook_role_is_named_with_its_line(
    work: Path, role: str, field: str, problem: str
) -> None:
    (work / "job.yaml").write_text(f"name: bad\nroles:\n  worker:\n    {role}\n")
    refused = run_cli("run", work / "job.yaml")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert re.search(rf"job.yaml:\d+: {re.escape(field)}", refused.stderr), refused.stderr
    assert problem in refused.stderr
    assert "Traceback" not in refused.stderr
