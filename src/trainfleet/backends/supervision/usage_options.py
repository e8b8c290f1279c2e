"""How a backend asks a task's shim to sample what the task uses (``shim.Sampling``): the
interval setting, and the shim's options for one task.

The history goes beside the task's log (``datadir.usage.usage_path``). NVML is handed to
the shim as the file of the ``pynvml`` module (the shim runs without site-packages), and
only for a task given GPUs.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from trainfleet.datadir.usage import usage_path
from trainfleet.domain.errors import Misconfigured

USAGE_INTERVAL = 5.0
"""Seconds between two samples of a task, by default."""
USAGE_INTERVAL_VARIABLE = "TRAINFLEET_USAGE_INTERVAL"


class UsageIntervalError(Misconfigured, ValueError):
    """TRAINFLEET_USAGE_INTERVAL (or ``--usage-interval``) is not a number of seconds."""


def usage_interval_setting(value: str | None, source: str = USAGE_INTERVAL_VARIABLE) -> float:
    """Seconds in ``value`` (0: no sampling), USAGE_INTERVAL when None or empty;
    UsageIntervalError naming ``source``."""
    if value is None or not value.strip():
        return USAGE_INTERVAL
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not (seconds == 0 or 0.1 <= seconds <= 3600):
        raise UsageIntervalError(
            f"{source}={value!r}: expected seconds between two samples of a task's resource "
            "use, from 0.1 to 3600 (0: none)"
        )
    return seconds


@functools.cache
def nvml_file() -> str | None:
    """Where the ``pynvml`` module is (found, not imported); None where it is missing."""
    try:
        spec = importlib.util.find_spec("pynvml")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin else None


def shim_options(log: Path, every: float, gpus: Sequence[int] = ()) -> list[str]:
    """The options that make a shim sample its task every ``every`` seconds into the
    history beside ``log`` ([] for 0: no sampling), with NVML for the host GPUs ``gpus``."""
    if every <= 0:
        return []
    options = ["--usage", str(usage_path(log)), "--usage-every", str(every)]
    nvml = nvml_file() if gpus else None
    if nvml is not None:
        options += ["--gpus", ",".join(str(gpu) for gpu in gpus), "--nvml", nvml]
    return options
