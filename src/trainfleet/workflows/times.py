"""A schedule's times, and which of those due now run (``catch_up``), from its cron
expression alone (no store, no thread).

>>> from trainfleet.spec.workflows import ScheduleSpec
>>> every_hour = ScheduleSpec(cron="0 * * * *")
>>> [t / 3600 for t in times_between(every_hour, 0.0, 3 * 3600.0)]
[1.0, 2.0, 3.0]
>>> due = Due.of(ScheduleSpec(cron="0 * * * *", catch_up="last"), [3600.0, 7200.0], 7300.0)
>>> due.run, due.missed
([7200.0], [3600.0])
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from zoneinfo import ZoneInfo

from cronsim import CronSim

from trainfleet.spec.workflows import ScheduleSpec

ON_TIME = 60.0
"""Seconds after its time within which a run counts as on time, not caught up: a server
that was busy or restarting for less than this runs it whatever ``catch_up`` says."""
MAX_DUE = 1000
"""The most past times one look returns, the latest: older ones are missed without a
record each (a server down for days, on a cron of minutes)."""
LOOK_BACK = 31 * 86400.0
"""Seconds back one look reads at most: times older still are missed unrecorded."""


def times_after(schedule: ScheduleSpec, after: float) -> CronSim:
    """The schedule's times after ``after`` (a POSIX time), as datetimes, in order."""
    start = datetime.fromtimestamp(after, ZoneInfo(schedule.timezone))
    return CronSim(schedule.cron, start)


def times_between(
    schedule: ScheduleSpec, after: float, until: float, limit: int = MAX_DUE
) -> list[float]:
    """Its times in ``(after, until]``, the latest ``limit`` of them."""
    found: list[float] = []
    for when in times_after(schedule, max(after, until - LOOK_BACK)):
        stamp = when.timestamp()
        if stamp > until:
            break
        found.append(stamp)
        if len(found) > limit:
            del found[0]
    return found


def next_times(schedule: ScheduleSpec, after: float, count: int) -> list[float]:
    """Its next ``count`` times after ``after``."""
    return [when.timestamp() for when in islice(times_after(schedule, after), count)]


@dataclass(frozen=True)
class Due:
    """Of the times due now: those to run, and those missed (recorded as skipped)."""

    run: list[float]
    missed: list[float]

    @classmethod
    def of(cls, schedule: ScheduleSpec, due: list[float], now: float) -> Due:
        """``catch_up: none`` runs only a time still on time; ``last`` the latest due;
        ``all`` the latest ``max_catch_up`` (at least the one on time)."""
        if not due:
            return cls([], [])
        on_time = [t for t in due if now - t <= ON_TIME]
        keep = {
            "none": on_time[-1:],
            "last": due[-1:],
            "all": due[-max(schedule.max_catch_up, 1) :] if schedule.max_catch_up else on_time[-1:],
        }[schedule.catch_up]
        return cls(keep, [t for t in due if t not in keep])
