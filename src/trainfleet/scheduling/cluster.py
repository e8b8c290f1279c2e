"""Nodes, what is free on them, and placing a whole gang of tasks at once (or nothing).

A task runs on one node. Whole GPUs are exclusive; a fraction of a GPU (``gpu: 0.5``)
shares one device with other fractional tasks. Placement is best fit: among the nodes
where a task fits, the one with the fewest free whole GPUs, so that big holes stay big;
the tasks of one job are packed onto the same node while they fit there.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from trainfleet.scheduling.resources import GPU_UNIT, Resources, total


@dataclass(frozen=True)
class Node:
    """A machine and what it has: ``gpus`` devices, and ``capacity.gpu == gpus * 1000``."""

    name: str
    capacity: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[int, ...] = ()
    """Host indices of its GPUs, where trainfleet hands them to tasks itself (this
    machine); () where the cluster engine picks them. Position ``n`` is device ``n`` of
    an allocation."""

    @property
    def gpus(self) -> int:
        return self.capacity.gpu // GPU_UNIT

    def host_gpus(self, positions: Sequence[int]) -> tuple[int, ...]:
        """The host indices of the devices at ``positions`` (() where the engine picks)."""
        return tuple(self.devices[n] for n in positions) if self.devices else ()


@dataclass(frozen=True)
class TaskDemand:
    """What one task needs, and which node labels it requires."""

    resources: Resources
    selector: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def whole_gpus(self) -> int:
        return self.resources.gpu // GPU_UNIT if self.resources.gpu >= GPU_UNIT else 0

    @cached_property
    def gpu_fraction(self) -> int:
        """Thousandths of one shared GPU, or 0 when the task takes whole GPUs (or none)."""
        return self.resources.gpu if 0 < self.resources.gpu < GPU_UNIT else 0


@dataclass(frozen=True)
class TaskAllocation:
    """Where one task runs: its node and its GPU devices (positions on that node)."""

    node: str
    gpus: tuple[int, ...] = ()
    gpu_fraction: int = 0


class _NodeState:
    """What is free on one node: the whole amounts, and each GPU device's thousandths."""

    __slots__ = ("cordoned", "devices", "free", "node", "whole_free")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.free = node.capacity
        self.devices = [GPU_UNIT] * node.gpus
        self.whole_free = node.gpus
        self.cordoned: frozenset[int] = frozenset()
        """Devices nothing new is placed on (unhealthy GPUs); still counted in ``free``."""

    def take(self, task: TaskDemand) -> TaskAllocation | None:
        """Allocate ``task`` here if it fits; None otherwise (nothing changed)."""
        if not task.resources.fits(self.free):
            return None
        if task.selector and any(
            self.node.labels.get(key) != value for key, value in task.selector.items()
        ):
            return None
        gpus: tuple[int, ...] = ()
        whole = task.whole_gpus
        if whole:
            if self.whole_free < whole:
                return None
            devices, cordoned = self.devices, self.cordoned
            free_ones = [i for i, free in enumerate(devices) if free == GPU_UNIT]
            gpus = tuple([i for i in free_ones if i not in cordoned][:whole])
            if len(gpus) < whole:
                return None
            for device in gpus:
                devices[device] = 0
            self.whole_free -= len(gpus)
        elif task.gpu_fraction:
            # Best fit: the fullest device that still has room, so whole devices stay whole.
            room = [
                (free, i)
                for i, free in enumerate(self.devices)
                if free >= task.gpu_fraction and i not in self.cordoned
            ]
            if not room:
                return None
            free, device = min(room)
            self.devices[device] -= task.gpu_fraction
            self.whole_free -= free == GPU_UNIT
            gpus = (device,)
        self.free = self.free - task.resources
        return TaskAllocation(self.node.name, gpus, task.gpu_fraction)

    def take_again(self, task: TaskDemand, allocation: TaskAllocation) -> None:
        """Take exactly ``allocation`` again (it was given back): undoes ``give_back``."""
        self.free = self.free - task.resources
        for device in allocation.gpus:
            self.whole_free -= self.devices[device] == GPU_UNIT
            self.devices[device] -= allocation.gpu_fraction or GPU_UNIT

    def give_back(self, task: TaskDemand, allocation: TaskAllocation) -> None:
        self.free = self.free + task.resources
        for device in allocation.gpus:
            self.devices[device] += allocation.gpu_fraction or GPU_UNIT
            self.whole_free += self.devices[device] == GPU_UNIT


