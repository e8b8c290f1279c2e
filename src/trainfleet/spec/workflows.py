"""A workflow file (``kind: Workflow``): named steps, each an ordinary job, run as their
``needs`` allow, optionally on a cron schedule.

>>> text = '''
... kind: Workflow
... name: nightly
... parameters: {epochs: 3}
... steps:
...   prepare: {job: {roles: {worker: {command: "python prep.py"}}}}
...   train: {file: train.yaml, needs: [prepare], retries: 2, timeout: 1h}
...   alert: {job: {roles: {worker: {command: "echo failed"}}}, needs: [train], when: failure}
... '''
>>> loaded = load_workflow_text(text, "flow.yaml")
>>> loaded.order()
['prepare', 'train', 'alert']
>>> loaded.steps["train"].timeout
3600.0

Every problem names the file, the line and the field: a cycle in ``needs``, a step it
names that does not exist, a ``%name%`` that is no parameter, a cron expression or time
zone that cannot be read.
"""

from __future__ import annotations

import functools
import graphlib
import re
from collections.abc import Hashable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)

from trainfleet.spec.documents import parse_document
from trainfleet.spec.errors import Problem, SourceMap, SpecError, spec_error_from_validation
from trainfleet.spec.names import JOB_NAME, checked
from trainfleet.spec.notebook_runs import checked_notebook, checked_parameter
from trainfleet.spec.tensorboard import Duration

KIND = "Workflow"
MAX_STEPS = 2000
STORED_KEPT = 256
"""Stored workflow texts kept read (``stored_workflow``)."""
PLACEHOLDER = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)%")
"""``%name%``: a parameter's value, substituted in a step's job as plain text."""
RESERVED = frozenset({"input_path", "checkpoint_path"})
"""Placeholders a job's command has of its own (Submarine's): no parameter's names."""

