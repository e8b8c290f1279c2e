"""What ``trainfleet gpus`` does, written once against ``JobService`` (embedded or remote)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from trainfleet.cli.commands import service_of
from trainfleet.cli.options import Options
from trainfleet.wire import GpuHolder, GpuState

GIB = 1 << 30


def show(options: Options, output: str) -> int:
    """Print every GPU as a table (or json, yaml)."""
    with service_of(options) as service:
        states = service.gpus()
    _print(states, output)
    return 0


def clear(options: Options, index: int, output: str) -> int:
    """Clear GPU ``index``'s problems and print it as it is now."""
    with service_of(options) as service:
        state = service.clear_gpu(index)
    _print([state], output)
    return 0


def _print(states: list[GpuState], output: str) -> None:
    from trainfleet.cli.commands import _dump

    if output != "table":
        _dump([state.model_dump(mode="json") for state in states], output)
    elif not states:
        Console(soft_wrap=True).print("no GPUs here")
    else:
        Console(soft_wrap=True, highlight=False).print(table(states))


def table(states: list[GpuState]) -> Table:
    """One row per GPU."""
    grid = Table(box=None, pad_edge=False)
    for column in ("GPU", "MODEL", "MEMORY", "UTIL", "TEMP", "HEALTH", "TASKS"):
        grid.add_column(column)
    for gpu in states:
        grid.add_row(
            str(gpu.index),
            gpu.model or "-",
            _memory(gpu),
            "-" if gpu.utilisation is None else f"{gpu.utilisation:.0f}%",
            "-" if gpu.temperature is None else f"{gpu.temperature}C",
            "healthy" if gpu.healthy else f"unhealthy: {'; '.join(gpu.problems)}",
            ", ".join(_holder(holder) for holder in gpu.holders) or "-",
        )
    return grid


def _memory(gpu: GpuState) -> str:
    if gpu.memory_total is None:
        return "-"
    used = "-" if gpu.memory_used is None else f"{gpu.memory_used / GIB:.1f}"
    return f"{used}/{gpu.memory_total / GIB:.1f} GiB"


def _holder(holder: GpuHolder) -> str:
    name = holder.task or "(another team's task)"
    return name if holder.share >= 1 else f"{name} ({holder.share:g})"
