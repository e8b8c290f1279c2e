"""Cluster: whole-gang placement, GPU devices, reservations, and giving resources back."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from trainfleet.scheduling.cluster import Cluster, Node, TaskAllocation, TaskDemand

from .model import (
    GI,
    allocation_errors,
    amounts,
    demand,
    node,
    node_free,
    node_lists,
    task_demands,
)

Held = list[tuple[TaskDemand, TaskAllocation]]


class ClusterMachine(RuleBasedStateMachine):
    """Place, reserve, release and restore at random; the allocations always obey the rules."""

    @initialize(nodes=node_lists())
    def start(self, nodes: list[Node]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.cluster = Cluster(nodes)
        self.held: dict[str, Held] = {}
        self.count = 0

    def snapshot(self) -> dict[str, object]:
        return {name: self.cluster.node_free(name) for name in self.nodes}

    @rule(tasks=st.lists(task_demands(), min_size=1, max_size=4))
    def place(self, tasks: list[TaskDemand]) -> None:
        """A gang gets one allocation per task, in task order, or nothing changes."""
        self.count += 1
        holder = f"h{self.count}"
        before = self.snapshot()
        allocations = self.cluster.place(holder, tasks)
        if allocations is None:
            assert self.snapshot() == before
            assert self.cluster.held_by(holder) == []
            return
        assert len(allocations) == len(tasks)
        self.held[holder] = list(zip(tasks, allocations, strict=True))

    @rule(tasks=st.lists(task_demands(), min_size=1, max_size=4))
    def reserve(self, tasks: list[TaskDemand]) -> None:
        """A reservation holds only what fits now, within the rules, and is released whole."""
        before = self.snapshot()
        count = self.cluster.reserve("reserved", tasks)
        held = self.cluster.holding("reserved")
        assert count == len(held) <= len(tasks)
        errors = allocation_errors(self.nodes, [*self.all_held(), *held])
        assert not errors, errors
        self.cluster.release("reserved")
        assert self.snapshot() == before

    @rule(pick=st.integers(0, 99), restore=st.booleans())
    def release(self, pick: int, restore: bool) -> None:
        """Release frees exactly what a holder held; restore puts exactly that back."""
        if not self.held:
            assert not self.cluster.release("nobody")
            return
        holder = sorted(self.held)[pick % len(self.held)]
        before = self.snapshot()
        held = self.cluster.holding(holder)
        assert held == self.held[holder]
        assert self.cluster.release(holder)
        assert self.cluster.held_by(holder) == []
        if restore:
            self.cluster.restore(holder, held)
            assert self.snapshot() == before
        else:
            del self.held[holder]

    def all_held(self) -> Held:
        return [pair for held in self.held.values() for pair in held]

    @invariant()
    def consistent(self) -> None:
        """Nothing overcommitted; what the cluster says is free is what the model computes."""
        held = self.all_held()
        errors = allocation_errors(self.nodes, held)
        assert not errors, errors
        assert set(self.cluster.holders()) == set(self.held)
        total = {name: 0 for name in amounts(self.cluster.capacity)}
        for n in self.nodes.values():
            free, devices = self.cluster.node_free(n.name)
            expected = node_free(n, held)
            assert (amounts(free), devices) == expected
            for name, amount in expected[0].items():
                total[name] += amount
        assert amounts(self.cluster.free) == total


ClusterMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestClusterMachine = ClusterMachine.TestCase


def test_two_halves_share_one_device() -> None:
    """Two 0.5 GPU tasks share the single device of a node."""
    cluster = Cluster([node("n", gpus=1)])
    first = cluster.place("a", [demand(gpu=500)])
    second = cluster.place("b", [demand(gpu=500)])
    assert first == [TaskAllocation("n", (0,), 500)]
    assert second == [TaskAllocation("n", (0,), 500)]
    assert cluster.place("c", [demand(gpu=250)]) is None


def test_fraction_and_whole_gpu_never_share() -> None:
    """A whole-GPU task never lands on a device that holds a share, nor the reverse."""
    cluster = Cluster([node("n", gpus=1)])
    assert cluster.place("share", [demand(gpu=500)]) is not None
    assert cluster.place("whole", [demand(gpu=1000)]) is None
    cluster.release("share")
    assert cluster.place("whole", [demand(gpu=1000)]) == [TaskAllocation("n", (0,))]
    assert cluster.place("share", [demand(gpu=500)]) is None


def test_shares_fill_the_fullest_device_first() -> None:
    """A share goes to the fullest device with room, so that whole devices stay whole."""
    cluster = Cluster([node("n", gpus=2)])
    assert cluster.place("a", [demand(gpu=500)]) == [TaskAllocation("n", (0,), 500)]
    assert cluster.place("b", [demand(gpu=250)]) == [TaskAllocation("n", (0,), 250)]
    assert cluster.place("whole", [demand(gpu=1000)]) == [TaskAllocation("n", (1,))]


def test_whole_gpus_go_to_the_node_with_fewest_free() -> None:
    """Best fit: a one-GPU task takes the node with the fewest free GPUs, keeping big holes."""
    cluster = Cluster([node("big", gpus=4), node("small", gpus=1)])
    assert cluster.place("one", [demand(gpu=1000)]) == [TaskAllocation("small", (0,))]
    assert cluster.place("four", [demand(gpu=4000)]) == [TaskAllocation("big", (0, 1, 2, 3))]


def test_gang_is_all_or_nothing() -> None:
    """When one task of a gang does not fit, the others hold nothing either."""
    cluster = Cluster([node("n0", cpu=2000), node("n1", cpu=2000)])
    before = [cluster.node_free(name) for name in ("n0", "n1")]
    assert cluster.place("job", [demand(cpu=2000)] * 3) is None
    assert [cluster.node_free(name) for name in ("n0", "n1")] == before
    assert cluster.holders() == []


def test_selector_and_custom_resources_are_respected() -> None:
    """A task runs only on a node with its labels and enough of its custom resource."""
    cluster = Cluster(
        [node("plain", gpus=2), node("fast", labels={"zone": "a"}, gpus=2, licence=1)]
    )
    placed = cluster.place("j", [demand(gpu=1000, selector={"zone": "a"}), demand(licence=1)])
    assert placed is not None
    assert [allocation.node for allocation in placed] == ["fast", "fast"]
    assert cluster.place("k", [demand(licence=1)]) is None


def test_memory_is_checked_per_node() -> None:
    """Enough memory in all is not enough: one task needs it on one node."""
    cluster = Cluster([node("n0", memory=GI), node("n1", memory=GI)])
    assert cluster.place("j", [demand(memory=2 * GI)]) is None
    assert cluster.fits_somewhere(demand(memory=GI))
    assert not cluster.fits_somewhere(demand(memory=2 * GI))


def test_holders_and_node_names_are_unique() -> None:
    """A holder holds one gang at a time; node names are unique."""
    cluster = Cluster([node("n")])
    cluster.place("j", [demand(cpu=1000)])
    with pytest.raises(ValueError, match="already holds"):
        cluster.place("j", [demand(cpu=1000)])
    with pytest.raises(ValueError, match="unique"):
        Cluster([node("n"), node("n")])


def test_an_idle_cluster_places_as_a_new_one_does() -> None:
    """Whatever ran before, a cluster with nothing held places a gang as a new cluster does."""
    nodes = [node("n0", memory=GI, gpus=2), node("n1", memory=GI, gpus=2, licence=1)]
    gang = [demand(memory=GI, licence=1), demand(memory=GI // 2, gpu=250)]
    fresh = Cluster(nodes).place("gang", gang)
    assert fresh == [TaskAllocation("n1"), TaskAllocation("n0", (0,), 250)]
    used = Cluster(nodes)
    assert used.place("before", [demand(gpu=250)]) is not None
    used.release("before")
    assert used.place("gang", gang) == fresh