StepName = Annotated[
    str,
    AfterValidator(lambda value: checked(JOB_NAME, value, "lower-case letters, digits and '-'")),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _cron(value: str) -> str:
    from cronsim import CronSim, CronSimError

    if len(value.split()) != 5:  # cronsim also reads a sixth field, of seconds: too often
        raise ValueError(f"{value!r} is not five fields (minute hour day month weekday)")
    try:
        CronSim(value, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as error:
        raise ValueError(f"{value!r} is not a cron expression: {error}") from None
    return value


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not a time zone (e.g. UTC, Europe/Berlin)") from None
    return value


class ScheduleSpec(_Model):
    """When the workflow runs by itself (on a server)."""

    cron: Annotated[str, AfterValidator(_cron)] = Field(
        description="Five fields, as cron takes them: '0 3 * * *' is 03:00 every day."
    )
    timezone: Annotated[str, AfterValidator(_zone)] = Field(
        default="UTC", description="The zone the cron expression's times are in."
    )
    concurrency: Literal["allow", "forbid", "replace"] = Field(
        default="allow",
        description="A run due while one runs: starts beside it, is skipped (recorded), or "
        "replaces it (the running one is stopped).",
    )
    catch_up: Literal["none", "last", "all"] = Field(
        default="last",
        description="Runs missed while the server was down: none, the last one, or all of "
        "them (at most max_catch_up; older ones are recorded as skipped).",
    )
    max_catch_up: Annotated[int, Field(ge=0, le=1000)] = 10
    paused: bool = False


class StepSpec(_Model):
    """One step: a job (inline, a job file or Kubeflow manifest, or a notebook)."""

    job: dict[str, Any] | None = Field(
        default=None, description="A job as a job file writes it; its name is the step's."
    )
    file: Annotated[str, AfterValidator(lambda v: _relative(v, "file"))] | None = Field(
        default=None,
        description="A job file or Kubeflow manifest, relative to the workflow's folder.",
    )
    notebook: Annotated[str, AfterValidator(checked_notebook)] | None = Field(
        default=None, description="A notebook run headless as a one-task job."
    )
    parameters: dict[Annotated[str, AfterValidator(checked_parameter)], JsonValue] = Field(
        default_factory=dict, description="The notebook's parameters."
    )
    needs: list[StepName] = Field(
        default_factory=list, description="Steps that must have ended first."
    )
    when: Literal["success", "failure", "always"] = Field(
        default="success",
        description="Runs once its needs all succeeded (success), once one of them failed "
        "(failure), or once they all ended either way (always).",
    )
    retries: Annotated[int, Field(ge=0, le=100)] = Field(
        default=0, description="Times the step's job is run again after it failed."
    )
    timeout: Duration | None = Field(
        default=None, description="The step's job is stopped and failed after this long."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> StepSpec:
        given = [name for name in ("job", "file", "notebook") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                "a step is one of job, file or notebook"
                + (f" (it has {' and '.join(given)})" if given else "")
            )
        if self.parameters and self.notebook is None:
            raise ValueError("parameters: only a notebook step takes parameters")
        return self


class WorkflowSpec(_Model):
    """A whole workflow file."""

    kind: Literal["Workflow"]
    name: StepName
    parameters: dict[Annotated[str, AfterValidator(checked_parameter)], JsonValue] = Field(
        default_factory=dict,
        description="Defaults, overridden by --param k=v; %name% in a step's job is the value.",
    )
    on_failure: Literal["finish-running", "cancel-all", "finish-possible"] = Field(
        default="finish-running",
        description="Once a step fails: let running steps end and start no more; stop "
        "every step; or go on with every step that does not need the failed one.",
    )
    schedule: ScheduleSpec | None = None
    steps: Annotated[dict[StepName, StepSpec], Field(min_length=1, max_length=MAX_STEPS)]

    def order(self) -> list[str]:
        """The steps, each after those it needs (ties in the file's order)."""
        sorter = graphlib.TopologicalSorter({name: step.needs for name, step in self.steps.items()})
        sorter.prepare()
        order: list[str] = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready(), key=list(self.steps).index)
            order += ready
            sorter.done(*ready)
        return order


def load_workflow_text(text: str, filename: str = "<input>") -> WorkflowSpec:
    """A validated workflow; SpecError (file, line, field) for each problem found."""
    data, source = parse_document(text, filename)
    try:
        spec = WorkflowSpec.model_validate(data)
    except ValidationError as error:
        raise spec_error_from_validation(error, data, source, model=WorkflowSpec) from None
    problems = list(_graph_problems(spec, source)) + list(_placeholder_problems(spec, source))
    if problems:
        raise SpecError(problems)
    return spec


@functools.lru_cache(maxsize=STORED_KEPT)
def stored_workflow(text: str, filename: str) -> WorkflowSpec:
    """A stored workflow's text, read once (a 200-step file takes tens of ms; a run's page
    and the server's threads read the same text again and again)."""
    return load_workflow_text(text, filename)


def is_workflow(data: Mapping[Hashable, Any]) -> bool:
    """Whether a parsed document is a workflow file."""
    return data.get("kind") == KIND


def _graph_problems(spec: WorkflowSpec, source: SourceMap) -> Iterator[Problem]:
    for name, step in spec.steps.items():
        for number, needed in enumerate(step.needs):
            if needed not in spec.steps:
                known = ", ".join(spec.steps)
                yield source.problem(
                    ("steps", name, "needs", number), f"no step {needed!r} (steps: {known})"
                )
            elif needed == name:
                yield source.problem(("steps", name, "needs", number), "a step needs itself")
    graph = {
        name: [n for n in step.needs if n in spec.steps and n != name]
        for name, step in spec.steps.items()
    }
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        cycle = list(reversed(error.args[1]))
        yield source.problem(
            ("steps", cycle[0], "needs"), "a cycle: " + " -> ".join(cycle) + " (needs)"
        )


def _placeholder_problems(spec: WorkflowSpec, source: SourceMap) -> Iterator[Problem]:
    for name, step in spec.steps.items():
        for path, text in _texts(step.model_dump(include={"job", "file", "notebook"})):
            for found in PLACEHOLDER.findall(text):
                if found in spec.parameters or found in RESERVED:
                    continue
                known = ", ".join(spec.parameters) or "none"
                yield source.problem(
                    ("steps", name, *path), f"%{found}% is no parameter (parameters: {known})"
                )


def _texts(
    node: Any, path: tuple[Hashable, ...] = ()
) -> Iterator[tuple[tuple[Hashable, ...], str]]:
    """Every string in a document, with its path."""
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _texts(value, (*path, key))
    elif isinstance(node, list):
        for number, value in enumerate(node):
            yield from _texts(value, (*path, number))


def _relative(value: str, field: str) -> str:
    if not value.strip() or "\0" in value or value.startswith("/") or ".." in value.split("/"):
        raise ValueError(f"{field} {value!r} must be a path inside the workflow's folder")
    return value
