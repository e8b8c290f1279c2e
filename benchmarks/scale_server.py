"""`trainfleet server` on the simulated backend (a simulation: no task runs a process).

usage: python benchmarks/scale_server.py [--sim JSON] --data-dir DIR server [server options]

Everything after ``--sim`` is trainfleet's own command line: the real CLI parses it and
serves as ``trainfleet server`` does, with one difference: its engine is
``server_engine(settings, backend=SimulatedBackend(...))``. ``--sim`` (JSON, or ``@FILE``)
makes the backend: ``nodes``, ``cpu`` and ``memory_gib`` per node, ``pending``, ``runs``,
``fail_per_minute`` and ``seed`` (see ``trainfleet.backends.simulated``); the backend reads
the data directory's ``sim/`` control files (stalls, the failure rate) from the start.

Each thread of the server names itself in the kernel (``/proc/PID/task/TID/comm``) after
its Python name, numbers and ids left out (``job-#``), so that a benchmark that counts the
server's threads from outside sees which kinds grew.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import re
import threading
from pathlib import Path
from typing import Any

from trainfleet.backends.simulated import SimulatedBackend
from trainfleet.cli.main import cli
from trainfleet.control import assembly
from trainfleet.scheduling.resources import Resources

GIB = 1024**3
PR_SET_NAME = 15


def backend_of(config: dict[str, Any], data_dir: Path) -> SimulatedBackend:
    """The simulated backend ``config`` (``--sim``) describes, steered from ``data_dir``."""
    resources = Resources(
        cpu=int(config.get("cpu", 128) * 1000), memory=int(config.get("memory_gib", 1024) * GIB)
    )
    return SimulatedBackend(
        int(config.get("nodes", 1)),
        resources,
        pending=float(config.get("pending", 0.0)),
        runs=config.get("runs"),
        fail_per_minute=float(config.get("fail_per_minute", 0.0)),
        seed=config.get("seed"),
        data_dir=data_dir,
    )


def short_name(name: str) -> str:
    """A thread's name as the kernel keeps it (15 bytes), numbers and ids left out.

    >>> short_name("job-scale-sim-1a2b3c4d")
    'job-scale-sim-#'
    >>> short_name("Thread-12 (_wait)")
    'Thread-# (_wait'
    """
    return re.sub(r"[0-9a-f]{6,}|\d+", "#", name)[:15]


def name_threads() -> None:
    """Make every thread started from now on set its kernel name (``comm``) to its own."""
    libc = ctypes.CDLL(None)
    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def named(thread: threading.Thread) -> None:
        libc.prctl(PR_SET_NAME, short_name(thread.name).encode(), 0, 0, 0)
        bootstrap(thread)

    threading.Thread._bootstrap_inner = named  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sim", default="{}", help="the backend (JSON, or @FILE)")
    parser.add_argument("--data-dir", required=True)
    args, rest = parser.parse_known_args()
    name_threads()  # the backend's clock too
    text = Path(args.sim[1:]).read_text() if args.sim.startswith("@") else args.sim
    backend = backend_of(json.loads(text), Path(args.data_dir))
    # The CLI's server command builds its engine through this function, looked up when it
    # runs: the real command line, settings and serving, with the simulated backend.
    assembly.server_engine = functools.partial(assembly.server_engine, backend=backend)
    cli(args=["--data-dir", args.data_dir, *rest], prog_name="trainfleet")


if __name__ == "__main__":
    main()
