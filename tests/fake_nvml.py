"""A fake of the ``pynvml`` module, for tests on machines without an NVIDIA GPU.

A fake only because no real GPU (nor NVML driver) runs here: it answers the few NVML calls
trainfleet makes (``backends/local/nvml_read.py``) as the real module does, errors
included (``NVMLError`` with NVML's codes: a lost GPU raises ``NVML_ERROR_GPU_IS_LOST`` on
every query), and its event sets (``report_xid`` is the driver reporting an Xid).
``scripts/gpu-check.sh`` is what runs the real thing on a GPU machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypeXidCriticalError = 0x8
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_FEATURE_ENABLED = 1


class NVMLError(Exception):
    """As pynvml's: ``value`` is NVML's return code."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    """One GPU's answers."""

    name: str = "NVIDIA H200"
    total: int = 141 << 30
    used: int = 2 << 30
    utilisation: int = 37
    temperature: int = 41
    ecc_uncorrected: int = 0
    pages_pending: bool = False
    lost: bool = False
    ecc_supported: bool = True
    events_supported: bool = True


@dataclass
class FakeEventSet:
    """An event set: the GPUs registered on it, and the events waiting in it."""

    gpus: set[int] = field(default_factory=set)
    waiting: list[SimpleNamespace] = field(default_factory=list)


@dataclass
class FakeNvml:
    """The module: its GPUs by index; ``inits`` counts nvmlInit calls not shut down."""

    gpus: list[FakeGpu] = field(default_factory=list)
    inits: int = 0
    sets: list[FakeEventSet] = field(default_factory=list)

    NVMLError = NVMLError
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= len(self.gpus):
            raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        return index

    def _gpu(self, handle: int) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu(handle)
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._gpu(handle).utilisation, memory=0)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self._gpu(handle).temperature

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        gpu = self._gpu(handle)
        if not gpu.ecc_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.ecc_uncorrected if kind == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return NVML_FEATURE_ENABLED if self._gpu(handle).pages_pending else 0

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        self._gpu(handle)
        return handle

    def nvmlEventSetCreate(self) -> FakeEventSet:
        events = FakeEventSet()
        self.sets.append(events)
        return events

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, events: FakeEventSet) -> None:
        if not self._gpu(handle).events_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        assert types & nvmlEventTypeXidCriticalError
        events.gpus.add(handle)

    def nvmlEventSetWait_v2(self, events: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        if not events.waiting:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        return events.waiting.pop(0)

    def nvmlEventSetFree(self, events: FakeEventSet) -> None:
        self.sets.remove(events)

    def report_xid(self, index: int, xid: int) -> None:
        """The driver reports Xid ``xid`` of GPU ``index`` to every set it is registered on."""
        for events in self.sets:
            if index in events.gpus:
                event = SimpleNamespace(
                    device=index, eventType=nvmlEventTypeXidCriticalError, eventData=xid
                )
                events.waiting.append(event)


def fake_nvml(count: int = 2) -> FakeNvml:
    """A fake module with ``count`` healthy H200s."""
    return FakeNvml([FakeGpu() for _ in range(count)])
