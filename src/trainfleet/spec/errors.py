"""Problems in what the user wrote, reported as ``file:line: field: message``.

>>> str(SpecError([Problem("job.yaml", 7, "roles.worker.replicas", "must be at least 1")]))
'job.yaml:7: roles.worker.replicas: must be at least 1'
>>> format_path(("spec", "containers", 0, "command"))
'spec.containers[0].command'
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from trainfleet.domain.errors import BadInput

MAX_PROBLEMS = 100
"""Most problems reported for one document: a few thousand wrong keys make no better report."""

Path = tuple[Hashable, ...]
"""Where a value sits in a document: mapping keys and list indexes."""


def format_path(path: Sequence[Hashable]) -> str:
    """``roles.worker.command``; list indexes and non-text keys in brackets."""
    text = ""
    for item in path:
        if isinstance(item, str) and item and not any(c in item for c in ".[] \"'"):
            text += f".{item}" if text else item
        elif type(item) is int:
            text += f"[{item}]"
        else:
            text += f"[{item!r}]"
    return text


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a job: where (file, line, field) and what."""

    file: str | None
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file or ""
        if self.line is not None:
            where = f"{where}:{self.line}" if where else f"line {self.line}"
        parts = [part for part in (where, self.field, self.message) if part]
        return ": ".join(parts)


class SpecError(BadInput):
    """A job could not be read; ``problems`` says every reason found, one line each."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(problem) for problem in self.problems)

    def __reduce__(self) -> tuple[type[SpecError], tuple[list[Problem]]]:
        return (SpecError, (self.problems,))

    @classmethod
    def one(
        cls, message: str, *, file: str | None = None, line: int | None = None, field: str = ""
    ) -> SpecError:
        """An error of a single problem."""
        return cls([Problem(file, line, field, message)])


@dataclass(frozen=True)
class SourceMap:
    """The file a document came from and the line of every key path in it."""

    file: str | None = None
    lines: Mapping[Path, int] = field(default_factory=dict)

    def line(self, path: Path) -> int | None:
        """Line of ``path``, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def problem(self, path: Path, message: str) -> Problem:
        """A problem at ``path`` of this document."""
        return Problem(self.file, self.line(path), format_path(path), message)


def spec_error_from_validation(
    error: ValidationError,
    data: object,
    source: SourceMap,
    *,
    model: type[BaseModel] | None = None,
    origin: Mapping[Path, Path] | None = None,
) -> SpecError:
    """A SpecError from pydantic's ``error`` about validating ``data``.

    Union member tags are dropped from pydantic's locations, a failed union yields its most
    useful member error, unknown fields list the names that ``model`` allows, and ``origin``
    (if given) maps paths of ``data`` to the paths the user wrote (longest prefix wins).
    """
    problems: list[Problem] = []
    for path, message in _messages(error.errors(), data, model):
        shown = _translate(path, origin) if origin is not None else path
        problems.append(source.problem(shown, message))
    unique = list(dict.fromkeys(problems))
    if len(unique) > MAX_PROBLEMS:
        more = len(unique) - MAX_PROBLEMS
        unique = [*unique[:MAX_PROBLEMS], Problem(source.file, None, "", f"and {more} more")]
    return SpecError(unique)


def _translate(path: Path, origin: Mapping[Path, Path]) -> Path:
    for end in range(len(path), -1, -1):
        if path[:end] in origin:
            return origin[path[:end]]
    return path


@dataclass
class _Located:
    path: Path
    union_site: int | None
    error: ErrorDetails


def _messages(
    errors: list[ErrorDetails], data: object, model: type[BaseModel] | None
) -> list[tuple[Path, str]]:
    """(path, message) pairs, union failures reduced to their most useful member errors."""
    located = [_locate(error, data) for error in errors]
    by_site: dict[Path, list[_Located]] = defaultdict(list)
    out: list[tuple[Path, str]] = []
    for item in located:
        if item.union_site is None:
            out.append((item.path, _message(item.error, item.path, model)))
        else:
            by_site[item.path[: item.union_site]].append(item)
    for site, members in by_site.items():
        specific = [m for m in members if len(m.path) > len(site) or not _is_type_error(m.error)]
        if specific:
            out.extend((m.path, _message(m.error, m.path, model)) for m in specific)
        else:
            expected = list(dict.fromkeys(_expected(m.error) for m in members))
            out.append((site, f"expected {_either(expected)}, got {_describe(members[0].error)}"))
    return list(dict.fromkeys(out))


