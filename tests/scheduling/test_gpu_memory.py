"""A share of a GPU asked by memory, sized against the smallest GPU at submission."""

from __future__ import annotations

import pytest

from trainfleet.scheduling.gpu_memory import sized_by_memory
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.spec.models import JobSpec

GIB = 2**30


def _job(**resources: object) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "j", "roles": {"w": {"command": "true", "resources": resources}}}
    )


@pytest.mark.parametrize(
    ("asked", "fraction"),
    [("20Gi", 0.25), ("30Gi", 0.375), ("1Mi", 0.001), ("80Gi", 1.0), ("79.99Gi", 1.0)],
)
def test_memory_becomes_the_fraction_that_holds_it_rounded_up(asked: str, fraction: float) -> None:
    sized = sized_by_memory(_job(gpu_memory=asked), lambda: 80 * GIB)
    assert sized.roles["w"].resources.gpu == fraction
    assert sized_by_memory(sized, lambda: 80 * GIB) == sized  # a stored job passes again


def test_a_job_asking_no_memory_is_left_as_it_is_and_reads_no_gpu() -> None:
    job = _job(gpu=0.5)

    def unread() -> int:
        raise AssertionError("the GPUs were read")

    assert sized_by_memory(job, unread) is job


@pytest.mark.parametrize(
    ("resources", "device", "message"),
    [
        ({"gpu_memory": "81Gi"}, 80 * GIB, "81Gi is more than a GPU here holds (80Gi)"),
        ({"gpu_memory": "1Gi"}, None, "no GPU here reports its memory"),
        ({"gpu_memory": "20Gi", "gpu": 0.5}, 80 * GIB, "ask for gpu or for gpu_memory, not both"),
    ],
)
def test_what_cannot_be_sized_is_refused_naming_the_field(
    resources: dict[str, object], device: int | None, message: str
) -> None:
    with pytest.raises(Unschedulable, match=r"^roles\.w\.resources\.gpu_memory: ") as refused:
        sized_by_memory(_job(**resources), lambda: device)
    assert message in str(refused.value)
