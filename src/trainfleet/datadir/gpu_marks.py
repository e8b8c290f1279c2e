"""What an operator cleared of each GPU's problems, kept in the data directory
(``gpus.json``) so that every trainfleet process of it (a server, embedded runs) agrees.

A GPU whose driver reports a problem is unhealthy until the problem goes away or an
operator clears it (``trainfleet gpus clear``); clearing records the problems seen then,
which are ignored from then on. A problem that goes away is forgotten, so that it counts
again when it comes back.
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
LOCK = "gpus.lock"


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
    marks. Written whole to a new file, then renamed: a reader sees the old or the new."""
    with _locked(root):
        before = read(root)
        after = changed(dict(before))
        if after != before:
            text = json.dumps({str(i): asdict(m) for i, m in sorted(after.items())}, indent=1)
            temporary = root / f".{FILE}.{os.getpid()}"
            temporary.write_text(text)
            os.replace(temporary, root / FILE)
        return after


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