class Cluster:
    """Every node's free resources, and which job holds what. Pure: no I/O, no clock."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        names = [node.name for node in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self._nodes = {node.name: _NodeState(node) for node in nodes}
        self._max_gpus = max((node.gpus for node in nodes), default=0)
        # Nodes by their number of free whole GPUs, for best-fit search without a full scan.
        self._by_whole: list[dict[str, _NodeState]] = [{} for _ in range(self._max_gpus + 1)]
        for state in self._nodes.values():
            self._by_whole[state.whole_free][state.node.name] = state
        # The buckets when every node is free, in node order: an idle cluster goes back to
        # them, so that it places a job just as a new one would, whatever happened before.
        self._idle = [dict(bucket) for bucket in self._by_whole]
        self._moved = False
        self._held: dict[str, list[tuple[TaskDemand, TaskAllocation]]] = {}
        self.capacity = total(node.capacity for node in nodes)
        self.free = self.capacity

    @property
    def nodes(self) -> list[Node]:
        return [state.node for state in self._nodes.values()]

    def holders(self) -> list[str]:
        """The ids of the jobs holding resources."""
        return list(self._held)

    def held_by(self, holder: str) -> list[TaskAllocation]:
        return [allocation for _, allocation in self._held.get(holder, [])]

    def node_free(self, name: str) -> tuple[Resources, tuple[int, ...]]:
        """What is free on one node, and each GPU device's free thousandths."""
        state = self._nodes[name]
        return state.free, tuple(state.devices)

    def cordon(self, name: str, devices: Iterable[int]) -> None:
        """Place nothing new on ``devices`` (positions) of node ``name``, and again on its
        others; what holds them keeps them until it gives them back."""
        self._nodes[name].cordoned = frozenset(devices)

    def cordoned(self, name: str) -> frozenset[int]:
        """The devices of node ``name`` nothing new is placed on."""
        return self._nodes[name].cordoned

    def fits_somewhere(self, task: TaskDemand) -> bool:
        """Whether ``task`` fits on some node when the cluster is empty."""
        return any(_fits_empty(task, state.node) for state in self._nodes.values())

    def place(self, holder: str, tasks: Sequence[TaskDemand]) -> list[TaskAllocation] | None:
        """Allocate every task of ``tasks`` to ``holder``, or nothing at all (None).

        The allocations come back in the order of ``tasks``.
        """
        if holder in self._held:
            raise ValueError(f"{holder} already holds resources")
        wanted = total(task.resources for task in tasks)
        if not wanted.fits(self.free):
            return None
        if self._moved and not self._held:
            self._by_whole = [dict(bucket) for bucket in self._idle]
            self._moved = False
        order = sorted(range(len(tasks)), key=lambda i: _size(tasks[i]), reverse=True)
        taken: list[tuple[int, _NodeState, TaskAllocation]] = []
        last: _NodeState | None = None
        for i in order:
            task = tasks[i]
            allocation = None
            if last is not None:
                allocation = self._take(last, task)
            if allocation is None:
                for state in self._candidates(task):
                    allocation = self._take(state, task)
                    if allocation is not None:
                        last = state
                        break
            if allocation is None or last is None:
                for j, state, done in reversed(taken):
                    self._give_back(state, tasks[j], done)
                return None
            taken.append((i, last, allocation))  # ``last`` is where it went
        by_task: dict[int, TaskAllocation] = {i: allocation for i, _, allocation in taken}
        self._held[holder] = [(tasks[i], by_task[i]) for i in range(len(tasks))]
        self.free = self.free - wanted
        return [by_task[i] for i in range(len(tasks))]

    def reserve(self, holder: str, tasks: Sequence[TaskDemand]) -> int:
        """Hold, for ``holder``, each task of ``tasks`` that fits now; returns how many.

        Not an allocation: a blocked job's claim on what is free, so that smaller jobs
        cannot take it first (see ``Scheduler``). ``release`` drops it.
        """
        held = self._held.setdefault(holder, [])
        for task in sorted(tasks, key=_size, reverse=True):
            for state in self._candidates(task):
                allocation = self._take(state, task)
                if allocation is not None:
                    held.append((task, allocation))
                    self.free = self.free - task.resources
                    break
        return len(held)

    def restore(self, holder: str, held: Sequence[tuple[TaskDemand, TaskAllocation]]) -> None:
        """Give ``holder`` back exactly the allocations it had (undoes ``release``)."""
        for task, allocation in held:
            state = self._nodes[allocation.node]
            before = state.whole_free
            state.take_again(task, allocation)
            if state.whole_free != before:
                self._move(state, before)
        self.free = self.free - total(task.resources for task, _ in held)
        self._held[holder] = list(held)

    def holding(self, holder: str) -> list[tuple[TaskDemand, TaskAllocation]]:
        """What ``holder`` holds, as ``restore`` takes it."""
        return list(self._held.get(holder, []))

    def release(self, holder: str) -> bool:
        """Free everything ``holder`` holds; False when it holds nothing."""
        held = self._held.pop(holder, None)
        if held is None:
            return False
        for task, allocation in held:
            self._give_back(self._nodes[allocation.node], task, allocation)
        self.free = self.free + total(task.resources for task, _ in held)
        return True

    def _candidates(self, task: TaskDemand) -> Iterator[_NodeState]:
        """Nodes that may fit ``task``, fewest free whole GPUs first (best fit).

        Lazy: the caller stops at the first node that takes the task, before the
        buckets change.
        """
        for bucket in self._by_whole[task.whole_gpus :]:
            yield from bucket.values()

    def _take(self, state: _NodeState, task: TaskDemand) -> TaskAllocation | None:
        before = state.whole_free
        allocation = state.take(task)
        if allocation is not None and state.whole_free != before:
            self._move(state, before)
        return allocation

    def _give_back(self, state: _NodeState, task: TaskDemand, allocation: TaskAllocation) -> None:
        before = state.whole_free
        state.give_back(task, allocation)
        if state.whole_free != before:
            self._move(state, before)

    def _move(self, state: _NodeState, before: int) -> None:
        self._moved = True
        del self._by_whole[before][state.node.name]
        self._by_whole[state.whole_free][state.node.name] = state


def _size(task: TaskDemand) -> tuple[int, int, int]:
    return (task.resources.gpu, task.resources.cpu, task.resources.memory)


def _fits_empty(task: TaskDemand, node: Node) -> bool:
    if not task.resources.fits(node.capacity):
        return False
    if any(node.labels.get(key) != value for key, value in task.selector.items()):
        return False
    return task.whole_gpus <= node.gpus
