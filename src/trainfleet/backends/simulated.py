"""A simulated backend, for benchmarks and tests only: it runs no process at all.

It reports each task's placement and exit on a schedule, as a cluster engine would, so that
the real server, engine, store and controllers can be driven with thousands of jobs on one
machine (``benchmarks/scale_sim.py``). No user can choose it: it is in no config's list of
backends, and a benchmark or a test hands it to ``build_engine`` itself.

What a task does is data: its launch's ``TRAINFLEET_SIM`` (JSON, see ``Plan``), with
defaults from the constructor. It waits ``pending`` seconds for a place (``placed``), writes
``output`` to its log, and runs ``runs`` seconds (None: until stopped) before it exits with
``exit``. Running tasks also fail (exit 1) at ``fail_per_minute`` each, at random: one
Poisson process over all of them, as if each had an exponential clock.

One thread (``sim-clock``) keeps every task's next event in a heap. What a task is lives in
files beside its attempt's records, so that a new instance (a server started again after a
kill -9) adopts what the last one started: ``<record>.sim`` (when it started, where, when it
ends), ``<record>.placed`` (when it began to run, once reported), ``<record>.exit`` (how it
ended) and ``<record>.reported`` (when that was reported, which with the next attempt's
start gives the restart latency; see ``attempts``).

A stall (``stall(seconds)``, or ``sim/stall`` in the data directory holding the wall time it
ends: ``request_stall``, for a server in another process) is an engine that stops
answering: tasks go on, end and fail, but nothing is reported until it is over, and
``start`` answers ``NotStarted(retry=True)``.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainfleet.backends.api import NotStarted, Preview, TaskHandle, TaskReports, TaskStatus
from trainfleet.backends.launch import JobLaunch, TaskLaunch
from trainfleet.backends.supervision.ports import PooledAddresses
from trainfleet.backends.supervision.shim import write_atomically
from trainfleet.datadir import records
from trainfleet.datadir.layout import DataDir, create_private
from trainfleet.scheduling.cluster import Node
from trainfleet.scheduling.placement import TaskKey
from trainfleet.scheduling.resources import Resources
from trainfleet.spec.models import JobSpec

SIM_VARIABLE = "TRAINFLEET_SIM"
SCAN_SECONDS = 1.0
"""How often the clock reads the control files and the tasks' ``until_file``."""
MARKER_SECONDS = 60.0
"""How long an abandoned attempt's marker waits for the instance that follows it."""
NODE_RESOURCES = Resources(cpu=64_000, memory=512 * 1024**3)
log = logging.getLogger("trainfleet.simulated")

Kind = Literal["place", "end", "term", "kill"]
Event = Kind | Literal["fail"]


class Plan(BaseModel):
    """What one simulated task does (``TRAINFLEET_SIM``, JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output: str = ""
    """Written to its log once it is placed."""
    runs: float | None = Field(default=None, ge=0)
    """Seconds it runs once placed; None: until stopped."""
    exit: int = 0
    """Its exit status after ``runs``."""
    on_term: int | Literal["ignore"] = -signal.SIGTERM
    """Its exit status when stopped (SIGTERM); ``ignore``: runs on until forced."""
    term_output: str = ""
    """Written to its log when it ends on SIGTERM."""
    pending: float = Field(default=0.0, ge=0)
    """Seconds it waits for a place (``starting``) before it runs."""
    until_file: str | None = None
    """It exits with ``exit`` once this file (relative: to its folder) exists."""


@dataclass
class _Task:
    """A started (or adopted) attempt, until its exit has been reported."""

    key: TaskKey
    record: Path
    log: Path
    reports: TaskReports
    node: str
    port: int
    exit: int
    on_term: int | None
    term_output: str
    output: str
    until: Path | None
    placed: bool = False


@dataclass(frozen=True)
class Attempt:
    """One simulated attempt as its records tell it (wall times, seconds)."""

    record: Path
    attempt: int
    started_at: float
    placed_at: float | None
    """When it began to run (None: it never did, or that was not reported)."""
    ended_at: float | None
    reported_at: float | None
    code: int | None
    injected: bool
    """Ended by the failure rate (not by its plan, nor a stop)."""


def control_dir(root: Path) -> Path:
    """Where a data directory's simulation is steered from (``<data>/sim``)."""
    return root / "sim"


def request_stall(root: Path, seconds: float) -> float:
    """Stall every simulated backend on the data directory ``root`` for ``seconds`` from now
    (seen within ``SCAN_SECONDS``); returns the wall time the stall ends."""
    until = time.time() + seconds
    _write_control(root, "stall", f"{until!r}\n")
    return until


