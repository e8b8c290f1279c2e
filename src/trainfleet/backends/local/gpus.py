"""The GPUs of this machine: from configuration when given, else from NVML."""

from __future__ import annotations

import os

from trainfleet.domain.errors import Misconfigured


class GpuConfigError(Misconfigured, ValueError):
    """TRAINFLEET_GPUS is set but is not a list of GPU indices."""


def gpu_inventory(configured: str | None = None) -> list[int]:
    """Host indices of the GPUs tasks may use.

    ``configured`` (``TRAINFLEET_GPUS``) overrides discovery: a comma-separated list of
    indices (``0,2,3``), or empty for none. Otherwise NVML counts the devices; no driver
    means no GPUs.
    """
    if configured is not None:
        return _parse(configured)
    return _nvml_inventory()


def _parse(configured: str) -> list[int]:
    words = [word.strip() for word in configured.split(",") if word.strip()]
    if not all(word.isdigit() for word in words):
        raise GpuConfigError(
            f"TRAINFLEET_GPUS={configured!r}: expected comma-separated GPU indices such as 0,1,2"
        )
    return sorted({int(word) for word in words})


NVIDIA_DRIVER = ("/dev/nvidiactl", "/proc/driver/nvidia")
"""Where an NVIDIA driver shows (one is enough); with neither, NVML could find no GPU."""


def _nvml_inventory() -> list[int]:
    if not any(os.path.exists(path) for path in NVIDIA_DRIVER):
        return []  # without importing pynvml: 17 ms of every command on a machine with none
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML library or no driver: a machine without GPUs
        return []
    try:
        return list(range(pynvml.nvmlDeviceGetCount()))
    finally:
        pynvml.nvmlShutdown()
