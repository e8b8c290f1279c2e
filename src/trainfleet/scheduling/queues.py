"""Queues and their quotas, in Kueue's words: nominal quota, cohort, borrowing limit.

A queue may use its nominal quota of each resource it names (resources it does not name
are not limited by it). Queues of one cohort lend each other what they leave unused: a
queue may go over its nominal quota by at most its borrowing limit, and the cohort as a
whole never over the sum of its members' nominal quotas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trainfleet.scheduling.resources import Resources, describe

DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class QueueSpec:
    """One queue: quotas by resource name (``cpu`` millicores, ``memory`` bytes, ...)."""

    name: str
    nominal: Mapping[str, int] = field(default_factory=dict)
    cohort: str | None = None
    borrowing_limit: Mapping[str, int] | None = None
    """How far over nominal it may go, by resource; None: as far as the cohort lends."""


@dataclass(frozen=True)
class QuotaCheck:
    """Whether a job fits its queue's quota, and if it must borrow to."""

    fits: bool
    borrows: bool = False
    reason: str = ""


class QuotaBook:
    """What every queue uses; answers whether one more job fits. Pure."""

    def __init__(self, queues: Iterable[QueueSpec] = ()) -> None:
        self.queues: dict[str, QueueSpec] = {DEFAULT_QUEUE: QueueSpec(DEFAULT_QUEUE)}
        self.usage: dict[str, Resources] = {}
        for queue in queues:
            self.set_queue(queue)

    def set_queue(self, queue: QueueSpec) -> None:
        self.queues[queue.name] = queue
        self.usage.setdefault(queue.name, Resources())

    def use(self, queue: str, amount: Resources) -> None:
        self.usage[queue] = self.usage.get(queue, Resources()) + amount

    def give_back(self, queue: str, amount: Resources) -> None:
        self.usage[queue] = self.usage[queue] - amount

    def borrowing(self, queue: str) -> bool:
        """Whether the queue uses more than its nominal quota of some resource."""
        spec, used = self.queues[queue], self.usage.get(queue, Resources())
        return any(used.get(name) > amount for name, amount in spec.nominal.items())

    def check(self, queue: str, demand: Resources) -> QuotaCheck:
        """Whether ``demand`` fits ``queue``'s quota now, naming the resource when not."""
        spec = self.queues[queue]
        used = self.usage.get(queue, Resources())
        borrows = False
        for name, nominal in spec.nominal.items():
            want = demand.get(name)
            if not want:
                continue
            after = used.get(name) + want
            if after <= nominal:
                continue
            borrows = True
            shown = (
                f"queue {queue!r} has a nominal quota of {describe(name, nominal)}, "
                f"uses {describe(name, used.get(name))} and the job needs {describe(name, want)}"
            )
            if spec.cohort is None:
                return QuotaCheck(False, reason=f"{shown}; it has no cohort to borrow from")
            limit = None if spec.borrowing_limit is None else spec.borrowing_limit.get(name)
            if limit is not None and after - nominal > limit:
                return QuotaCheck(
                    False, reason=f"{shown}; it may borrow at most {describe(name, limit)}"
                )
            lendable = self._cohort_unused(spec.cohort, name)  # this queue's room included
            if want > lendable:
                return QuotaCheck(
                    False,
                    reason=f"{shown}; cohort {spec.cohort!r} has only "
                    f"{describe(name, max(lendable, 0))} unused to lend",
                )
        return QuotaCheck(True, borrows)

    def _cohort_unused(self, cohort: str, name: str) -> int:
        """Nominal quota of ``name`` in the cohort that no member uses."""
        unused = 0
        for queue in self.queues.values():
            if queue.cohort == cohort and name in queue.nominal:
                unused += queue.nominal[name] - self.usage.get(queue.name, Resources()).get(name)
        return unused
