"""A job's outputs: the files its tasks leave in its output folder (``DataDir.output_dir``,
``$TRAINFLEET_OUTPUT_DIR``), read back by the user through every face.

The folder is the tasks' to write, so it holds whatever a hostile member's code put there,
and the server reading it may run as root. An output is a regular file directly in the
folder whose name is ``OUTPUT_NAME``'s; a link (to ``/etc/shadow``), a FIFO, a device, a
folder or any other name is no output: not listed, never opened nor followed
(``files.plain_files``, ``files.open_inside``). One is read up to ``MAX_OUTPUT`` bytes.
"""

from __future__ import annotations

import heapq
import os
from pathlib import Path
from typing import BinaryIO

from trainfleet.datadir.files import LinkRefused, open_inside, plain_files
from trainfleet.datadir.layout import MAX_OUTPUT, OUTPUT_NAME
from trainfleet.domain.errors import BadInput, Conflict, NotFound
from trainfleet.domain.records import OutputFile

__all__ = ["MAX_LISTED", "OutputFile", "list_outputs", "open_output", "read_output"]

MAX_LISTED = 1000
"""The most outputs listed (the first by name): the folder may hold any number of files."""


def list_outputs(folder: Path) -> list[OutputFile]:
    """The outputs in ``folder``, by name; none where it is missing (a job not started)."""
    found = (
        OutputFile(name, info.st_size, info.st_mtime)
        for name, info in plain_files(folder)
        if OUTPUT_NAME.match(name)
    )
    return heapq.nsmallest(MAX_LISTED, found, key=lambda output: output.name)


def open_output(folder: Path, name: str) -> tuple[BinaryIO, int]:
    """The output ``name`` of ``folder``, opened, with its size: BadInput for a name that
    is not ``OUTPUT_NAME``'s or a file larger than ``MAX_OUTPUT``, NotFound (naming the
    outputs there) where it is no output, Conflict where it cannot be read."""
    if not OUTPUT_NAME.match(name):
        raise BadInput(
            f"{name!r} is no output's name: a file name of letters, digits, '.', '_' and '-'"
            " (at most 128, the first a letter or digit; no folder)"
        )
    try:
        descriptor = open_inside(folder, name)
    except (FileNotFoundError, NotADirectoryError, LinkRefused, ValueError):
        raise NotFound(f"no output {name!r} (outputs: {_names(folder)})") from None
    except OSError as error:  # a file its task made unreadable (chmod 0)
        raise Conflict(f"output {name!r} cannot be read: {error.strerror or error}") from None
    file = os.fdopen(descriptor, "rb")
    size = os.fstat(descriptor).st_size
    if size > MAX_OUTPUT:
        file.close()
        raise BadInput(
            f"output {name!r} holds {size} bytes: more than the {MAX_OUTPUT >> 20} MiB"
            " an output may be read up to"
        )
    return file, size


def _names(folder: Path, shown: int = 20) -> str:
    """The first ``shown`` outputs' names, for a message."""
    names = [output.name for output in list_outputs(folder)]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more if names else "none"


def read_output(folder: Path, name: str) -> bytes:
    """The bytes of the output ``name`` of ``folder`` (as ``open_output`` finds it)."""
    file, size = open_output(folder, name)
    with file:
        return file.read(size)
