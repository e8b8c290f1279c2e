"""A job's checkpoint contract with a real restarted task: every attempt finds its folder
(the job's own under the data directory, or its checkpoint_path), its attempt number and,
once a step is committed, the newest committed step to resume from; a failed attempt's
half-written step is never offered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import run_cli

pytestmark = pytest.mark.usefixtures("reap", "data_dir")

TRAIN = """\
import os, sys
from trainfleet import checkpoint
restart = int(os.environ["TRAINFLEET_RESTART"])
print("restart", restart, "resume", os.environ.get("TRAINFLEET_RESUME_FROM"), flush=True)
found = checkpoint.latest()
for step in range(found.step + 1 if found else 0, 6):
    if step == 3 and restart == 0:
        with checkpoint.save(step) as folder:
            (folder / "state").write_text("half")
            os._exit(3)  # dies mid-save: step 3 is never offered
    with checkpoint.save(step) as folder:
        (folder / "state").write_text(str(step))
print("done at", step, "keep", os.environ["TRAINFLEET_CHECKPOINT_KEEP"], flush=True)
"""


@pytest.mark.parametrize("own_folder", [False, True])
def test_a_restarted_task_resumes_from_the_newest_committed_step(
    tmp_path: Path, data_dir: Path, own_folder: bool
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    where = "checkpoint: {path: ck, keep: 2}\n" if own_folder else "checkpoint: {keep: 2}\n"
    (tmp_path / "job.yaml").write_text(
        f"name: resume\n{where}restart: {{policy: on-failure, backoff: {{initial: 0}}}}\n"
        f"roles:\n  worker: {{command: '{sys.executable} train.py'}}\n"
    )
    done = run_cli("run", tmp_path / "job.yaml", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = json.loads(run_cli("list", "-o", "json").stdout)[0]["id"]
    folder = tmp_path / "ck" if own_folder else data_dir / "jobs" / job_id / "checkpoints"
    lines = [line for line in done.stdout.splitlines() if line.startswith("worker/0 | ")]
    assert lines[0].endswith("restart 0 resume None")
    assert lines[1].endswith(f"restart 1 resume {folder / 'step-2'}")
    assert lines[2].endswith("done at 5 keep 2")
    assert sorted(path.name for path in folder.iterdir()) == ["step-4", "step-5"]
