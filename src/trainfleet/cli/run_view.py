"""``trainfleet run``'s screen: a live task table with the logs scrolling above it.

On a terminal the table is redrawn in place (Rich Live); otherwise state changes are
printed as ``trainfleet | ...`` lines, so the output reads well in CI logs and files.
The same view shows a job run by the embedded engine and one run by a server.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Self

from trainfleet.cli.follow import EventFollower, describe_event
from trainfleet.cli.service import JobService
from trainfleet.datadir.follow import LogFollower
from trainfleet.domain.records import State, TaskRecord

EXIT_CODES = {State.SUCCEEDED: 0, State.FAILED: 1, State.CANCELLED: 130}


class RunView:
    """Makes sure a stored job runs (``JobService.attach``) and shows it until it ends.

    ``show_logs=False`` leaves the tasks' output out (the background runner of an
    embedded ``submit``, whose logs are in the job's folder anyway).
    """

    def __init__(self, service: JobService, job_id: str, show_logs: bool = True) -> None:
        self.service = service
        self.job_id = job_id
        tasks = [(task.role, task.index) for task in service.tasks(job_id)] if show_logs else []
        self.logs = LogFollower(service, job_id, tasks)
        self.events = EventFollower(service, job_id)
        self.tty = sys.stdout.isatty()
        self.services = bool(service.links(job_id))
        self.announced: set[str] = set()
        self.interrupts = Interrupts()

    def run(self) -> int:
        with self.interrupts:
            self._say(f"job {self.job_id}: {self.service.attach(self.job_id)}")
            if self.tty:
                self._watch_live()
            else:
                self._watch(self._show)
            self._keep_services()
        job = self.service.get(self.job_id)
        if not self.tty:
            for line in plain_task_table(self.service.tasks(self.job_id)):
                self._say(line)
        self._say(f"job {job.id} {job.state}: {job.reason}")
        return EXIT_CODES.get(State(job.state), 1)

    def _watch(self, show: Callable[..., object]) -> None:
        """Show output until the job ends; Ctrl-C stops the job, twice kills it."""
        while not self.service.wait(self.job_id, self.service.poll_interval):
            for _ in range(self.interrupts.take()):
                self._say("stopping the job (Ctrl-C again to kill it)")
                self.service.interrupt(self.job_id)
            show()
        show(final=True)

    def _announcements(self) -> list[str]:
        """Where each service that began running since the last look is opened, once."""
        if not self.services:
            return []
        lines = []
        for link in self.service.links(self.job_id):
            if link.state is State.RUNNING and link.name not in self.announced:
                self.announced.add(link.name)
                where = link.url or f"{link.path} of `trainfleet ui`"
                lines.append(f"trainfleet | {link.name} at {where}")
        return lines

    def _keep_services(self) -> None:
        """A job run here keeps its services up for their ``keep_after``: wait for them
        (Ctrl-C ends them); a server's outlive this command anyway."""
        if not self.services or self.service.event_dir(self.job_id) is None:
            return
        said = False
        while True:
            alive = [link for link in self.service.links(self.job_id) if not link.state.is_final]
            if not alive:
                return
            if not said:
                names = ", ".join(f"{link.name} at {link.url}" for link in alive)
                self._say(f"the job has ended; {names} stays up a while (Ctrl-C ends it)")
                said = True
            time.sleep(self.service.poll_interval)
            if self.interrupts.take():
                self.service.interrupt(self.job_id)

    def _show(self, final: bool = False) -> None:
        out = sys.stdout.buffer
        for event in self.events.read():
            out.write(f"trainfleet | {describe_event(event)}\n".encode())
        for line in self._announcements():
            out.write(f"{line}\n".encode())
        for piece in self.logs.read(final=final):
            out.write(piece)
        out.flush()

    def _watch_live(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        from trainfleet.cli.tables import task_table

        console = Console(highlight=False)

        def show(final: bool = False) -> None:
            for event in self.events.read():
                console.print(Text(f"trainfleet | {describe_event(event)}", style="dim"))
            for line in self._announcements():
                console.print(Text(line))
            data = b"".join(self.logs.read(final=final))
            if data:
                console.print(Text(data.decode(errors="replace").rstrip("\n")), soft_wrap=True)
            live.update(task_table(self.service.tasks(self.job_id)))

        with Live(
            task_table(self.service.tasks(self.job_id)), console=console, auto_refresh=False
        ) as live:

            def show_and_refresh(final: bool = False) -> None:
                show(final)
                live.refresh()

            self._watch(show_and_refresh)

    def _say(self, line: str) -> None:
        sys.stdout.buffer.write(f"trainfleet | {line}\n".encode())
        sys.stdout.flush()


def plain_task_table(tasks: Sequence[TaskRecord]) -> list[str]:
    """The task table as aligned plain lines, for logs and files."""
    rows = [("TASK", "STATE", "PID", "RESTARTS", "ADDRESS", "EXIT")] + [
        (t.name, t.state, str(t.pid or "-"), str(t.restarts), t.address, _exit(t.exit_code))
        for t in tasks
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _exit(code: int | None) -> str:
    return "-" if code is None else str(code)


class Interrupts:
    """Ctrl-C, SIGTERM and SIGHUP (its terminal closed) counted while the view runs, for
    its loop to act on: never raised where they land. A KeyboardInterrupt thrown into the
    middle of the embedded engine's work (between a lock's acquire and its ``try``) would
    leave the lock held, and the job that was to stop would hang instead."""

    NUMBERS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._count = 0
        self._taken = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Self:
        for number in self.NUMBERS:
            self._previous[number] = signal.signal(number, self._note)
        return self

    def __exit__(self, *_: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]

    def take(self) -> int:
        """How many arrived since the last call."""
        new, self._taken = self._count - self._taken, self._count
        return new

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:  # what is shown goes nowhere now (a write would fail)
            nowhere = os.open(os.devnull, os.O_WRONLY)
            for stream in (sys.stdout, sys.stderr):
                os.dup2(nowhere, stream.fileno())
            os.close(nowhere)
        self._count += 1
