"""Reading this machine's GPUs through NVML (``backends/local/nvml_read.py``)."""

from __future__ import annotations

from fake_nvml import FakeGpu, FakeNvml, fake_nvml

from trainfleet.backends.local.nvml_read import LOST, read_gpus
from trainfleet.backends.local.processes import LocalBackend


def test_a_healthy_gpu_is_read_whole() -> None:
    """A fake NVML (no GPU runs here): model, memory, use, temperature, no problem."""
    nvml = fake_nvml(2)
    (first, second) = read_gpus(nvml, [0, 1])
    assert first.index == 0 and second.index == 1
    assert first.model == "NVIDIA H200" and first.memory_total == 141 << 30
    assert first.memory_used == 2 << 30 and first.utilisation == 37.0
    assert first.temperature == 41 and first.problems == ()
    assert nvml.inits == 0, "NVML is shut down after each read"


def test_lost_ecc_and_pending_pages_are_problems() -> None:
    """A fake NVML (no GPU runs here): a lost GPU raises GPU_IS_LOST on every query; one
    with uncorrected ECC errors or pages waiting to be retired tells so."""
    nvml = FakeNvml(
        [
            FakeGpu(lost=True),
            FakeGpu(ecc_uncorrected=3),
            FakeGpu(pages_pending=True),
            FakeGpu(ecc_supported=False),
        ]
    )
    lost, ecc, pages, no_ecc = read_gpus(nvml, [0, 1, 2, 3])
    assert lost.problems == (LOST,) and lost.memory_total is None
    assert ecc.problems == ("ecc: 3 uncorrected memory error(s) since the driver loaded",)
    assert pages.problems == ("ecc: memory pages wait to be retired (the GPU needs a reset)",)
    assert no_ecc.problems == (), "a GPU without ECC has no ECC problem"


def test_without_nvml_only_the_indices_are_known() -> None:
    assert [(r.index, r.model, r.problems) for r in read_gpus(None, [0, 3])] == [
        (0, "", ()),
        (3, "", ()),
    ]


def test_the_local_backend_reads_its_configured_gpus() -> None:
    """A fake NVML (no GPU runs here) handed to the backend; TRAINFLEET_GPUS-style list."""
    backend = LocalBackend(gpus="1", nvml=fake_nvml(2))
    assert [r.index for r in backend.read_gpus()] == [1]
    assert LocalBackend(gpus="").read_gpus() == []
