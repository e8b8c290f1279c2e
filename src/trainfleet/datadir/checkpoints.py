"""A job's committed checkpoints as trainfleet reads them: names and times alone, never
through a link a member put in their place."""

from __future__ import annotations

import json

import trainfleet.checkpoint as checkpoint
from trainfleet.datadir.files import modified, plain_folder
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.records import CheckpointStep, JobRecord


def committed_steps(data_dir: DataDir, job: JobRecord) -> list[CheckpointStep]:
    """The job's committed checkpoints, oldest first; none where its folder is a URL,
    is not there, or is a link."""
    named = json.loads(job.spec).get("checkpoint_path")
    folder = data_dir.checkpoints_of(job.id, job.workdir, named)
    if "://" in folder or not plain_folder(folder):
        return []
    return [
        CheckpointStep(found.step, str(found.path), modified(found.path / checkpoint.MARKER))
        for found in checkpoint.committed(folder)
    ]
