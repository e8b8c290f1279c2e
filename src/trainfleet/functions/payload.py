"""The call as sent: a JSON header line (the sender's Python) and ``(fn, args, kwargs)``
pickled with cloudpickle, by value for ``__main__`` and the caller's own modules (those in
the folder sent), so that the tasks run the code the caller has now."""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle

from trainfleet.domain.errors import BadInput
from trainfleet.spec.functions import this_python


class Unpicklable(BadInput):
    """The function, something it uses or an argument cannot be sent; the message names it."""


def dumps_call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], folder: Path
) -> bytes:
    """The payload of ``fn(*args, **kwargs)`` sent with ``folder``; Unpicklable naming what
    cannot be pickled."""
    if not callable(fn):
        raise Unpicklable(f"fn: {fn!r} is not callable")
    header = json.dumps({"python": this_python(), "cloudpickle": cloudpickle.__version__})
    with _by_value(_local_modules(folder)):
        try:
            body: bytes = cloudpickle.dumps((fn, tuple(args), dict(kwargs)))
        except Exception as error:  # pickling fails with any kind of error
            whole = f"cannot send {getattr(fn, '__qualname__', repr(fn))}: {_said(error)}"
            raise Unpicklable(_culprit(fn, args, kwargs) or whole) from None
    return header.encode() + b"\n" + body


def _local_modules(folder: Path) -> list[ModuleType]:
    """The imported modules whose files are in ``folder`` (not an environment in it)."""
    tops = tuple({os.path.join(os.path.abspath(folder), ""), os.path.join(folder.resolve(), "")})
    found = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or "site-packages" in file or "dist-packages" in file:
            continue
        if os.path.abspath(file).startswith(tops):  # no file system call per module
            found.append(module)
    return found


@contextmanager
def _by_value(modules: list[ModuleType]) -> Iterator[None]:
    registered = []
    try:
        for module in modules:
            try:
                cloudpickle.register_pickle_by_value(module)
                registered.append(module)
            except ValueError:  # not importable by its name (a script run by path)
                continue
        yield
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)


def _culprit(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """What in the call cannot be pickled, said with its name; "" where none alone fails."""
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    candidates: list[tuple[str, object]] = []
    if inspect.isfunction(fn):
        seen = inspect.getclosurevars(fn)
        candidates += [(f"{key!r}, captured by {name}", v) for key, v in seen.nonlocals.items()]
        candidates += [(f"global {key!r}, used by {name}", v) for key, v in seen.globals.items()]
    candidates += [(f"argument {number}", value) for number, value in enumerate(args)]
    candidates += [(f"argument {key!r}", value) for key, value in kwargs.items()]
    for label, value in candidates:
        try:
            cloudpickle.dumps(value)
        except Exception as error:
            return f"cannot send {label}: a {type(value).__qualname__}: {_said(error)}"
    return ""


def _said(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
