"""What an operator cleared of each GPU's problems, kept in the data directory
(``gpus.json``) so that every trainfleet process of it (a server, embedded runs) agrees.

A GPU whose driver reports a problem is unhealthy until the problem goes away or an
operator clears it (``trainfleet gpus clear``); clearing records the problems seen then,
which are ignored from then on. A problem that goes away is forgotten, so that it counts
again when it comes back. A problem the driver reports once (a critical Xid) is noted here
(``gpu-events.json``) and lasts until an operator clears the GPU.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

FILE = "gpus.json"
NOTED = "gpu-events.json"
"""Problems the driver reported once (critical Xids), kept until an operator clears them."""
LOCK = "gpus.lock"
MOST_NOTED = 20
"""Problems kept per GPU, the latest (a GPU that reports Xids in a loop fills no disk)."""


@dataclass(frozen=True)
class Cleared:
    """The problems of one GPU an operator cleared, when, and who."""

    problems: tuple[str, ...]
    at: float
    by: str = ""


Marks = dict[int, Cleared]


def read(root: Path) -> Marks:
    """The cleared problems of each GPU ({} where none was ever cleared, or the file is
    unreadable: nothing is ignored then)."""
    try:
        data = json.loads((root / FILE).read_text())
        return {
            int(index): Cleared(
                tuple(str(p) for p in mark["problems"]), float(mark["at"]), str(mark.get("by", ""))
            )
            for index, mark in data.items()
        }
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def change(root: Path, changed: Callable[[Marks], Marks]) -> Marks:
    """Replace the marks by ``changed(marks)``, under a lock every process takes; the new
    marks."""
    with _locked(root):
        before = read(root)
        after = changed(dict(before))
        if after != before:
            _write(root, FILE, {str(i): asdict(m) for i, m in sorted(after.items())})
        return after


def noted(root: Path) -> dict[int, tuple[str, ...]]:
    """The one-off problems the driver reported of each GPU that are not cleared yet ({}
    where none, or the file is unreadable)."""
    try:
        data = json.loads((root / NOTED).read_text())
        return {int(index): tuple(str(p) for p in problems) for index, problems in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def note(root: Path, found: dict[int, tuple[str, ...]]) -> None:
    """Keep the problems just reported of each GPU in ``found`` (each once)."""
    with _locked(root):
        kept = noted(root)
        for index, problems in found.items():
            known = kept.get(index, ())
            kept[index] = (*known, *(p for p in problems if p not in known))[-MOST_NOTED:]
        _write(root, NOTED, {str(i): list(p) for i, p in sorted(kept.items())})


def forget(root: Path, index: int) -> None:
    """An operator cleared GPU ``index``: its one-off problems are gone."""
    with _locked(root):
        kept = noted(root)
        if kept.pop(index, None) is not None:
            _write(root, NOTED, {str(i): list(p) for i, p in sorted(kept.items())})


def _write(root: Path, name: str, data: object) -> None:
    """Written whole to a new file, then renamed: a reader sees the old or the new."""
    temporary = root / f".{name}.{os.getpid()}"
    temporary.write_text(json.dumps(data, indent=1))
    os.replace(temporary, root / name)


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
