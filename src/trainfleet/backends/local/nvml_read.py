"""Each GPU of this machine as NVML reports it now: model, memory, use, temperature, and
what is wrong with it (lost, uncorrected ECC errors, memory pages waiting to be retired).

NVML (``pynvml``) is handed in as a module, so that tests without a GPU hand in a fake.
"""

from __future__ import annotations

import os
from contextlib import suppress
from types import ModuleType
from typing import Any

from trainfleet.backends.gpu_readings import GpuReading

GPU_IS_LOST = 15
"""``NVML_ERROR_GPU_IS_LOST``: the GPU fell off the bus or stopped answering."""
LOST = "lost: NVML says the GPU is gone (fell off the bus or stopped answering)"


def read_gpus(nvml: ModuleType | Any | None, indices: list[int]) -> list[GpuReading]:
    """A reading of each GPU of ``indices``; without NVML (None, or it cannot start),
    readings that tell nothing but the index."""
    if nvml is None:
        return [GpuReading(index) for index in indices]
    try:
        nvml.nvmlInit()
    except Exception:  # no library or no driver: nothing to tell
        return [GpuReading(index) for index in indices]
    try:
        return [_read(nvml, index) for index in indices]
    finally:
        with suppress(Exception):
            nvml.nvmlShutdown()


def _read(nvml: Any, index: int) -> GpuReading:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    except Exception as error:
        problems = (LOST,) if _lost(nvml, error) else (f"unreadable: {error}",)
        return GpuReading(index, problems=problems)
    name = _field(nvml, lambda: nvml.nvmlDeviceGetName(handle))
    utilisation = _field(nvml, lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
    sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    temperature = _field(nvml, lambda: int(nvml.nvmlDeviceGetTemperature(handle, sensor)))
    return GpuReading(
        index,
        model=name.decode() if isinstance(name, bytes) else str(name or ""),
        memory_total=int(memory.total),
        memory_used=int(memory.used),
        utilisation=utilisation,
        temperature=temperature,
        problems=_problems(nvml, handle),
    )


def _problems(nvml: Any, handle: object) -> tuple[str, ...]:
    """Lost, uncorrected ECC errors since the driver loaded, pages waiting to be retired."""
    problems: list[str] = []
    uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    volatile = getattr(nvml, "NVML_VOLATILE_ECC", 0)
    try:
        ecc = int(nvml.nvmlDeviceGetTotalEccErrors(handle, uncorrected, volatile))
    except Exception as error:  # not supported (no ECC) is no problem; lost is
        ecc = 0
        if _lost(nvml, error):
            return (LOST,)
    if ecc > 0:
        problems.append(f"ecc: {ecc} uncorrected memory error(s) since the driver loaded")
    pending = _field(nvml, lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    if pending:
        problems.append("ecc: memory pages wait to be retired (the GPU needs a reset)")
    return tuple(problems)


def _field(nvml: Any, read: Any) -> Any:
    """What ``read()`` returns; None where NVML cannot tell it (not supported here)."""
    try:
        return read()
    except Exception:
        return None


def _lost(nvml: Any, error: Exception) -> bool:
    code = getattr(nvml, "NVML_ERROR_GPU_IS_LOST", GPU_IS_LOST)
    return getattr(error, "value", None) == code


def load_nvml() -> ModuleType | None:
    """The ``pynvml`` module where a driver shows; None on a machine without one."""
    from trainfleet.backends.local.gpus import NVIDIA_DRIVER

    if not any(os.path.exists(path) for path in NVIDIA_DRIVER):
        return None
    try:
        import pynvml
    except ImportError:
        return None
    module: ModuleType = pynvml
    return module
