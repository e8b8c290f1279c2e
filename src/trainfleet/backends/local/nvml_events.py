"""Critical Xid errors NVML reports of this machine's GPUs, as problems of each GPU.

An Xid is a one-off event, not a state that a later reading still shows: whoever reads
them must keep them (``datadir.gpu_marks.note``) until an operator clears the GPU. Xids that
a program causes by itself (an illegal address, a bad instruction, a context reset it asked
for, as NVIDIA's Kubernetes device plugin counts them) are left out: any member could raise
them at will, and a GPU they leave behind is well.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from typing import Any

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Xids of a program's own faults (graphics engine exception, MMU fault, a context stopped or
reset, video decoder exception, context switch timeout): not the GPU's."""
XID_CRITICAL = 0x8
"""``nvmlEventTypeXidCriticalError``."""
DOUBLE_BIT_ECC = 0x2
"""``nvmlEventTypeDoubleBitEccError``."""
TIMEOUT = 10
"""``NVML_ERROR_TIMEOUT``: no event was waiting."""
MOST_AT_ONCE = 1000
"""Events taken in one drain, at most (the rest wait for the next)."""
NAMES = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "fell off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def xid_problem(xid: int) -> str:
    """How a GPU's problem reads after Xid ``xid``.

    >>> xid_problem(79)
    'xid 79: fell off the bus (NVML event)'
    """
    return f"xid {xid}: {NAMES.get(xid, 'critical error')} (NVML event)"


class XidEvents:
    """An NVML event set on ``indices``, made at the first ``drain`` and kept (with NVML
    started) for the process's life; ``drain`` takes what arrived since the last one."""

    def __init__(self, nvml: Any, indices: list[int]) -> None:
        self.nvml, self.indices = nvml, indices
        self._lock = threading.Lock()
        self._set: Any = None
        self._unable = False

    def drain(self) -> dict[int, list[str]]:
        """The problems of each GPU whose driver reported a critical Xid (or a double-bit
        ECC error) since the last drain; {} where NVML cannot tell events."""
        with self._lock:
            if self._set is None and not self._unable:
                self._open()
            if self._set is None:
                return {}
            found: dict[int, list[str]] = {}
            for _ in range(MOST_AT_ONCE):
                try:
                    event = self.nvml.nvmlEventSetWait_v2(self._set, 0)
                except Exception as error:
                    if getattr(error, "value", None) != TIMEOUT:
                        self._close()  # a lost GPU, a driver gone: the next drain starts over
                    break
                if (problem := self._problem(event)) is not None:
                    index, text = problem
                    if text not in found.setdefault(index, []):
                        found[index].append(text)
            return found

    def _problem(self, event: Any) -> tuple[int, str] | None:
        try:
            index = int(self.nvml.nvmlDeviceGetIndex(event.device))
        except Exception:
            return None
        if event.eventType & DOUBLE_BIT_ECC:
            return index, xid_problem(48)
        xid = int(event.eventData)
        return None if xid in APPLICATION_XIDS else (index, xid_problem(xid))

    def _open(self) -> None:
        try:
            self.nvml.nvmlInit()
        except Exception:
            self._unable = True
            return
        try:
            events = self.nvml.nvmlEventSetCreate()
        except Exception:
            self._unable = True
            with suppress(Exception):
                self.nvml.nvmlShutdown()
            return
        registered = 0
        for index in self.indices:
            with suppress(Exception):  # not supported on this GPU (some VMs): no events
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                self.nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL | DOUBLE_BIT_ECC, events)
                registered += 1
        self._set = events
        if not registered:
            self._close()
            self._unable = True

    def _close(self) -> None:
        with suppress(Exception):
            self.nvml.nvmlEventSetFree(self._set)
        with suppress(Exception):
            self.nvml.nvmlShutdown()
        self._set = None
