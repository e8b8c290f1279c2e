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
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import yaml
from pydantic import ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from trainfleet.spec.errors import (
    Path,
    Problem,
    SourceMap,
    SpecError,
    format_path,
    spec_error_from_validation,
)
from trainfleet.spec.limits import JobLimits, check_limits, check_roles
from trainfleet.spec.models import JobSpec

if TYPE_CHECKING:
    from trainfleet.spec.queues import QueuesFile
    from trainfleet.spec.trainjob import RuntimeCatalog

DEFAULT_LIMITS = JobLimits()

MAX_VALUES = 100_000
"""Most values a document may hold once its aliases are expanded (stops alias bombs)."""

MAX_INT_BITS = 64
"""Larger integers (hex, octal or base 60 in YAML) are refused: no job needs them."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_SURROGATE = re.compile("[\ud800-\udfff]")
_NO_KEY: Final = object()


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


def read_job_text(path: str | os.PathLike[str]) -> str:
    """The text of the job file at ``path`` (UTF-8); raises SpecError naming the file."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise SpecError.one("no such file", file=name) from None
    except IsADirectoryError:
        raise SpecError.one("is a directory, not a job file", file=name) from None
    except PermissionError:
        raise SpecError.one("permission denied", file=name) from None
    except OSError as error:
        raise SpecError.one(f"cannot read: {error.strerror or error}", file=name) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise SpecError.one("is not UTF-8 text", file=name, line=line) from None


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
        data, source = parse_document(text, filename)
        check_roles(data, limits, source)
        if "apiVersion" in data or "kind" in data:
            from trainfleet.spec import kubeflow  # its models load only for manifests

            spec, warnings = kubeflow.job_from_manifest(data, source, limits, runtimes)
            return LoadedJob(spec, warnings, str(data["kind"]))
        try:
            spec = JobSpec.model_validate(data)
        except ValidationError as error:
            raise spec_error_from_validation(error, data, source, model=JobSpec) from None
        check_limits(spec, limits, source)
        return LoadedJob(spec, [], "trainfleet")
    except RecursionError:
        raise SpecError.one("the document is nested too deeply", file=filename) from None


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


def parse_document(text: str, filename: str = "<input>") -> tuple[dict[Hashable, Any], SourceMap]:
    """The top-level mapping of a YAML/JSON document and the line of every key in it."""
    try:
        return _parse(text, filename)
    except SpecError as error:
        if "\t" not in text or not text.lstrip().startswith(("{", "[")):
            raise
        first = error
    # JSON indented with tabs, which YAML forbids; valid JSON has no raw tab inside strings.
    try:
        return _parse(text.replace("\t", " "), filename)
    except SpecError:
        raise first from None


def _parse(text: str, filename: str) -> tuple[dict[Hashable, Any], SourceMap]:
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        root = loader.get_single_node()
        if root is None:
            raise SpecError.one(
                "the file is empty: expected a job with name and roles", file=filename
            )
        index = _Index(loader, filename)
        if index.visit(root, ()) > MAX_VALUES:
            message = f"the document holds more than {MAX_VALUES} values once aliases are expanded"
            raise SpecError.one(message, file=filename)
        if index.problems:
            raise SpecError(index.problems)
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as error:
        raise _yaml_error(error, filename) from None
    except yaml.reader.ReaderError as error:
        line = text[: error.position].count("\n") + 1
        message = f"invalid YAML: character #x{error.character:04x} is not allowed ({error.reason})"
        raise SpecError.one(message, file=filename, line=line) from None
    except yaml.YAMLError as error:
        raise SpecError.one(f"invalid YAML: {error}", file=filename) from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None and isinstance(root, ScalarNode) and not root.value:
        raise SpecError.one("the file is empty: expected a job with name and roles", file=filename)
    if not isinstance(data, dict):
        kind = _kind_of(data)
        message = f"expected a mapping (name: ..., roles: ...) at the top level, got {kind}"
        raise SpecError.one(message, file=filename, line=root.start_mark.line + 1)
    return data, SourceMap(filename, index.lines)


def _kind_of(data: object) -> str:
    if isinstance(data, list):
        return "a list"
    if data is None:
        return "null"
    return f"{type(data).__name__} {data!r}"[:60]


