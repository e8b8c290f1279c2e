"""The server's knobs, with the defaults ``trainfleet server`` uses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

API_PREFIX = "/api/v1"


@dataclass(frozen=True)
class Settings:
    """How one server answers: where jobs run by default, how big and how live."""

    workdir: Path
    """Where a job runs when its submission names no ``workdir``."""
    max_body: int = 1 << 20
    """Largest job text accepted, in bytes (413 beyond)."""
    poll_interval: float = 0.1
    """Seconds between two looks at a followed log or event list."""
