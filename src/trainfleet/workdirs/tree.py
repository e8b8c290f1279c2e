"""A folder's files as one digest: what is sent, and how both sides name it.

The digest covers each regular file's path, executable bit and content, and each
symbolic link's path and target, in path order; folders count only through what they
hold (an empty folder is not sent). The same tree gives the same digest on both sides.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

CHUNK = 1 << 20


def walk(top: Path) -> Iterator[str]:
    """Every regular file and symbolic link under ``top``, as ``/``-separated paths."""
    for folder, dirs, files in os.walk(top):
        relative = os.path.relpath(folder, top)
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
            yield name if relative == "." else f"{relative}/{name}".replace(os.sep, "/")


def digest(top: Path, paths: Iterable[str], extra: Mapping[str, bytes] | None = None) -> str:
    """The tree digest of ``paths`` under ``top`` (sha256, hex), with ``extra`` files (path:
    content; not executable) added, in place of any of ``paths`` of the same name."""
    extra = extra or {}
    tree = hashlib.sha256()
    for path in sorted({*paths, *extra}):
        full = top / path
        if path in extra:
            content, executable = hashlib.sha256(extra[path]), "-"
        elif full.is_symlink():
            tree.update(f"L {os.readlink(full)}\t{path}\n".encode())
            continue
        else:
            content = hashlib.sha256()
            with open(full, "rb") as handle:
                while chunk := handle.read(CHUNK):
                    content.update(chunk)
            executable = "x" if os.access(full, os.X_OK) else "-"
        tree.update(f"F {executable} {content.hexdigest()}\t{path}\n".encode())
    return tree.hexdigest()
