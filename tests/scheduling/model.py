"""Random clusters, queues and jobs, and an independent model of what a scheduler may do.

Nothing here asks the scheduler: placement is checked by brute force, quota ceilings and
usage limits are computed from the queue specs, and every invariant is computed from the
allocations the scheduler handed out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence

from hypothesis import strategies as st

from trainfleet.scheduling.cluster import Node, TaskAllocation, TaskDemand
from trainfleet.scheduling.queues import DEFAULT_QUEUE, QueueSpec
from trainfleet.scheduling.resources import GPU_UNIT, Resources

GI = 2**30
LICENCE = "licence"
COHORT = "team"
NAMES = ("cpu", "memory", "gpu", LICENCE)


def node(
    name: str,
    cpu: int = 4000,
    memory: int = 4 * GI,
    gpus: int = 0,
    labels: Mapping[str, str] | None = None,
    **custom: int,
) -> Node:
    """A node with ``gpus`` whole devices."""
    return Node(name, Resources(cpu, memory, gpus * GPU_UNIT, custom), dict(labels or {}))


def demand(
    cpu: int = 0,
    memory: int = 0,
    gpu: int = 0,
    selector: Mapping[str, str] | None = None,
    **custom: int,
) -> TaskDemand:
    return TaskDemand(Resources(cpu, memory, gpu, custom), dict(selector or {}))


@st.composite
def node_lists(draw: st.DrawFn, max_nodes: int = 4) -> list[Node]:
    """One to ``max_nodes`` nodes with small capacities, some with GPUs, licences, zones."""
    nodes = []
    for i in range(draw(st.integers(1, max_nodes))):
        labels = {"node": f"n{i}"}
        if draw(st.booleans()):
            labels["zone"] = draw(st.sampled_from(["a", "b"]))
        custom = {LICENCE: draw(st.integers(1, 2))} if draw(st.booleans()) else {}
        nodes.append(
            node(
                f"n{i}",
                cpu=draw(st.sampled_from([1000, 2000, 4000, 8000])),
                memory=draw(st.sampled_from([1, 2, 4, 8])) * GI,
                gpus=draw(st.integers(0, 4)),
                labels=labels,
                **custom,
            )
        )
    return nodes


EXTRAS: list[tuple[dict[str, int], dict[str, str]]] = [
    *[({}, {})] * 6,
    ({LICENCE: 1}, {}),
    ({}, {"zone": "a"}),
    ({}, {"zone": "b"}),
]
TASKS = [
    demand(cpu, memory, gpu, selector, **custom)
    for custom, selector in EXTRAS
    for gpu in (0, 0, 250, 500, 750, 1000, 2000)
    for memory in (0, GI // 2, GI)
    for cpu in (0, 500, 1000, 2000)
]


def task_demands() -> st.SearchStrategy[TaskDemand]:
    """A task: whole GPUs or a fraction of one, maybe a licence, maybe a zone.

    Drawn from a catalogue, simplest first: one draw per task keeps the runs fast.
    """
    return st.integers(0, len(TASKS) - 1).map(lambda i: TASKS[i])


def quotas() -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "cpu": st.sampled_from([1000, 2000, 4000, 8000, 0]),
            "gpu": st.sampled_from([1000, 2000, 4000, 500, 0]),
            LICENCE: st.integers(0, 2),
        },
    )


@st.composite
def queue_specs(draw: st.DrawFn) -> list[QueueSpec]:
    """Maybe a queue without cohort, and zero to three queues of one cohort."""
    specs = []
    if draw(st.booleans()):
        specs.append(QueueSpec("solo", draw(quotas())))
    for i in range(draw(st.integers(0, 3)) or 2):
        limit = draw(
            st.none()
            | st.fixed_dictionaries(
                {},
                optional={
                    "cpu": st.sampled_from([0, 1000, 2000, 8000]),
                    "gpu": st.sampled_from([0, 500, 1000, 8000]),
                },
            )
        )
        specs.append(QueueSpec(f"{COHORT}{i}", draw(quotas()), COHORT, limit))
    return specs


def all_queues(specs: Iterable[QueueSpec]) -> dict[str, QueueSpec]:
    """The queues a Scheduler made of ``specs`` knows: the default one and ``specs``."""
    return {DEFAULT_QUEUE: QueueSpec(DEFAULT_QUEUE)} | {spec.name: spec for spec in specs}


# -- placement ------------------------------------------------------------------


def placeable(nodes: Sequence[Node], tasks: Sequence[TaskDemand]) -> bool:
    """Whether some assignment of ``tasks`` to the empty ``nodes`` obeys every rule."""
    for assignment in itertools.product(range(len(nodes)), repeat=len(tasks)):
        if all(
            node_holds(
                nodes[n], [task for task, at in zip(tasks, assignment, strict=True) if at == n]
            )
            for n in set(assignment)
        ):
            return True
    return False


def node_holds(node: Node, tasks: Sequence[TaskDemand]) -> bool:
    """Whether the empty ``node`` can run all of ``tasks`` at once."""
    if any(node.labels.get(key) != value for task in tasks for key, value in task.selector.items()):
        return False
    if not sum((task.resources for task in tasks), Resources()).fits(node.capacity):
        return False
    whole = sum(task.whole_gpus for task in tasks)
    fractions = [task.gpu_fraction for task in tasks if task.gpu_fraction]
    return whole + devices_for(fractions) <= node.gpus


def devices_for(fractions: Sequence[int]) -> int:
    """The fewest devices that hold these shares (exact bin packing, for a few shares)."""
    for count in range(len(fractions) + 1):
        for assignment in itertools.product(range(count), repeat=len(fractions)):
            load = [0] * count
            for share, device in zip(fractions, assignment, strict=True):
                load[device] += share
            if all(used <= GPU_UNIT for used in load):
                return count
    raise AssertionError("unreachable: one device per share always works")


# -- quotas ---------------------------------------------------------------------


def ceiling(queues: Mapping[str, QueueSpec], queue: str, name: str) -> int | None:
    """The most of ``name`` that ``queue`` can ever use; None when it is not limited."""
    spec = queues[queue]
    if name not in spec.nominal:
        return None
    if spec.cohort is None:
        return spec.nominal[name]
    cohort = sum(q.nominal.get(name, 0) for q in queues.values() if q.cohort == spec.cohort)
    limit = None if spec.borrowing_limit is None else spec.borrowing_limit.get(name)
    return cohort if limit is None else min(cohort, spec.nominal[name] + limit)


def within_ceilings(queues: Mapping[str, QueueSpec], queue: str, total: Resources) -> bool:
    for name in NAMES:
        top = ceiling(queues, queue, name)
        if top is not None and total.get(name) > top:
            return False
    return True


def quota_violations(queues: Mapping[str, QueueSpec], usage: Mapping[str, Resources]) -> list[str]:
    """Every way ``usage`` breaks a queue's or a cohort's limit (empty when it breaks none)."""
    found = []
    for spec in queues.values():
        used = usage.get(spec.name, Resources())
        for name, nominal in spec.nominal.items():
            limit: int | None = nominal
            if spec.cohort is not None:
                borrow = None if spec.borrowing_limit is None else spec.borrowing_limit.get(name)
                limit = None if borrow is None else nominal + borrow
            if limit is not None and used.get(name) > limit:
                found.append(f"queue {spec.name} uses {used.get(name)} {name} > {limit}")
    cohorts = {spec.cohort for spec in queues.values() if spec.cohort is not None}
    for cohort in cohorts:
        members = [spec for spec in queues.values() if spec.cohort == cohort]
        for name in {name for spec in members for name in spec.nominal}:
            naming = [spec for spec in members if name in spec.nominal]
            total = sum(usage.get(spec.name, Resources()).get(name) for spec in naming)
            quota = sum(spec.nominal[name] for spec in naming)
            if total > quota:
                found.append(f"cohort {cohort} uses {total} {name} > {quota}")
    return found


def over_nominal(spec: QueueSpec, used: Resources) -> bool:
    """Whether a queue using ``used`` borrows: over its nominal quota of some resource."""
    return any(used.get(name) > nominal for name, nominal in spec.nominal.items())


# -- allocations ----------------------------------------------------------------


def allocation_errors(
    nodes: Mapping[str, Node],
    held: Iterable[tuple[TaskDemand, TaskAllocation]],
) -> list[str]:
    """Every rule that these allocations, taken together, break on ``nodes``."""
    errors = []
    used = {name: Resources() for name in nodes}
    whole: dict[tuple[str, int], int] = {}
    shares: dict[tuple[str, int], list[int]] = {}
    for task, allocation in held:
        node = nodes.get(allocation.node)
        if node is None:
            errors.append(f"unknown node {allocation.node}")
            continue
        if any(node.labels.get(key) != value for key, value in task.selector.items()):
            errors.append(f"{allocation.node} lacks the labels {dict(task.selector)}")
        used[node.name] = used[node.name] + task.resources
        if any(not 0 <= device < node.gpus for device in allocation.gpus):
            errors.append(f"{allocation.node} has no GPU {allocation.gpus}")
        if task.whole_gpus:
            if allocation.gpu_fraction or len(set(allocation.gpus)) != task.whole_gpus:
                errors.append(f"{task.whole_gpus} whole GPUs given as {allocation}")
            for device in allocation.gpus:
                whole[node.name, device] = whole.get((node.name, device), 0) + 1
        elif task.gpu_fraction:
            if allocation.gpu_fraction != task.gpu_fraction or len(allocation.gpus) != 1:
                errors.append(f"a share of {task.gpu_fraction} given as {allocation}")
            for device in allocation.gpus:
                shares.setdefault((node.name, device), []).append(allocation.gpu_fraction)
        elif allocation.gpus or allocation.gpu_fraction:
            errors.append(f"a task without GPUs given {allocation}")
    for name, amount in used.items():
        short = amount.shortfall(nodes[name].capacity)
        if short:
            errors.append(f"{name} overcommitted: {short}")
    for gpu, count in whole.items():
        if count > 1:
            errors.append(f"GPU {gpu} given whole to {count} tasks")
        if gpu in shares:
            errors.append(f"GPU {gpu} given whole and shared")
    for gpu, parts in shares.items():
        if sum(parts) > GPU_UNIT:
            errors.append(f"GPU {gpu} shared beyond one device: {parts}")
    return errors


def node_free(
    node: Node, held: Iterable[tuple[TaskDemand, TaskAllocation]]
) -> tuple[dict[str, int], tuple[int, ...]]:
    """What ``held`` leaves free on ``node``: amounts by name, each device's thousandths."""
    free = {name: node.capacity.get(name) for name in NAMES}
    devices = [GPU_UNIT] * node.gpus
    for task, allocation in held:
        if allocation.node != node.name:
            continue
        for name in NAMES:
            free[name] -= task.resources.get(name)
        for device in allocation.gpus:
            devices[device] -= allocation.gpu_fraction or GPU_UNIT
    return free, tuple(devices)


def amounts(resources: Resources) -> dict[str, int]:
    """Every amount by name, zeros included, so that equal amounts compare equal."""
    return {name: resources.get(name) for name in NAMES}


@st.composite
def shared_clusters(draw: st.DrawFn) -> tuple[list[Node], list[QueueSpec]]:
    """Nodes, and two or three queues of one cohort that share their CPUs and GPUs."""
    nodes = draw(node_lists())
    total = sum((n.capacity for n in nodes), Resources())
    parts = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(2, 3)))]
    specs = []
    for i, part in enumerate(parts):
        nominal = {
            "cpu": total.cpu * part // max(sum(parts), 1) // 500 * 500,
            "gpu": total.gpu * part // max(sum(parts), 1) // 250 * 250,
        }
        limit = draw(st.none() | st.builds(lambda cpu: {"cpu": cpu}, st.sampled_from([0, 1000])))
        specs.append(QueueSpec(f"{COHORT}{i}", nominal, COHORT, limit))
    return nodes, specs
