"""Cordoned devices (unhealthy GPUs) take no new task, whole or fraction."""

from __future__ import annotations

from trainfleet.scheduling.cluster import Cluster, Node, TaskDemand
from trainfleet.scheduling.resources import GPU_UNIT, Resources


def _node(gpus: int) -> Node:
    return Node("local", Resources(gpu=gpus * GPU_UNIT), devices=tuple(range(gpus)))


def test_a_cordoned_device_takes_nothing_new() -> None:
    cluster = Cluster([_node(2)])
    cluster.cordon("local", [0])
    whole = TaskDemand(Resources(gpu=GPU_UNIT))
    half = TaskDemand(Resources(gpu=GPU_UNIT // 2))
    first = cluster.place("a", [whole])
    assert first is not None and first[0].gpus == (1,)
    assert cluster.place("b", [whole]) is None
    assert cluster.place("c", [half]) is None
    cluster.cordon("local", [])
    again = cluster.place("b", [whole])
    assert again is not None and again[0].gpus == (0,)


def test_what_holds_a_device_keeps_it_when_it_is_cordoned() -> None:
    cluster = Cluster([_node(1)])
    held = cluster.place("a", [TaskDemand(Resources(gpu=GPU_UNIT))])
    assert held is not None
    cluster.cordon("local", [0])
    assert cluster.held_by("a") == held and cluster.cordoned("local") == {0}
    cluster.release("a")
    assert cluster.place("b", [TaskDemand(Resources(gpu=GPU_UNIT))]) is None
