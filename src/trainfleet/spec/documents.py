"""Read a YAML or JSON document into plain data and the line of every key in it.

The parser is PyYAML's safe loader, with what a job file must not do refused with its line:
duplicate keys, recursive aliases, alias bombs, huge integers, explicit tags that defy their
value. What the data means is for the models (``loading``, ``kubeflow``, ``trainjob``).

A document is read with libyaml's parser where PyYAML has it (a job file's whole check
takes a quarter of the time: ``benchmarks/spec_read.py``); one it cannot read is read again
by PyYAML's own, whose messages are the ones users see (libyaml words some differently).
"""

from __future__ import annotations

import os
import re
from collections.abc import Hashable
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from trainfleet.spec.errors import Path, Problem, SourceMap, SpecError, format_path

MAX_VALUES = 100_000
"""Most values a document may hold once its aliases are expanded (stops alias bombs)."""

MAX_INT_BITS = 64
"""Larger integers (hex, octal or base 60 in YAML) are refused: no job needs them."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_SURROGATE = re.compile("[\ud800-\udfff]")
_NO_KEY: Final = object()


def read_job_text(path: str | os.PathLike[str], shown: str | None = None) -> str:
    """The text of the job file at ``path`` (UTF-8); raises SpecError naming the file
    (as ``shown``, where the path itself is not to be told: a server's)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise SpecError.one("no such file", file=shown or name) from None
    except IsADirectoryError:
        raise SpecError.one("is a directory, not a job file", file=shown or name) from None
    except PermissionError:
        raise SpecError.one("permission denied", file=shown or name) from None
    except OSError as error:
        why = f"cannot read: {error.strerror or error}"
        raise SpecError.one(why, file=shown or name) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise SpecError.one("is not UTF-8 text", file=shown or name, line=line) from None


Document = tuple[dict[Hashable, Any], SourceMap]
"""A document's top-level mapping and the line of every key in it."""


def parse_document(text: str, filename: str = "<input>") -> Document:
    """The top-level mapping of a YAML/JSON document and the line of every key in it."""
    documents = parse_documents(text, filename)
    if len(documents) > 1:
        line = documents[1][1].lines.get((), None)
        message = f"the file holds {len(documents)} documents (--- between them): expected one"
        raise SpecError.one(message, file=filename, line=line)
    return documents[0]


def parse_documents(text: str, filename: str = "<input>") -> list[Document]:
    """Each document of a YAML stream (``---`` between them, as kubectl reads a file),
    empty ones left out; at least one."""
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


def _parse(text: str, filename: str) -> list[Document]:
    if _FastLoader is not None:
        try:
            return _parse_with(_FastLoader, text, filename)
        except Exception:  # read again below, to tell the problem in PyYAML's own words
            pass
    return _parse_with(_Loader, text, filename)


def _parse_with(loader_class: type[_Checks], text: str, filename: str) -> list[Document]:
    loader: Any = None
    documents = []
    try:
        loader = loader_class(text)  # type: ignore[call-arg]
        values = 0
        while loader.check_node():
            root = loader.get_node()
            if root is None or (isinstance(root, ScalarNode) and not root.value):
                continue  # an empty document, as kubectl skips
            index = _Index(loader, filename)
            values += index.visit(root, ())
            if values > MAX_VALUES:
                message = (
                    f"the document holds more than {MAX_VALUES} values once aliases are expanded"
                )
                raise SpecError.one(message, file=filename)
            if index.problems:
                raise SpecError(index.problems)
            data = loader.construct_document(root)
            if not isinstance(data, dict):
                kind = _kind_of(data)
                message = f"expected a mapping (name: ..., roles: ...) at the top level, got {kind}"
                raise SpecError.one(message, file=filename, line=root.start_mark.line + 1)
            documents.append((data, SourceMap(filename, index.lines)))
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
    if not documents:
        raise SpecError.one("the file is empty: expected a job with name and roles", file=filename)
    return documents


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


class _Checks(yaml.constructor.SafeConstructor):
    """What both loaders add to the safe constructor: bad explicit tags (``!!int abc``)
    and huge integers reported with their line."""

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


class _Loader(_Checks, yaml.SafeLoader):
    """PyYAML's own parser, in Python: its messages are the ones users see."""


_FastLoader: type[_Checks] | None = None
if getattr(yaml, "__with_libyaml__", False):

    class _CLoader(_Checks, yaml.CSafeLoader):
        """libyaml's parser, with the same constructor."""

    _FastLoader = _CLoader


class _Index:
    """Walks the node tree once: the line of every key path, duplicate keys, recursion."""

    def __init__(self, loader: _Checks, filename: str) -> None:
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
