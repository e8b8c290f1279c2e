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
    """Whether the job takes its queue over its nominal quota (said also when it does not fit)."""
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
        borrows = any(
            used.get(name) + demand.get(name) > nominal
            for name, nominal in spec.nominal.items()
            if demand.get(name)
        )
        for name, nominal in spec.nominal.items():
            want = demand.get(name)
            if not want:
                continue
            after = used.get(name) + want
            if after > nominal and spec.cohort is None:
                shown = _shown(queue, name, nominal, used, want)
                return QuotaCheck(False, borrows, f"{shown}; it has no cohort to borrow from")
            if spec.cohort is None:
                continue
            limit = None if spec.borrowing_limit is None else spec.borrowing_limit.get(name)
            if limit is not None and after - nominal > limit:
                shown = _shown(queue, name, nominal, used, want)
                return QuotaCheck(
                    False, borrows, f"{shown}; it may borrow at most {describe(name, limit)}"
                )
            # Within its nominal quota too: what it left unused may be lent out until reclaimed.
            lendable = self._cohort_unused(spec.cohort, name)  # this queue's room included
            if want > lendable:
                shown = _shown(queue, name, nominal, used, want)
                return QuotaCheck(
                    False,
                    borrows,
                    f"{shown}; cohort {spec.cohort!r} has only "
                    f"{describe(name, max(lendable, 0))} of its quota unused",
                )
        return QuotaCheck(True, borrows)

    def _cohort_unused(self, cohort: str, name: str) -> int:
        """Nominal quota of ``name`` in the cohort that no member uses."""
        unused = 0
        for queue in self.queues.values():
            if queue.cohort == cohort and name in queue.nominal:
                used = self.usage.get(queue.name)
                unused += queue.nominal[name] - (0 if used is None else used.get(name))
        return unused


def _shown(queue: str, name: str, nominal: int, used: Resources, want: int) -> str:
    """The start of a quota refusal; only built when there is one (``check`` is hot)."""
    return (
        f"queue {queue!r} has a nominal quota of {describe(name, nominal)}, "
        f"uses {describe(name, used.get(name))} and the job needs {describe(name, want)}"
    )
