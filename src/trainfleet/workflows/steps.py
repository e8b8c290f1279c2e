"""Each step's job: its inline job, job file or notebook, with the run's parameters.

A parameter's value replaces ``%name%`` in the step's job (as plain text, in the file's text
or in every string of an inline job) and is in each task's environment as
``TRAINFLEET_PARAM_<NAME>``; ``TRAINFLEET_RUN_DIR`` is the run's folder, shared by its steps.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainfleet.domain.errors import BadInput
from trainfleet.spec.documents import read_job_text
from trainfleet.spec.errors import SourceMap, spec_error_from_validation
from trainfleet.spec.loading import load_job_text
from trainfleet.spec.models import JobSpec
from trainfleet.spec.workflows import PLACEHOLDER, StepSpec, WorkflowSpec

RUN_DIR_VARIABLE = "TRAINFLEET_RUN_DIR"
PARAMETER_PREFIX = "TRAINFLEET_PARAM_"
MAX_NAME = 63


def parameters_of(spec: WorkflowSpec, given: Mapping[str, str]) -> dict[str, Any]:
    """The workflow's parameters with ``given`` (``--param k=v``) over its defaults;
    BadInput naming a parameter the workflow does not have."""
    unknown = sorted(set(given) - set(spec.parameters))
    if unknown:
        known = ", ".join(spec.parameters) or "none"
        raise BadInput(f"--param {unknown[0]}: no such parameter (parameters: {known})")
    return {**spec.parameters, **given}


def step_job(
    spec: WorkflowSpec,
    name: str,
    folder: Path,
    parameters: Mapping[str, Any],
    run_dir: str,
    filename: str | None = None,
) -> JobSpec:
    """The job of step ``name``, read now from ``folder`` where it is a file; SpecError
    (file, line, field) where it cannot be. ``filename``: the workflow file's name as its
    sender gave it: a step's file is named beside it (not by ``folder``: a server's)."""
    step = spec.steps[name]
    values = {key: _text(value) for key, value in parameters.items()}
    if step.file is not None:
        path = folder / step.file
        shown = (
            str(path) if filename is None else os.path.join(os.path.dirname(filename), step.file)
        )
        text = _substituted(read_job_text(path, shown), values)
        job = load_job_text(text, shown).spec.model_dump(mode="json", exclude_unset=True)
    else:
        job = _substituted_tree(_document(step), values)
    job = {**job, "name": _job_name(spec.name, name)}
    env = {f"{PARAMETER_PREFIX}{key.upper()}": value for key, value in values.items()}
    job["env"] = {**job.get("env", {}), **env, RUN_DIR_VARIABLE: run_dir}
    for role in job.get("roles", {}).values():  # containers see the run's folder too
        if isinstance(role, dict) and role.get("image"):
            mount = {"source": run_dir, "target": run_dir}
            role["mounts"] = [*role.get("mounts", []), mount]
    labels = {"trainfleet/workflow": spec.name, "trainfleet/step": name}
    job["labels"] = {**job.get("labels", {}), **labels}
    if step.timeout is not None:
        job["deadline"] = min(step.timeout, job.get("deadline") or step.timeout)
    try:
        return JobSpec.model_validate(job)
    except ValidationError as error:
        source = SourceMap(f"step {name}")
        raise spec_error_from_validation(error, job, source, model=JobSpec) from None


def _document(step: StepSpec) -> dict[str, Any]:
    if step.notebook is not None:
        role = {"notebook": step.notebook, "parameters": dict(step.parameters)}
        return {"roles": {"worker": role}}
    assert step.job is not None, "a step is a job, a file or a notebook"
    return dict(step.job)


def _job_name(workflow: str, step: str) -> str:
    name = f"{workflow}-{step}"
    return name if len(name) <= MAX_NAME else name[:MAX_NAME].rstrip("-")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _substituted(text: str, values: Mapping[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _substituted_tree(node: Any, values: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return _substituted(node, values)
    if isinstance(node, dict):
        return {key: _substituted_tree(value, values) for key, value in node.items()}
    if isinstance(node, list):
        return [_substituted_tree(value, values) for value in node]
    return node
