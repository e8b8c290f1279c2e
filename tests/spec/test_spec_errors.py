"""Problem formatting and the translation of pydantic errors into problems."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from pydantic import ValidationError

from trainfleet.spec.errors import (
    Path,
    Problem,
    SourceMap,
    SpecError,
    format_path,
    spec_error_from_validation,
)
from trainfleet.spec.models import JobSpec


@pytest.mark.parametrize(
    ("problem", "text"),
    [
        (Problem("job.yaml", 7, "roles.worker.replicas", "must be at least 1"),
         "job.yaml:7: roles.worker.replicas: must be at least 1"),
        (Problem("job.yaml", None, "name", "is required"), "job.yaml: name: is required"),
        (Problem(None, 3, "name", "is required"), "line 3: name: is required"),
        (Problem(None, None, "--num_ps", "must be at least 0"), "--num_ps: must be at least 0"),
        (Problem("job.yaml", 2, "", "invalid YAML"), "job.yaml:2: invalid YAML"),
    ],
)  # fmt: skip
def test_problem_text(problem: Problem, text: str) -> None:
    assert str(problem) == text


def test_spec_error_has_one_line_per_problem() -> None:
    error = SpecError([Problem("a.yaml", 1, "x", "bad"), Problem("a.yaml", 2, "y", "worse")])
    assert str(error) == "a.yaml:1: x: bad\na.yaml:2: y: worse"
    assert error.args == ("a.yaml:1: x: bad\na.yaml:2: y: worse",)
    assert SpecError.one("gone", file="f").problems == [Problem("f", None, "", "gone")]
    assert pickle.loads(pickle.dumps(error)).problems == error.problems


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("roles", "worker", "command"), "roles.worker.command"),
        (("spec", "containers", 0, "args", 2), "spec.containers[0].args[2]"),
        (("limits", "nvidia.com/gpu"), "limits['nvidia.com/gpu']"),
        (("roles", 5), "roles[5]"),
        (("env", True), "env[True]"),
        ((), ""),
    ],
)
def test_format_path(path: tuple[Any, ...], text: str) -> None:
    assert format_path(path) == text


def test_source_map_uses_the_nearest_known_line() -> None:
    source = SourceMap("job.yaml", {(): 1, ("roles",): 3, ("roles", "worker"): 4})
    assert source.line(("roles", "worker", "command")) == 4
    assert source.line(("name",)) == 1
    assert SourceMap().line(("x",)) is None


def validation_error(data: dict[str, Any]) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(data)
    return caught.value


def test_union_tags_are_dropped_and_members_merged() -> None:
    data = {"name": "x", "success": 5, "roles": {"worker": {"command": "a"}}}
    error = spec_error_from_validation(validation_error(data), data, SourceMap("j", {}))
    assert [p.field for p in error.problems] == ["success"]
    assert error.problems[0].message == "expected 'default' or 'all-workers', or a list, got 5"


def test_a_constraint_error_beats_the_other_members_type_errors() -> None:
    data = {"name": "x", "pytorch": {"nproc_per_node": 0}, "roles": {"worker": {"command": "a"}}}
    error = spec_error_from_validation(validation_error(data), data, SourceMap())
    assert str(error) == "pytorch.nproc_per_node: must be at least 1, got 0"


def test_unknown_field_without_a_model_still_reads_well() -> None:
    data = {"name": "x", "roles": {"worker": {"command": "a", "replica": 2}}}
    error = spec_error_from_validation(validation_error(data), data, SourceMap())
    assert str(error) == "roles.worker.replica: unknown field 'replica'"


def test_unknown_field_lists_the_fields_of_the_right_model() -> None:
    data = {"name": "x", "restart": {"polcy": "never"}, "roles": {"w": {"command": "a"}}}
    error = spec_error_from_validation(validation_error(data), data, SourceMap(), model=JobSpec)
    assert str(error) == (
        "restart.polcy: unknown field 'polcy' (did you mean 'policy'? "
        "allowed: policy, max_restarts, max_infrastructure, requeue_exit_code, backoff, scope)"
    )


def test_origin_maps_paths_to_what_the_user_wrote() -> None:
    data = {"name": "x", "roles": {"worker": {"command": "a", "replicas": 0}}}
    origin: dict[Path, Path] = {("roles", "worker", "replicas"): ("--num_workers",)}
    error = spec_error_from_validation(validation_error(data), data, SourceMap(), origin=origin)
    assert str(error) == "--num_workers: must be at least 1, got 0"
