"""Five jobs for crash tests, each with a different fate while nothing watches them.

Their tasks (tests/programs/attempt.py) journal each start and end and wait for a file, so
a test decides when each ends and can count how often each attempt ran.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

PROGRAMS = Path(__file__).parent / "programs"
ROLES = {
    "ends-ok": {"worker": "python attempt.py journal-1 go-1 0"},
    "ends-bad": {"worker": "python attempt.py journal-2 go-2 3"},
    "killed": {"worker": "python attempt.py journal-3 go-3 0"},
    "adopted": {"worker": "python attempt.py journal-4 go-4 0"},
    "with-ps": {"chief": "python attempt.py journal-5 go-5 0", "ps": "python serve.py"},
}
EXPECTED_STARTS = {1: 1, 2: 3, 3: 2, 4: 1, 5: 1}
"""Attempts per journal: ends-bad is retried twice (max_restarts), killed once."""


def write_jobs(folder: Path) -> list[Path]:
    """The five job files (JSON), with their programs copied beside them."""
    shutil.copy(PROGRAMS / "attempt.py", folder / "attempt.py")
    shutil.copy(PROGRAMS / "serve.py", folder / "serve.py")
    paths = []
    for name, commands in ROLES.items():
        job = {
            "name": name,
            "grace_period": 2,
            "restart": {"policy": "on-failure", "max_restarts": 2, "backoff": {"initial": 0.1}},
            "roles": {role: {"command": command} for role, command in commands.items()},
        }
        path = folder / f"{name}.json"
        path.write_text(json.dumps(job))
        paths.append(path)
    return paths


def starts(folder: Path) -> dict[int, int]:
    """How many attempts each journal saw start."""
    return {
        number: (folder / f"journal-{number}").read_text().count("start ")
        for number in EXPECTED_STARTS
    }
