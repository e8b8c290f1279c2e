"""Critical Xids from NVML's event sets (a fake NVML: no GPU runs here; the fake keeps
NVML's codes and calls)."""

from __future__ import annotations

from fake_nvml import NVMLError, fake_nvml

from trainfleet.backends.local.nvml_events import XidEvents


def test_a_critical_xid_is_a_problem_of_its_gpu_and_a_programs_own_is_not() -> None:
    nvml = fake_nvml(2)
    events = XidEvents(nvml, [0, 1])
    assert events.drain() == {}
    nvml.report_xid(1, 79)
    nvml.report_xid(1, 79)  # the same problem, once
    nvml.report_xid(0, 31)  # an MMU fault: the program's, which any member can cause
    nvml.report_xid(0, 13)
    assert events.drain() == {1: ["xid 79: fell off the bus (NVML event)"]}
    assert events.drain() == {}, "each event is told once"
    nvml.report_xid(0, 48)
    assert events.drain() == {0: ["xid 48: double-bit ECC error (NVML event)"]}
    assert nvml.inits == 1 and len(nvml.sets) == 1, "one set, kept for the process's life"


def test_gpus_without_events_are_left_out_and_none_leaves_nothing_open() -> None:
    nvml = fake_nvml(2)
    nvml.gpus[0].events_supported = False
    events = XidEvents(nvml, [0, 1])
    events.drain()
    nvml.report_xid(1, 94)
    assert events.drain() == {1: ["xid 94: contained ECC error (NVML event)"]}

    nvml = fake_nvml(1)
    nvml.gpus[0].events_supported = False
    events = XidEvents(nvml, [0])
    assert events.drain() == {} and events.drain() == {}
    assert (nvml.inits, nvml.sets) == (0, []), "NVML shut down, the set freed"


def test_an_event_set_that_fails_is_made_again_at_the_next_drain() -> None:
    nvml = fake_nvml(1)
    events = XidEvents(nvml, [0])
    events.drain()
    broken = nvml.sets[0]

    def fails(*_: object) -> object:
        raise NVMLError(999)  # NVML_ERROR_UNKNOWN

    nvml.nvmlEventSetWait_v2 = fails  # type: ignore[method-assign]
    assert events.drain() == {}
    assert broken not in nvml.sets and nvml.inits == 0
    del nvml.nvmlEventSetWait_v2
    events.drain()
    nvml.report_xid(0, 79)
    assert events.drain() == {0: ["xid 79: fell off the bus (NVML event)"]}
