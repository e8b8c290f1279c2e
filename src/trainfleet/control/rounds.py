"""The rounds of an elastic group, as its rendezvous store writes them, told as events.

The store (``programs/rendezvous_store.py``) appends one JSON object a line to a file in the
folder the job's tasks may write; so each line is read as what a task could have written:
bounded, never through a link, fields checked, members' names cut short.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainfleet.datadir.files import read_inside

MAX_HISTORY_BYTES = 1024 * 1024
SHOWN_MEMBERS = 8


@dataclass(frozen=True)
class Round:
    """One completed round: its number, its world size (agents) and where they run."""

    number: int
    world: int
    members: tuple[str, ...]

    def describe(self, max_world: int) -> str:
        """``world size 2 of 3 (round 4: node-a, node-b)``."""
        shown = ", ".join(self.members[:SHOWN_MEMBERS])
        hidden = self.world - SHOWN_MEMBERS
        more = f" and {hidden} more" if hidden > 0 else ""
        return f"world size {self.world} of {max_world} (round {self.number}: {shown}{more})"


def parse_round(line: str) -> Round | None:
    """A line of the history as a round; None where it is not one."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    number, world, members = entry.get("round"), entry.get("world"), entry.get("members")
    if not (isinstance(number, int) and isinstance(world, int) and isinstance(members, list)):
        return None
    names = tuple(str(name)[:64] for name in members if isinstance(name, str))
    if world != len(names) or not 0 < world <= 100_000 or number < 0:
        return None
    return Round(number, world, names)


class RoundFollower:
    """Reads rounds added to ``root/relative`` since the last read."""

    def __init__(self, root: Path, relative: str, seen: int = 0) -> None:
        """``seen``: lines already told (a restarted server counts its events)."""
        self.root, self.relative, self.seen = root, relative, seen

    def new_rounds(self) -> list[Round]:
        """The rounds of the lines not read yet (none while the file is missing, too
        large, or a link)."""
        try:
            text = read_inside(self.root, self.relative, MAX_HISTORY_BYTES).decode(errors="replace")
        except (OSError, ValueError):
            return []
        lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
        fresh, self.seen = lines[self.seen :], max(self.seen, len(lines))
        return [parsed for line in fresh if (parsed := parse_round(line)) is not None]
