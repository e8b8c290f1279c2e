"""Read a job file (YAML or JSON, trainfleet or Kubeflow) into a validated JobSpec.

Every error names the file, the line and the field:

>>> load_job_text("name: demo\\nroles:\\n  worker: {replica: 2, command: train}\\n", "job.yaml")
Traceback (most recent call last):
...
trainfleet.spec.errors.SpecError: job.yaml:3: roles.worker.replica: unknown field 'replica' ...
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from trainfleet.spec.documents import Document, parse_document, parse_documents, read_job_text
from trainfleet.spec.errors import SourceMap, SpecError, spec_error_from_validation
from trainfleet.spec.limits import JobLimits, check_limits, check_roles
from trainfleet.spec.models import JobSpec

if TYPE_CHECKING:
    from trainfleet.spec.queues import QueuesFile
    from trainfleet.spec.trainjob import RuntimeCatalog

DEFAULT_LIMITS = JobLimits()


@dataclass(frozen=True)
class LoadedJob:
    """A validated job, what to tell the user about it, and where it came from."""

    spec: JobSpec
    warnings: list[str]
    source: str
    """``trainfleet``, ``submarine`` or the Kubeflow kind (``TFJob``, ...)."""


def load_job_file(path: str | os.PathLike[str], runtimes: Sequence[str] = ()) -> LoadedJob:
    """Read and validate the job file at ``path``; raises SpecError, nothing else.

    ``runtimes``: files of Kubeflow training runtimes a TrainJob may name, beside the
    built-in ones.
    """
    catalog = None
    if runtimes:
        from trainfleet.spec.trainjob import RuntimeCatalog

        catalog = RuntimeCatalog.with_files(runtimes)
    return load_job_text(read_job_text(path), os.fspath(path), runtimes=catalog)


def load_job_text(
    text: str,
    filename: str = "<input>",
    *,
    limits: JobLimits = DEFAULT_LIMITS,
    json_only: bool = False,
    runtimes: RuntimeCatalog | None = None,
) -> LoadedJob:
    """Validate a job given as YAML or JSON text; raises SpecError, nothing else.

    ``limits``: the most roles and tasks the job may have. ``json_only``: the text was
    declared JSON, so what only YAML accepts (comments, trailing commas) is refused.
    ``runtimes``: the training runtimes a TrainJob may name (the built-in ones if None).
    """
    if json_only:
        _check_json(text, filename)
    plain = _plain_json_job(text, limits)
    if plain is not None:
        return LoadedJob(plain, [], "trainfleet")
    try:
        data, source, runtimes = _the_job(parse_documents(text, filename), filename, runtimes)
        if data.get("kind") == "Workflow":  # spec.workflows.KIND (not imported: start-up)
            raise SpecError(
                [
                    source.problem(
                        ("kind",),
                        "a workflow, not a job: run it with `trainfleet workflow run "
                        f"{filename}` (here) or `trainfleet workflow submit {filename}` "
                        "(on a server)",
                    )
                ]
            )
        check_roles(data, limits, source)
        if "apiVersion" in data or "kind" in data:
            spec, warnings = _from_manifest(data, source, limits, runtimes)
            return LoadedJob(spec, warnings, str(data["kind"]))
        try:
            spec = JobSpec.model_validate(data)
        except ValidationError as error:
            raise spec_error_from_validation(error, data, source, model=JobSpec) from None
        check_limits(spec, limits, source)
        return LoadedJob(spec, [], "trainfleet")
    except RecursionError:
        raise SpecError.one("the document is nested too deeply", file=filename) from None


def _the_job(
    documents: list[Document], filename: str, runtimes: RuntimeCatalog | None
) -> tuple[Mapping[Hashable, Any], SourceMap, RuntimeCatalog | None]:
    """The one job of a file's documents, and the runtimes its TrainJob may name with those
    the file brings (a TrainJob with its runtime, as ``kubectl apply`` takes it)."""
    if len(documents) == 1:
        return (*documents[0], runtimes)
    from trainfleet.spec.trainjob import RUNTIME_KINDS, RuntimeCatalog, loaded_runtime

    brought = [loaded_runtime(*doc) for doc in documents if doc[0].get("kind") in RUNTIME_KINDS]
    jobs = [doc for doc in documents if doc[0].get("kind") not in RUNTIME_KINDS]
    if len(jobs) != 1:
        found = ", ".join(
            f"{data.get('kind', 'job')} on line {source.line(())}" for data, source in jobs
        )
        message = (
            f"the file holds {len(jobs)} jobs ({found}): one job a file, with the training "
            "runtimes it names"
            if jobs
            else "the file holds training runtimes and no job"
        )
        second = jobs[1][1].line(()) if len(jobs) > 1 else None
        raise SpecError.one(message, file=filename, line=second)
    catalog = (runtimes or RuntimeCatalog.builtin()).adding(brought)
    return (*jobs[0], catalog)


def _from_manifest(
    data: Mapping[Hashable, Any],
    source: SourceMap,
    limits: JobLimits,
    runtimes: RuntimeCatalog | None,
) -> tuple[JobSpec, list[str]]:
    """The job of a Kubeflow manifest: a TrainJob, or a training operator's kind. Their
    models load only for manifests."""
    if data.get("kind") == "TrainJob":
        from trainfleet.spec.trainjob import job_from_trainjob

        return job_from_trainjob(data, source, limits, runtimes)
    from trainfleet.spec.kubeflow import job_from_manifest

    return job_from_manifest(data, source, limits)


def _check_json(text: str, filename: str) -> None:
    """SpecError with the line unless ``text`` is JSON; duplicate keys and NaN are left
    to the full path, which reports them with their lines."""
    try:
        json.loads(text, parse_constant=_refuse)
    except json.JSONDecodeError as error:
        message = f"invalid JSON: {error.msg} (column {error.colno})"
        raise SpecError.one(message, file=filename, line=error.lineno) from None
    except ValueError as error:  # NaN or Infinity
        raise SpecError.one(f"invalid JSON: {error}", file=filename) from None
    except RecursionError:
        raise SpecError.one("the document is nested too deeply", file=filename) from None


def _plain_json_job(text: str, limits: JobLimits) -> JobSpec | None:
    """A valid trainfleet job written as plain JSON, read without the YAML parser (fast, for
    API clients). None sends the text down the full path, which alone reports lines:
    not JSON, a manifest, duplicate keys, NaN, escaped surrogates, or anything invalid."""
    if not text.lstrip().startswith("{") or "\\ud" in text.lower():
        return None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return None
    if "apiVersion" in data or "kind" in data:
        return None
    roles = data.get("roles")
    if isinstance(roles, dict) and len(roles) > limits.roles:
        return None
    try:
        spec = JobSpec.model_validate(data)
    except (ValidationError, RecursionError):
        return None
    try:
        check_limits(spec, limits)
    except SpecError:
        return None
    return spec


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("duplicate key")
    return found


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def load_queues_file(path: str | os.PathLike[str]) -> QueuesFile:
    """The queues of a queues file (YAML or JSON); raises SpecError naming file and line."""
    from trainfleet.spec.queues import QueuesFile

    filename = os.fspath(path)
    data, source = parse_document(read_job_text(path), filename)
    try:
        return QueuesFile.model_validate(data)
    except ValidationError as error:
        raise spec_error_from_validation(error, data, source, model=QueuesFile) from None
