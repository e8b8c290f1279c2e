"""``trainfleet workflow run FILE``: real jobs on this machine's engine, in the foreground."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import run_cli

FLOW = """\
kind: Workflow
name: demo
parameters: {greeting: hello}
on_failure: ON_FAILURE
steps:
  prepare:
    job: {roles: {worker: {command: "echo %greeting% > $TRAINFLEET_RUN_DIR/data.txt"}}}
  train:
    job: {roles: {worker: {command: "cat $TRAINFLEET_RUN_DIR/data.txt; exit 3"}}}
    needs: [prepare]
    retries: 1
  slow:
    job: {roles: {worker: {command: "sleep 60"}}}
    needs: [prepare]
  evaluate:
    job: {roles: {worker: {command: "echo evaluated"}}}
    needs: [train]
  alert:
    job: {roles: {worker: {command: "echo alert $TRAINFLEET_PARAM_GREETING"}}}
    needs: [train]
    when: failure
"""


def _flow(tmp_path: Path, on_failure: str) -> Path:
    path = tmp_path / "flow.yaml"
    path.write_text(FLOW.replace("ON_FAILURE", on_failure))
    return path


def _job_of(output: str, step: str) -> str:
    found = re.findall(rf"step {step} started: job (\S+)", output)
    assert found, output
    return found[-1]


def test_a_failing_step_retries_then_its_handler_runs_and_cancel_all_stops_the_rest(
    tmp_path: Path, data_dir: Path, reap: Path
) -> None:
    ran = run_cli("workflow", "run", _flow(tmp_path, "cancel-all"), "--param", "greeting=hi")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    said = ran.stdout
    assert said.count("step train started") == 2  # once, and its one retry
    assert "step train failed: worker/0 exited with exit code 3 (retry 1 of 1)" in said
    assert "step evaluate skipped" in said
    assert re.search(r"step slow cancelled", said)  # stopped at once, not after 60 s
    assert "workflow demo failed: prepare succeeded, train failed, slow cancelled" in said
    assert run_cli("logs", _job_of(said, "train")).stdout == "worker/0 | hi\n"  # the run's folder
    assert run_cli("logs", _job_of(said, "alert")).stdout == "worker/0 | alert hi\n"


def test_finish_running_lets_a_running_step_end(tmp_path: Path, data_dir: Path, reap: Path) -> None:
    flow = _flow(tmp_path, "finish-running").read_text().replace("sleep 60", "sleep 4")
    (tmp_path / "flow.yaml").write_text(flow)
    ran = run_cli("workflow", "run", tmp_path / "flow.yaml")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "step slow succeeded" in ran.stdout and "step alert succeeded" in ran.stdout


def test_bad_files_and_parameters_exit_2_with_the_line_and_run_nothing(
    tmp_path: Path, data_dir: Path
) -> None:
    flow = _flow(tmp_path, "cancel-all")
    unknown = run_cli("workflow", "run", flow, "--param", "colour=red")
    assert unknown.returncode == 2
    assert "--param colour: no such parameter (parameters: greeting)" in unknown.stderr
    malformed = run_cli("workflow", "run", flow, "--param", "colour")
    assert malformed.returncode == 2
    assert malformed.stderr == "error: --param 'colour': expected NAME=VALUE\n"
    cycle = FLOW.replace("ON_FAILURE", "cancel-all").replace(
        "  prepare:\n", "  prepare:\n    needs: [alert]\n"
    )
    flow.write_text(cycle)
    looped = run_cli("workflow", "run", flow)
    assert looped.returncode == 2
    assert re.search(
        r"flow.yaml:\d+: steps.prepare.needs: a cycle: prepare -> alert", looped.stderr
    )
    flow.write_text(FLOW.replace("ON_FAILURE", "stop-everything"))
    refused = run_cli("workflow", "run", flow)
    assert refused.returncode == 2
    assert re.search(r"flow.yaml:4: on_failure: ", refused.stderr), refused.stderr
    for said in (unknown, malformed, looped, refused):
        assert "Traceback" not in said.stderr and "started" not in said.stdout
    assert "demo-" not in run_cli("list").stdout  # no job was made


def test_file_notebook_and_timeout_steps(tmp_path: Path, data_dir: Path, reap: Path) -> None:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    (tmp_path / "echo.yaml").write_text(
        "name: ignored\nroles:\n  worker: {command: 'echo from the file %greeting%'}\n"
    )
    notebook = new_notebook(cells=[new_code_cell("print('notebook says', word)")])
    nbformat.write(notebook, str(tmp_path / "say.ipynb"))
    (tmp_path / "flow.yaml").write_text(
        "kind: Workflow\nname: kinds\nparameters: {greeting: hey}\nsteps:\n"
        "  from-file: {file: echo.yaml}\n"
        "  notebook: {notebook: say.ipynb, parameters: {word: hi}, needs: [from-file]}\n"
        "  late: {job: {roles: {worker: {command: 'sleep 60'}}}, timeout: 2s}\n"
    )
    ran = run_cli("workflow", "run", tmp_path / "flow.yaml", timeout=180)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    said = ran.stdout
    assert "step from-file succeeded" in said and "step notebook succeeded" in said
    assert re.search(r"step late failed: .*deadline", said), said
    assert run_cli("logs", _job_of(said, "from-file")).stdout == "worker/0 | from the file hey\n"
    kept = run_cli("logs", _job_of(said, "notebook"), "--output", "say.ipynb").stdout
    assert "notebook says hi" in kept
