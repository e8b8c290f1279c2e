"""examples/pipeline runs with `trainfleet workflow run` as a new user runs it: prepare, train
with the parameter-server strategy, evaluate, and a failure branch when evaluation fails.

`workflow run` says each step's state; what the steps printed is read back with
`trainfleet logs JOB` (``worker/0 | loss=0.0105 ...``).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import run_cli

WORKFLOW = Path(__file__).resolve().parents[2] / "examples" / "pipeline" / "workflow.yaml"
TIMEOUT = 300  # seconds; a run takes about 25 on two slow cores

pytestmark = pytest.mark.slow


@pytest.fixture
def marked_tasks(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A marker in the environment of every task the test starts (they run in examples/,
    not in tmp_path): killed after the test if still alive."""
    marker = uuid.uuid4().hex
    monkeypatch.setenv("TRAINFLEET_TEST_MARKER", marker)
    yield marker
    for process in _marked(marker):
        with contextlib.suppress(psutil.Error):
            process.kill()


def _marked(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("TRAINFLEET_TEST_MARKER") == marker:
                found.append(process)
    return found


def _run(*params: str) -> tuple[int, str, list[str]]:
    """``workflow run`` of the example: its exit code, run id, and what it said, each line
    without the run's prefix and with job ids as ``JOB``."""
    args = [arg for param in params for arg in ("--param", param)]
    ran = run_cli("workflow", "run", WORKFLOW, *args, timeout=TIMEOUT)
    found = re.match(r"workflow linreg-pipeline: run (\S+)\n", ran.stdout)
    assert found, ran.stdout + ran.stderr
    run_id = found[1]
    said = [
        re.sub(r"job \S+$", "job JOB", line.removeprefix(f"{run_id} | "))
        for line in ran.stdout.splitlines()[1:]
    ]
    return ran.returncode, run_id, said


def _job(run_id: str, step: str) -> str:
    """The id of the job that ran ``step`` in the run ``run_id``."""
    listed = run_cli("list", "--label", f"trainfleet/step={step}", "-o", "json")
    jobs = [job["id"] for job in json.loads(listed.stdout)]
    assert len(jobs) == 1, (step, jobs)  # each test runs the workflow once
    return jobs[0]


def _log(job_id: str, task: str) -> list[str]:
    """The lines ``task`` (``role/index``) printed, without their prefix."""
    line = re.compile(rf"^{re.escape(task)}\s*\| ?(.*)$")
    logs = run_cli("logs", job_id).stdout.splitlines()
    return [found[1] for found in map(line.match, logs) if found]


def _assert_no_task_left(marker: str) -> None:
    deadline = time.monotonic() + 5
    while (left := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"tasks left running after the workflow ended: {left}"


def test_pipeline_example_trains_evaluates_and_skips_its_failure_branch(
    data_dir: Path, marked_tasks: str
) -> None:
    pytest.importorskip("tensorflow")
    code, run_id, said = _run()
    assert code == 0, said
    assert said == [
        "step prepare started: job JOB",
        "step prepare succeeded: worker/0 succeeded",
        "step train started: job JOB",
        "step train succeeded: chief/0 succeeded",
        "step evaluate started: job JOB",
        "step evaluate succeeded: worker/0 succeeded",
        "step report-failure skipped",
        "workflow linreg-pipeline succeeded: prepare succeeded, train succeeded, "
        "evaluate succeeded, report-failure skipped",
    ]
    _assert_no_task_left(marked_tasks)

    # The steps handed files on through the run's folder.
    run_dir = data_dir / "workflows" / run_id
    assert sorted(path.name for path in run_dir.iterdir()) == ["data.npz", "weights.json"]
    weights = json.loads((run_dir / "weights.json").read_text())
    assert weights["w"] == pytest.approx(2, abs=0.1)
    assert weights["b"] == pytest.approx(10, abs=0.1)

    prepared = _log(_job(run_id, "prepare"), "worker/0")
    assert prepared == [f"wrote 1024 examples to {run_dir / 'data.npz'}"]
    chief = _log(_job(run_id, "train"), "chief/0")
    epochs = [line for line in chief if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == [f"epoch {n}" for n in range(1, 6)], chief
    assert chief[-1] == f"saved w={weights['w']:.2f} b={weights['b']:.2f}"

    evaluate = _job(run_id, "evaluate")
    [said_loss] = _log(evaluate, "worker/0")
    found = re.fullmatch(r"loss=([\d.]+) max_loss=0.5: passed", said_loss)
    assert found and float(found[1]) < 0.05, said_loss
    metrics = json.loads(run_cli("logs", evaluate, "--output", "metrics.json").stdout)
    assert metrics["passed"] is True and f"{metrics['loss']:.4f}" == found[1]
    skipped = run_cli("list", "--label", "trainfleet/step=report-failure", "-o", "json")
    assert json.loads(skipped.stdout) == []  # a skipped step has no job


def test_pipeline_example_reports_a_failed_evaluation(data_dir: Path, marked_tasks: str) -> None:
    pytest.importorskip("tensorflow")
    code, run_id, said = _run("max_loss=0", "epochs=2")
    assert code == 1, said
    assert said == [
        "step prepare started: job JOB",
        "step prepare succeeded: worker/0 succeeded",
        "step train started: job JOB",
        "step train succeeded: chief/0 succeeded",
        "step evaluate started: job JOB",
        "step evaluate failed: worker/0 exited with exit code 1",
        "step report-failure started: job JOB",
        "step report-failure succeeded: worker/0 succeeded",
        "workflow linreg-pipeline failed: prepare succeeded, train succeeded, "
        "evaluate failed, report-failure succeeded",
    ]
    _assert_no_task_left(marked_tasks)

    chief = _log(_job(run_id, "train"), "chief/0")
    assert [line for line in chief if line.startswith("epoch ")][-1].startswith("epoch 2:")
    [evaluated] = _log(_job(run_id, "evaluate"), "worker/0")
    assert re.fullmatch(r"loss=[\d.]+ max_loss=0: too high", evaluated), evaluated
    run_dir = data_dir / "workflows" / run_id
    assert _log(_job(run_id, "report-failure"), "worker/0") == [
        f"pipeline failed at step evaluate; its files are in {run_dir}"
    ]


def test_pipeline_example_runs_on_a_server_as_sent(tmp_path: Path, marked_tasks: str) -> None:
    """The same folder sent to a server (``Client.submit_workflow``): each step runs in its
    own copy of the folder, the run's folder shared between them."""
    pytest.importorskip("tensorflow")
    from server.harness import LiveServer

    from trainfleet.client import Client

    server = LiveServer(tmp_path / "data").start()
    try:
        with Client(server.url, server.token, timeout=60) as client:
            submitted = client.submit_workflow(WORKFLOW, params={"epochs": "2"})
            assert submitted.run is not None
            done = client.wait_run(submitted.run.id)
            states = {step.step: step.state for step in done.steps}
            assert done.run.state == "succeeded", (done.run, done.steps)
            assert states == {
                "prepare": "succeeded",
                "train": "succeeded",
                "evaluate": "succeeded",
                "report-failure": "skipped",
            }
            evaluate = next(step for step in done.steps if step.step == "evaluate")
            said = client.read_log(evaluate.jobs[-1], "worker", 0).decode()
            assert re.search(r"loss=\d+\.\d+ max_loss=0\.5: passed", said), said
            run_dir = server.engine.data_dir.root / "workflows" / "runs" / done.run.id
            assert sorted(path.name for path in run_dir.iterdir()) == ["data.npz", "weights.json"]
    finally:
        server.stop()
    _assert_no_task_left(marked_tasks)
