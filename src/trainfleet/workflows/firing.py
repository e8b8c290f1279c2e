"""Schedules fired: one thread stores each scheduled run when its time comes.

A run's scheduled time is its key in the store (one run per time, whoever stores it
first), and storing it moves the schedule's latest handled time in the same
transaction: a server killed at any moment neither loses a time nor runs one twice. On
its start the thread reads the times missed meanwhile and runs or skips them as
``catch_up`` says (``times.Due``); each skipped one is recorded as a run, skipped.

A schedule runs as its owner: while the owner's account is disabled it does not fire
(``owner-disabled``), and it goes on from the first time after it is enabled again.
Between firings the thread sleeps until the next time due (or a change wakes it).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainfleet.domain.workflow_records import (
    RunCode,
    RunRecord,
    RunState,
    ScheduleCode,
    ScheduleRecord,
    WorkflowRecord,
)
from trainfleet.spec.errors import SpecError
from trainfleet.spec.workflows import ScheduleSpec, WorkflowSpec, load_workflow_text
from trainfleet.store.connection import patiently
from trainfleet.store.database import Store
from trainfleet.workflows.driver import Request, RunDriver
from trainfleet.workflows.times import ON_TIME, Due, times_after, times_between

log = logging.getLogger("trainfleet.schedules")

MAX_SLEEP = 60.0
"""Seconds the thread sleeps at most (a clock set forward is noticed within it)."""
MAX_RECORDED = 100
"""Missed times recorded as skipped runs at most, the latest (older ones only move on)."""
RETRY_FIRST, RETRY_MAX = 0.1, 5.0


def new_run(
    workflow: WorkflowRecord,
    parameters: Mapping[str, Any],
    now: float,
    *,
    scheduled_for: float | None = None,
    state: RunState = RunState.WAITING,
    code: str = RunCode.SUBMITTED,
    reason: str = "",
) -> RunRecord:
    """A run of ``workflow`` as it is now, to store."""
    return RunRecord(
        id=f"{workflow.name}-{secrets.token_hex(4)}",
        workflow_id=workflow.id,
        workflow=workflow.name,
        team=workflow.team,
        user=workflow.user,
        number=0,  # the store numbers it
        trigger=code,
        state=state,
        code=code,
        reason=reason,
        scheduled_for=scheduled_for,
        parameters=dict(parameters),
        source=workflow.source,
        filename=workflow.filename,
        tree=workflow.tree,
        created_at=now,
        finished_at=now if state.is_final else None,
    )


@dataclass
class _Entry:
    workflow: WorkflowRecord
    spec: WorkflowSpec
    schedule: ScheduleSpec
    state: ScheduleRecord
    next_time: float


class ScheduleFiring:
    """Fires every stored schedule of ``store`` on a daemon thread; runs go to ``driver``."""

    def __init__(
        self,
        store: Store,
        driver: RunDriver,
        clock: Callable[[], float] = time.time,
        thread: bool = True,
    ) -> None:
        """``thread`` False: none is started, and ``tick`` fires (a test's fake clock)."""
        self.store = store
        self.driver = driver
        self.clock = clock
        self._entries: dict[str, _Entry] = {}
        self._wanted = threading.Event()
        self._wanted.set()  # the schedules are read on the first tick
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._patiently, name="schedules", daemon=True)
        if thread:
            self._thread.start()

    def wake(self) -> None:
        """Read the schedules again now (one was stored, paused, resumed or deleted)."""
        self._wanted.set()

    def close(self) -> None:
        self._stopping.set()
        self._wanted.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def tick(self) -> float:
        """Fire every schedule due now (reading them again if woken); when the next is due."""
        if self._wanted.is_set():
            self._wanted.clear()
            self._entries = self._read()
        now = self.clock()
        for entry in self._entries.values():
            if entry.next_time <= now:
                self._fire(entry, now)
        return min((e.next_time for e in self._entries.values()), default=now + MAX_SLEEP)

    def _patiently(self) -> None:
        with patiently():
            self._loop()

    def _loop(self) -> None:
        retry, failing = RETRY_FIRST, False
        while not self._stopping.is_set():
            try:
                soonest = self.tick()
            except Exception:
                if not failing:
                    log.exception("firing schedules failed; retrying until it succeeds")
                failing = True
                self._wanted.set()  # read them all again
                self._stopping.wait(retry)
                retry = min(retry * 2, RETRY_MAX)
                continue
            if failing:
                log.warning("firing schedules succeeds again")
            failing, retry = False, RETRY_FIRST
            self._wanted.wait(min(max(soonest - self.clock(), 0.0), MAX_SLEEP))

    def _read(self) -> dict[str, _Entry]:
        """Every schedule, with its workflow, read from the store."""
        entries = {}
        for state in self.store.workflows.schedules():
            workflow = self.store.workflows.get(state.workflow_id)
            if workflow is None:
                continue
            try:
                spec = load_workflow_text(workflow.source, workflow.filename)
            except SpecError as error:
                log.error("workflow %s cannot be read: %s", workflow.id, error)
                continue
            if spec.schedule is None:
                continue
            entry = _Entry(workflow, spec, spec.schedule, state, 0.0)
            entry.next_time = _next(entry)
            entries[workflow.id] = entry
        return entries

    def _fire(self, entry: _Entry, now: float) -> None:
        """Store the runs of the times due (and the missed ones as skipped)."""
        workflows = self.store.workflows
        owner = self.store.accounts.get_user(entry.workflow.user)
        code = entry.state.code
        if owner is None or owner.disabled:
            if code != ScheduleCode.OWNER_DISABLED:
                reason = f"its owner {entry.workflow.user} is disabled: it runs as its owner"
                workflows.set_schedule(
                    entry.workflow.id, code=ScheduleCode.OWNER_DISABLED, reason=reason
                )
                entry.state = _with(entry.state, code=ScheduleCode.OWNER_DISABLED, reason=reason)
                log.warning("schedule of %s paused: %s", entry.workflow.id, reason)
            entry.next_time = now + MAX_SLEEP  # look again whether its owner is back
            return
        if code == ScheduleCode.OWNER_DISABLED:  # enabled again: on from now
            workflows.set_schedule(
                entry.workflow.id, code=ScheduleCode.ACTIVE, reason="", last_time=now
            )
            entry.state = _with(entry.state, code=ScheduleCode.ACTIVE, reason="", last_time=now)
            entry.next_time = _next(entry)
            return
        if entry.state.paused:
            entry.next_time = float("inf")
            return
        due = times_between(entry.schedule, entry.state.last_time, now)
        chosen = Due.of(entry.schedule, due, now)
        for when in due:
            if when in chosen.run:
                self._run(entry, when, now)
            elif when in chosen.missed[-MAX_RECORDED:]:
                self._store(
                    entry,
                    when,
                    now,
                    RunState.SKIPPED,
                    RunCode.MISSED,
                    "missed: no server ran at its time",
                )
        last = max(due, default=entry.state.last_time)
        if last > entry.state.last_time:
            workflows.set_schedule(entry.workflow.id, last_time=last)
            entry.state = _with(entry.state, last_time=last)
        entry.next_time = _next(entry)

    def _run(self, entry: _Entry, when: float, now: float) -> None:
        active = self.store.workflows.active_runs(entry.workflow.id)
        concurrency = entry.schedule.concurrency
        if active and concurrency == "forbid":
            reason = f"run {active[0].id} was running (concurrency: forbid)"
            self._store(entry, when, now, RunState.SKIPPED, RunCode.CONCURRENT, reason)
            return
        if active and concurrency == "replace":
            for run in active:
                request = Request(
                    run.id, "stop", f"replaced by the run of {_iso(when)}", RunCode.REPLACED
                )
                self.driver.request(request).result(timeout=60)
        late = now - when > ON_TIME
        code = RunCode.CAUGHT_UP if late else RunCode.SCHEDULED
        reason = f"the run of {_iso(when)}" + (f", started {now - when:.0f} s late" if late else "")
        if self._store(entry, when, now, RunState.WAITING, code, reason):
            self.driver.wake()

    def _store(
        self, entry: _Entry, when: float, now: float, state: RunState, code: str, reason: str
    ) -> bool:
        run = new_run(
            entry.workflow,
            entry.spec.parameters,
            now,
            scheduled_for=when,
            state=state,
            code=code,
            reason=reason,
        )
        stored = self.store.workflows.add_run(run, entry.spec.order(), last_time=when)
        entry.state = _with(entry.state, last_time=max(when, entry.state.last_time))
        if stored is not None:
            log.info("workflow %s: run %s %s (%s)", entry.workflow.id, run.id, state, reason)
        return stored is not None


def _with(state: ScheduleRecord, **fields: Any) -> ScheduleRecord:
    return ScheduleRecord.from_row({**state.to_dict(), **fields})


def _next(entry: _Entry) -> float:
    """When the entry is next due: its next time, or never while it is paused."""
    if entry.state.code == ScheduleCode.PAUSED:
        return float("inf")
    if entry.state.code == ScheduleCode.OWNER_DISABLED:
        return entry.state.last_time + MAX_SLEEP  # look again whether its owner is back
    return next(iter(times_after(entry.schedule, entry.state.last_time))).timestamp()


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))