def _locate(error: ErrorDetails, data: object) -> _Located:
    """The data path of ``error``, its pydantic union tags and ``[key]`` markers removed."""
    path: list[Hashable] = []
    site: int | None = None
    node = data
    loc = error["loc"]
    for index, item in enumerate(loc):
        if _has_key(node, item):
            path.append(item)
            node = node[item]  # type: ignore[index]
        elif isinstance(node, list | tuple) and type(item) is int and 0 <= item < len(node):
            path.append(item)
            node = node[item]
        elif index == len(loc) - 1 and error["type"] == "missing":
            path.append(item)
        elif item != "[key]" and site is None:
            site = len(path)
    return _Located(tuple(path), site, error)


def _has_key(node: object, key: Hashable) -> bool:
    try:
        return isinstance(node, Mapping) and key in node
    except TypeError:
        return False


_TYPE_PHRASES = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def _is_type_error(error: ErrorDetails) -> bool:
    return error["type"] in _TYPE_PHRASES or error["type"] in ("literal_error", "enum")


def _expected(error: ErrorDetails) -> str:
    if error["type"] in ("literal_error", "enum"):
        return str(error.get("ctx", {}).get("expected", "an allowed value"))
    return _TYPE_PHRASES.get(error["type"], "a valid value")


def _either(options: list[str]) -> str:
    """``a or b``; ``a, b, or c`` when there are more, or when an option has an "or" itself."""
    if len(options) == 2 and not any(" or " in option for option in options):
        return f"{options[0]} or {options[1]}"
    return options[0] if len(options) == 1 else ", ".join(options[:-1]) + ", or " + options[-1]


def _describe(error: ErrorDetails) -> str:
    return brief(error.get("input"))


def brief(value: object) -> str:
    """A short account of a value the user gave, for messages.

    >>> brief("x" * 100)[-5:], brief({"a": 1}), brief(None)
    ('xx...', 'a mapping', 'nothing (null)')
    """
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple | set | frozenset):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 64:
        return "a very large integer"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(error: ErrorDetails, path: Path, model: type[BaseModel] | None) -> str:
    """A human message for one pydantic error."""
    kind, ctx = error["type"], error.get("ctx", {})
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return _unknown_field(path, model)
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if "[key]" in error["loc"] or kind == "invalid_key":
        return f"key {path[-1]!r} must be a string" if path else "keys must be strings"
    if kind in _TYPE_PHRASES or kind in ("literal_error", "enum"):
        hint = ""
        if kind == "string_type" and isinstance(error.get("input"), int | float):
            hint = f' (quote it: "{_describe(error)}")'
        return f"expected {_expected(error)}, got {_describe(error)}{hint}"
    bounds = {
        "greater_than_equal": ("ge", "must be at least"),
        "greater_than": ("gt", "must be greater than"),
        "less_than_equal": ("le", "must be at most"),
        "less_than": ("lt", "must be less than"),
    }
    if kind in bounds:
        key, words = bounds[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"{words} {bound}, got {_describe(error)}"
    if kind == "finite_number":
        return f"must be a finite number, got {_describe(error)}"
    if kind == "too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    return error["msg"]


def _unknown_field(path: Path, model: type[BaseModel] | None) -> str:
    name = path[-1] if path else "?"
    allowed = _fields_at(model, path[:-1]) if model is not None else None
    if not allowed:
        return f"unknown field {name!r}"
    close = difflib.get_close_matches(str(name), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown field {name!r} ({hint}allowed: {', '.join(allowed)})"


def _fields_at(model: type[BaseModel], path: Path) -> list[str] | None:
    """The field names of the model found at ``path`` below ``model``, if any."""
    kind: Any = model
    for item in path:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if not isinstance(item, str) or item not in kind.model_fields:
                return None
            kind = kind.model_fields[item].annotation
        elif get_origin(kind) in (dict, Mapping):
            kind = get_args(kind)[1]
        elif get_origin(kind) in (list, Sequence):
            kind = get_args(kind)[0]
        else:
            return None
    kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return None


def _unwrap(kind: Any) -> Any:
    """The model, dict or list inside Annotated, Optional and unions."""
    while True:
        origin = get_origin(kind)
        if origin is Annotated:
            kind = get_args(kind)[0]
        elif origin is Union or origin is UnionType:
            members = [arg for arg in get_args(kind) if arg is not type(None)]
            models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
            kind = models[0] if models else members[0]
        else:
            return kind
