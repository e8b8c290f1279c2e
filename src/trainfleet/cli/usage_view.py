"""What tasks use, for people: ``trainfleet top``'s table and ``describe``'s usage lines."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from trainfleet.wire import JobUsage, TaskUsage, UsagePoint

COLUMNS = ("JOB", "TASK", "STATE", "CPU", "MEMORY", "GPU", "GPU MEMORY")


def size(amount: int) -> str:
    """``1.5 GiB``, ``120 MiB``, ``512 KiB``, ``12 B``."""
    value, unit = float(amount), "B"
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.0f} {unit}" if unit == "B" or value >= 100 else f"{value:.1f} {unit}"


def cells(point: UsagePoint | None) -> tuple[str, str, str, str]:
    """CPU, memory, GPU utilisation and GPU memory of a sample; ``-`` where none."""
    if point is None:
        return ("-", "-", "-", "-")
    gpu = "-" if point.gpu_util is None else f"{point.gpu_util:.0f}%"
    gpu_memory = "-" if point.gpu_memory is None else size(point.gpu_memory)
    return (f"{point.cpu:.0f}%", size(point.rss), gpu, gpu_memory)


def line(task: TaskUsage) -> str:
    """``worker/0: cpu 98%, memory 120 MiB, gpu 45%, gpu memory 2.1 GiB``."""
    cpu, rss, gpu, gpu_memory = cells(task.current)
    text = f"{task.role}/{task.index}: cpu {cpu}, memory {rss}"
    if task.current is not None and task.current.gpu_util is not None:
        text += f", gpu {gpu}, gpu memory {gpu_memory}"
    return text


def table(jobs: Sequence[JobUsage], running_only: bool) -> Table:
    """One row per task of ``jobs`` (per running task, with ``running_only``)."""
    rows = Table(box=None, pad_edge=False)
    for column in COLUMNS:
        rows.add_column(column, justify="right" if column in COLUMNS[3:] else "left")
    for job in jobs:
        for task in job.tasks:
            if running_only and task.current is None:
                continue
            rows.add_row(
                escape(job.job_id),
                escape(f"{task.role}/{task.index}"),
                task.state.value,
                *cells(task.current),
            )
    return rows
