"""Finding the lines of a task's log that hold a text: read in chunks from an offset, so
a search of a log of any size holds a few MiB and answers within a scan budget, with where
to go on from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20
LONGEST_LINE = 4 << 20
"""A line longer than this is searched in pieces of this size (a match across two pieces
is missed)."""
SHOWN = 2000
"""Characters of a found line answered, around the match."""
SCAN_BUDGET = 256 << 20
"""Bytes one search reads at most; then it answers with what it found and where it got."""


@dataclass(frozen=True)
class Hit:
    """A line holding the text: its byte offset in the log, and (part of) its text."""

    offset: int
    line: str


@dataclass(frozen=True)
class Found:
    """What one search found, and the offset to search on from (None: the log's end)."""

    hits: list[Hit]
    next: int | None


def search(
    path: Path, text: str, start: int = 0, limit: int = 100, budget: int = SCAN_BUDGET
) -> Found:
    """The first ``limit`` lines at or after byte ``start`` of ``path`` that hold ``text``
    (ASCII letters in either case)."""
    needle = text.lower().encode()
    hits: list[Hit] = []
    try:
        log = path.open("rb")
    except FileNotFoundError:
        return Found([], None)
    with log:
        log.seek(start)
        offset, buffer, scanned = start, b"", 0
        while True:
            chunk = log.read(CHUNK)
            buffer += chunk
            cut = buffer.rfind(b"\n") + 1 if chunk else len(buffer)
            if chunk and cut == 0:
                if len(buffer) < LONGEST_LINE:
                    continue  # within one long line: read on
                cut = len(buffer)
            block, buffer = buffer[:cut], buffer[cut:]
            after = _lines_with(block, offset, needle, limit - len(hits), hits)
            if len(hits) >= limit:
                return Found(hits, after)
            offset += cut
            scanned += cut
            if not chunk:
                return Found(hits, None)
            if scanned >= budget:
                return Found(hits, offset)


def _lines_with(block: bytes, base: int, needle: bytes, room: int, hits: list[Hit]) -> int:
    """Add to ``hits`` (at most ``room``) the lines of ``block`` (at ``base`` in the log)
    holding ``needle``; the offset after the last line added."""
    lowered = block.lower()
    at, after = 0, base
    while room > 0:
        found = lowered.find(needle, at)
        if found < 0:
            break
        begin = block.rfind(b"\n", 0, found) + 1
        end = block.find(b"\n", found)
        end = len(block) if end < 0 else end
        around = max(begin, found - SHOWN // 2)
        text = block[around : min(end, around + SHOWN)].decode("utf-8", "replace")
        hits.append(Hit(base + begin, text))
        room -= 1
        at = end + 1
        after = base + at
    return after