def _yaml_error(error: yaml.MarkedYAMLError, filename: str) -> SpecError:
    mark = error.problem_mark or error.context_mark
    message = f"invalid YAML: {error.problem or error.context or error}"
    if error.problem and error.context:
        line = error.context_mark.line + 1 if error.context_mark else None
        if error.problem.startswith("but "):
            where = f" (line {line})" if line else ""
            message = f"invalid YAML: {error.context}{where}, {error.problem}"
        else:
            where = f" on line {line}" if line else ""
            message += f" ({error.context}{where})"
    line = mark.line + 1 if mark is not None else None
    return SpecError.one(message, file=filename, line=line)


class _Loader(yaml.SafeLoader):
    """SafeLoader that reports bad explicit tags (``!!int abc``) and huge integers with a line."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            value = super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ArithmeticError, LookupError, ValueError, TypeError, AttributeError) as error:
            # PyYAML's scalar constructors let these escape for values that defy their tag.
            what = repr(node.value)[:60] if isinstance(node, ScalarNode) else "this value"
            message = f"cannot read {what} as {node.tag.rsplit(':', 1)[-1]}"
            raise yaml.constructor.ConstructorError(None, None, message, node.start_mark) from error
        if type(value) is int and value.bit_length() > MAX_INT_BITS:
            message = f"integer too large (more than {MAX_INT_BITS} bits)"
            raise yaml.constructor.ConstructorError(None, None, message, node.start_mark)
        if isinstance(value, str) and _SURROGATE.search(value):
            # JSON writes characters beyond U+FFFF as two \u escapes; PyYAML keeps them apart.
            try:
                return value.encode("utf-16", "surrogatepass").decode("utf-16")
            except UnicodeDecodeError:
                message = "a \\u escape is half of a character (a lone surrogate)"
                raise yaml.constructor.ConstructorError(
                    None, None, message, node.start_mark
                ) from None
        return value


class _Index:
    """Walks the node tree once: the line of every key path, duplicate keys, recursion."""

    def __init__(self, loader: _Loader, filename: str) -> None:
        self.loader = loader
        self.filename = filename
        self.lines: dict[Path, int] = {}
        self.problems: list[Problem] = []
        self._sizes: dict[int, int] = {}
        self._open: set[int] = set()

    def visit(self, node: Node, path: Path) -> int:
        """Index ``node`` at ``path``; returns how many values it expands to.

        A node reached again through an alias is indexed only the first time, so its keys
        keep their first path's lines, and expanding the sizes costs nothing.
        """
        if id(node) in self._open:
            raise SpecError.one(
                "recursive alias: an anchor is used inside itself",
                file=self.filename,
                line=node.start_mark.line + 1,
            )
        if id(node) not in self._sizes:
            self._open.add(id(node))
            self.lines.setdefault(path, node.start_mark.line + 1)
            self._sizes[id(node)] = 1 + self._children(node, path)
            self._open.discard(id(node))
        return self._sizes[id(node)]

    def _children(self, node: Node, path: Path) -> int:
        if isinstance(node, SequenceNode):
            return sum(self.visit(item, (*path, i)) for i, item in enumerate(node.value))
        if not isinstance(node, MappingNode):
            return 0
        size = 0
        first_line: dict[Hashable, int] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:  # `<<: *base`: its keys join this mapping
                merges.append(value_node)
                continue
            key = self._key(key_node)
            if key is _NO_KEY:  # an unhashable key: constructing the document reports it
                size += self.visit(value_node, path)
                continue
            line = key_node.start_mark.line + 1
            if key in first_line:
                self.problems.append(self._duplicate(path, key, line, first_line[key]))
            first_line.setdefault(key, line)
            self.lines.setdefault((*path, key), line)
            size += self.visit(value_node, (*path, key))
        return size + sum(self.visit(value_node, path) for value_node in merges)

    def _key(self, node: Node) -> Hashable:
        if not isinstance(node, ScalarNode):
            return _NO_KEY
        key = self.loader.construct_object(node)
        return key if isinstance(key, Hashable) else _NO_KEY

    def _duplicate(self, path: Path, key: Hashable, line: int, first: int) -> Problem:
        if path == ("roles",):
            what = f"role {key!r} is defined"
        elif path and str(path[-1]).endswith("ReplicaSpecs"):
            what = f"replica type {key!r} is defined"
        else:
            what = f"key {key!r} appears"
        message = f"{what} twice (first on line {first}); remove one"
        return Problem(self.filename, line, format_path((*path, key)), message)