def request_failure_rate(root: Path, per_minute: float) -> None:
    """Set the failure rate (per running task and minute) of the backends on ``root``."""
    _write_control(root, "fail_per_minute", f"{per_minute!r}\n")


def _write_control(root: Path, name: str, text: str) -> None:
    folder = control_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(str(folder / name), text, durable=False)


def _read_float(path: Path) -> float | None:
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return None


def _side(record: Path, suffix: str) -> Path:
    return record.with_name(record.name + suffix)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def attempts(run_dir: Path) -> Iterator[Attempt]:
    """Every simulated attempt recorded in a job's ``run_dir``."""
    for sim in run_dir.glob("*.sim"):
        state = _read_json(sim)
        if state is None:
            continue
        record = sim.with_suffix("")
        reported = _read_json(_side(record, ".reported")) or {}
        yield Attempt(
            record,
            int(state["attempt"]),
            float(state["started_at"]),
            _read_float(_side(record, ".placed")),
            reported.get("ended"),
            reported.get("reported"),
            records.exit_status(record),
            bool(reported.get("injected", False)),
        )


class SimulatedBackend(PooledAddresses):
    """Reports starts, placements and exits on a schedule; runs nothing (see the module).

    ``nodes`` synthetic nodes ``sim0``... of ``node_resources`` each; ``pending`` and
    ``runs``: the defaults of each task's ``Plan``; ``fail_per_minute``: how often each
    running task fails (exit 1), drawn from ``seed`` (None: unseeded); ``data_dir``: the data
    directory whose ``sim/`` control files it reads from the start (others are learnt from
    the jobs it starts).
    """

    restarts_whole_jobs = False
    queues_tasks = True

    def __init__(
        self,
        nodes: int = 1,
        node_resources: Resources = NODE_RESOURCES,
        *,
        pending: float = 0.0,
        runs: float | None = None,
        fail_per_minute: float = 0.0,
        seed: int | None = None,
        data_dir: Path | None = None,
        scan_seconds: float = SCAN_SECONDS,
    ) -> None:
        self._nodes = [Node(f"sim{n}", node_resources) for n in range(nodes)]
        self.pending = pending
        self.runs = runs
        self.scan_seconds = scan_seconds
        self._rate = fail_per_minute
        self._random = random.Random(seed)
        self._tasks: dict[TaskHandle, _Task] = {}
        self._heap: list[tuple[float, int, TaskHandle, Kind]] = []
        self._order = itertools.count()
        self._placements = itertools.count()
        self._running: list[TaskHandle] = []
        self._position: dict[TaskHandle, int] = {}
        self._next_failure = math.inf
        self._until: set[TaskHandle] = set()
        self._held: list[Callable[[], None]] = []
        self._stalled_until = 0.0
        self._asked_stall = 0.0
        self._stall_files: dict[Path, float] = {}
        self._roots: set[Path] = set()
        self._changed = threading.Condition()
        self._clock: threading.Thread | None = None
        if data_dir is not None:
            self._remember(data_dir)

    # -- what it is -----------------------------------------------------------

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def gpu_memory(self) -> int | None:
        return None

    def check(self, spec: JobSpec) -> None:
        return None  # every job runs, as far as a simulation goes

    def log_path(self, data_dir: DataDir, job_id: str, key: TaskKey) -> Path:
        return data_dir.log_path(job_id, *key)

    def last_attempt(self, data_dir: DataDir, job_id: str, key: TaskKey) -> int | None:
        return records.last_attempt(data_dir.run_dir(job_id), *key, suffixes=(".sim",))

    def dryrun(self, job: JobLaunch) -> Preview:
        """Each launch, and as the submission each task's plan (or what is wrong with it)."""
        launches = [job.task(key) for key in job.attempts]
        lines = []
        for launch in launches:
            try:
                said = self._plan(launch).model_dump_json()
            except ValueError as error:
                said = str(error)
            lines.append(f"{launch.key[0]}/{launch.key[1]}: {said}")
        return Preview(launches, "\n".join(["simulated, no process:", *lines]))

    # -- steering -------------------------------------------------------------

    def stall(self, seconds: float) -> None:
        """Answer nothing for ``seconds`` from now (see the module)."""
        with self._changed:
            self._asked_stall = max(self._asked_stall, time.time() + seconds)
            self._stalled_until = max(self._stalled_until, self._asked_stall)
            self._changed.notify()

    def stalled(self) -> bool:
        return time.time() < self._stalled_until

    @property
    def fail_per_minute(self) -> float:
        return self._rate

    @fail_per_minute.setter
    def fail_per_minute(self, per_minute: float) -> None:
        with self._changed:
            self._rate = per_minute
            self._draw_failure()

    # -- starting -------------------------------------------------------------

    def start(self, job: JobLaunch, reports: TaskReports) -> dict[TaskKey, TaskHandle | NotStarted]:
        self._remember(job.data_dir.root)
        if self.stalled():
            why = "the simulated engine does not answer (stalled)"
            return {key: NotStarted(why, retry=True) for key in job.attempts}
        started: dict[TaskKey, TaskHandle | NotStarted] = {}
        for key in job.attempts:
            try:
                launch = job.task(key)
                started[key] = self._start(launch, job.placement.slot(*key).port, reports)
            except (OSError, ValueError) as error:
                started[key] = NotStarted(str(error))
        return started

    def _plan(self, launch: TaskLaunch) -> Plan:
        """The task's plan; ValueError saying what is wrong with its ``TRAINFLEET_SIM``."""
        given: Any = json.loads(launch.env.get(SIM_VARIABLE) or "{}")
        if not isinstance(given, dict):
            raise ValueError(f"{SIM_VARIABLE}: expected a JSON object")
        try:
            return Plan.model_validate({"runs": self.runs, "pending": self.pending, **given})
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()
            )
            raise ValueError(f"{SIM_VARIABLE}: {problems}") from None

    def _start(self, launch: TaskLaunch, port: int, reports: TaskReports) -> TaskHandle:
        folder = launch.host_cwd or launch.cwd
        if not folder.is_dir():
            raise FileNotFoundError(f"its working directory {folder} does not exist")
        plan = self._plan(launch)
        now = time.time()
        placed_at = now + plan.pending
        ends_at = None if plan.runs is None else placed_at + plan.runs
        node = self._nodes[next(self._placements) % len(self._nodes)].name if self._nodes else ""
        launch.record.parent.mkdir(parents=True, exist_ok=True)
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        os.close(create_private(launch.log_path))
        state = {
            "attempt": int(launch.record.name.rpartition("-")[2]),
            "started_at": now,
            "placed_at": placed_at,
            "ends_at": ends_at,
            "exit": plan.exit,
            "on_term": None if plan.on_term == "ignore" else plan.on_term,
            "term_output": plan.term_output,
            "output": plan.output,
            "until": str(folder / plan.until_file) if plan.until_file else None,
            "node": node,
            "port": port,
            "log": str(launch.log_path),
        }
        write_atomically(str(_side(launch.record, ".sim")), json.dumps(state), durable=False)
        return self._follow(launch.key, launch.record, state, reports, placed=False)

    def _follow(
        self, key: TaskKey, record: Path, state: dict[str, Any], reports: TaskReports, placed: bool
    ) -> TaskHandle:
        """Keep the task's events on the clock, from its ``.sim`` ``state``; ``placed``: it
        runs already (adopted), its placement reported by an earlier instance."""
        handle = TaskHandle(str(record))
        until = state.get("until")
        task = _Task(
            key,
            record,
            Path(state["log"]),
            reports,
            state["node"],
            int(state["port"]),
            int(state["exit"]),
            state["on_term"],
            state.get("term_output", ""),
            state.get("output", ""),
            Path(until) if until else None,
        )
        with self._changed:
            self._tasks[handle] = task
            if placed:
                task.placed = True
                self._enter_running(handle)
            else:
                self._at(state["placed_at"], handle, "place")
            if state["ends_at"] is not None:
                self._at(state["ends_at"], handle, "end")
            if task.until is not None:
                self._until.add(handle)
            self._changed.notify()
        self._watch()
        return handle

    # -- following ------------------------------------------------------------

    def describe(self, handle: TaskHandle) -> TaskStatus:
        with self._changed:
            task = self._tasks.get(handle)
        where = f"simulated task on {task.node}" if task and task.node else "simulated task"
        return TaskStatus(handle, where)

    def stop(self, handle: TaskHandle, force: bool = False) -> None:
        with self._changed:
            if handle in self._tasks:
                self._at(time.time(), handle, "kill" if force else "term")
                self._changed.notify()

    def adopt(
        self, data_dir: DataDir, job_id: str, key: TaskKey, attempt: int, reports: TaskReports
    ) -> TaskHandle | None:
        self._remember(data_dir.root)
        record = data_dir.record(job_id, *key, attempt)
        state = _read_json(_side(record, ".sim"))
        status = records.exit_status(record)
        now = time.time()
        if status is None and state is None:  # never started here: nothing runs
            status = -signal.SIGKILL
        elif status is None and state is not None:
            ends_at = state["ends_at"]
            if ends_at is not None and ends_at <= now:  # it ended while nobody watched
                status = int(state["exit"])
                write_atomically(str(_side(record, ".exit")), f"{status}\n", durable=False)
        if status is not None:
            said = _read_json(_side(record, ".reported")) or {}  # reported, never handled
            ended, injected = said.get("ended", now), bool(said.get("injected", False))
            _write_reported(record, ended, time.time(), status, injected)
            reports.exited(key, status)
            return None
        assert state is not None
        placed = _side(record, ".placed").exists()  # else reported once it is placed
        return self._follow(key, record, state, reports, placed=placed)

    def abandon(self, data_dir: DataDir, job_id: str, key: TaskKey) -> None:
        """End the task's last attempt (exit -9); the instance that follows it, if any,
        learns so from a marker in ``sim/abandoned`` within ``SCAN_SECONDS``."""
        self._remember(data_dir.root)
        attempt = self.last_attempt(data_dir, job_id, key)
        if attempt is None:
            return
        record = data_dir.record(job_id, *key, attempt)
        if records.exit_status(record) is not None:
            return
        write_atomically(str(_side(record, ".exit")), f"{-signal.SIGKILL}\n", durable=False)
        markers = control_dir(data_dir.root) / "abandoned"
        markers.mkdir(parents=True, exist_ok=True)
        write_atomically(str(markers / f"{job_id}.{record.name}"), str(record), durable=False)

    # -- the clock ------------------------------------------------------------

    def _at(self, due: float, handle: TaskHandle, kind: Kind) -> None:
        heapq.heappush(self._heap, (due, next(self._order), handle, kind))

    def _enter_running(self, handle: TaskHandle) -> None:
        self._position[handle] = len(self._running)
        self._running.append(handle)
        self._draw_failure()

    def _leave_running(self, handle: TaskHandle, at: float) -> None:
        position = self._position.pop(handle, None)
        if position is None:
            return
        last = self._running.pop()
        if last != handle:
            self._running[position] = last
            self._position[last] = position
        self._draw_failure(at)

    def _draw_failure(self, at: float | None = None) -> None:
        """When the next running task fails, counted from ``at`` (default: now): the rate
        or the running changed, and an exponential clock has no memory, so it is drawn
        again (from when the last one was due, not from when the clock got to it, so that
        a busy clock does not thin the failures out)."""
        rate = self._rate / 60.0 * len(self._running)
        before, since = self._next_failure, time.time() if at is None else at
        self._next_failure = since + self._random.expovariate(rate) if rate > 0 else math.inf
        if self._next_failure < before:
            self._changed.notify()

    def _watch(self) -> None:
        with self._changed:
            if self._clock is None:
                self._clock = threading.Thread(target=self._loop, name="sim-clock", daemon=True)
                self._clock.start()

    def _loop(self) -> None:
        next_scan = 0.0
        while True:
            try:
                if time.time() >= next_scan:
                    self._scan()
                    next_scan = time.time() + self.scan_seconds
                for due, handle, kind in self._due(next_scan):
                    self._fire(due, handle, kind)
                if self._held and not self.stalled():
                    self._flush()
            except Exception:  # the clock never stops: one bad event is logged, not fatal
                log.exception("simulated backend: an event failed")

    def _due(self, next_scan: float) -> list[tuple[float, TaskHandle | None, Event]]:
        """The events due now, with when each was due; else waits until the next one (or
        a change)."""
        with self._changed:
            now = time.time()
            due: list[tuple[float, TaskHandle | None, Event]] = []
            while self._heap and self._heap[0][0] <= now:
                when, _, handle, kind = heapq.heappop(self._heap)
                due.append((when, handle, kind))
            if self._next_failure <= now:
                due.append((self._next_failure, None, "fail"))
                self._next_failure = math.inf  # drawn again as the failed task leaves
            if not due:
                wake = min(self._heap[0][0] if self._heap else math.inf, self._next_failure)
                if self._held:
                    wake = min(wake, self._stalled_until)
                self._changed.wait(max(0.0, min(wake, next_scan) - now))
            return due

    def _fire(self, due: float, handle: TaskHandle | None, kind: Event) -> None:
        if kind == "fail":
            with self._changed:
                if not self._running:
                    return
                handle = self._running[self._random.randrange(len(self._running))]
            self._end(handle, 1, due, injected=True)
            return
        assert handle is not None
        with self._changed:
            task = self._tasks.get(handle)
            if task is None:
                return  # it ended already
            placed = task.placed
            if kind == "place" and not placed:
                task.placed = True
                self._enter_running(handle)
        if kind == "place" and not placed:
            if task.output:
                _append(task.log, task.output)
            running_since = time.time()
            self._report(lambda: self._placed(task, running_since))
        elif kind == "end":
            self._end(handle, task.exit, due)
        elif kind == "kill":
            self._end(handle, -signal.SIGKILL, due)
        elif kind == "term" and not placed:  # cancelled while it waited for a place
            self._end(handle, -signal.SIGTERM, due)
        elif kind == "term" and task.on_term is not None:
            self._end(handle, task.on_term, due, output=task.term_output)

    @staticmethod
    def _placed(task: _Task, since: float) -> None:
        address = f"{task.node}:{task.port}" if task.port else ""
        write_atomically(str(_side(task.record, ".placed")), f"{since!r}\n", durable=False)
        task.reports.placed(task.key, address, f"running on {task.node}")

    def _end(
        self, handle: TaskHandle, code: int, at: float, injected: bool = False, output: str = ""
    ) -> None:
        """The task ends with ``code`` at ``at`` (unless its ``.exit`` says otherwise: it
        was abandoned)."""
        with self._changed:
            task = self._tasks.pop(handle, None)
            if task is None:
                return
            self._leave_running(handle, at)
            self._until.discard(handle)
        recorded = records.exit_status(task.record)
        if recorded is None:
            if output:
                _append(task.log, output)
            write_atomically(str(_side(task.record, ".exit")), f"{code}\n", durable=False)
        else:
            code, injected = recorded, False
        ended = min(at, time.time())

        def report() -> None:  # recorded first: whoever hears of the exit finds the record
            _write_reported(task.record, ended, time.time(), code, injected)
            task.reports.exited(task.key, code)

        self._report(report)

    def _report(self, report: Callable[[], None]) -> None:
        """Report now, or once the stall is over."""
        if self.stalled() or self._held:
            self._held.append(report)
        else:
            report()

    def _flush(self) -> None:
        held, self._held = self._held, []
        for report in held:
            try:
                report()
            except Exception:
                log.exception("simulated backend: a report failed")

    def _scan(self) -> None:
        """Read the control files, the abandoned attempts' markers, and ``until`` files."""
        with self._changed:
            roots = list(self._roots)
        for root in roots:
            self._read_controls(root)
            for marker in _listed(control_dir(root) / "abandoned"):
                try:
                    handle = TaskHandle(marker.read_text())
                    age = time.time() - marker.stat().st_mtime
                except OSError:
                    continue
                with self._changed:
                    followed = handle in self._tasks
                if followed:
                    self._end(handle, -signal.SIGKILL, time.time())
                if followed or age > MARKER_SECONDS:
                    marker.unlink(missing_ok=True)
        with self._changed:
            waiting = [(handle, self._tasks[handle]) for handle in self._until]
        for handle, task in waiting:
            if task.until is not None and task.until.exists():
                self._end(handle, task.exit, time.time())

    def _remember(self, root: Path) -> None:
        """Read ``root``'s control files now, and on the clock from now on."""
        with self._changed:
            known = root in self._roots
            self._roots.add(root)
        if not known:
            self._read_controls(root)
            self._watch()

    def _read_controls(self, root: Path) -> None:
        folder = control_dir(root)
        stall = _read_float(folder / "stall") or 0.0
        rate = _read_float(folder / "fail_per_minute")
        with self._changed:
            self._stall_files[root] = stall
            self._stalled_until = max(self._asked_stall, *self._stall_files.values())
            if rate is not None and rate != self._rate:
                self._rate = rate
                self._draw_failure()


def _listed(folder: Path) -> list[Path]:
    try:
        return [folder / name for name in os.listdir(folder) if not name.endswith(".tmp")]
    except OSError:
        return []


def _append(path: Path, text: str) -> None:
    with open(create_private(path), "a") as handle:
        handle.write(text)


def _write_reported(record: Path, ended: float, reported: float, code: int, injected: bool) -> None:
    said = {"ended": ended, "reported": reported, "code": code, "injected": injected}
    write_atomically(str(_side(record, ".reported")), json.dumps(said), durable=False)
