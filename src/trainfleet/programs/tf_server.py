"""``trainfleet tf-server``: a TensorFlow gRPC server for one task of a ``TF_CONFIG`` cluster.

Parameter servers, and the workers of in-graph or ``ParameterServerStrategy`` jobs, run no
code of their own: they start a ``tf.distribute.Server`` for their task and serve until they
are stopped. This is that program, so a job file can say ``command: trainfleet tf-server``.

>>> task = parse_tf_config('{"cluster": {"ps": ["h:1"], "worker": ["h:2", "h:3"]},'
...                        ' "task": {"type": "worker", "index": 1}}')
>>> task.job_name, task.task_index, task.address
('worker', 1, 'h:3')
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

PROG = "trainfleet tf-server"
EXIT_BAD_INPUT = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

if TYPE_CHECKING:  # evaluated by type checkers only: the task's Python may be older
    ClusterDict = dict[str, list[str] | dict[int, str]]


class TFConfigError(ValueError):
    """TF_CONFIG is missing, unreadable or does not describe a task of its cluster."""


@dataclass(frozen=True)
class ServerTask:
    """The task a server runs as, read from ``TF_CONFIG``."""

    cluster: ClusterDict
    job_name: str
    task_index: int
    rpc_layer: str | None = None

    @property
    def address(self) -> str:
        addresses = self.cluster[self.job_name]
        return addresses[self.task_index]


def parse_tf_config(raw: str | None) -> ServerTask:
    """Read the cluster and this task from the text of ``TF_CONFIG`` (Kubeflow's format)."""
    if raw is None or not raw.strip():
        raise TFConfigError("TF_CONFIG is not set: it must name the cluster and this task")
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as error:
        raise TFConfigError(f"TF_CONFIG is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise TFConfigError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")

    cluster = _parse_cluster(config.get("cluster"))
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise TFConfigError("TF_CONFIG has no 'task' with a 'type' and an 'index'")
    job_name, index = task["type"], task["index"]
    if not isinstance(job_name, str) or not job_name:
        raise TFConfigError(f"TF_CONFIG task type must be a non-empty string, not {job_name!r}")
    if isinstance(index, bool) or not isinstance(index, int):
        raise TFConfigError(f"TF_CONFIG task index must be an integer, not {index!r}")
    if job_name not in cluster:
        jobs = ", ".join(sorted(cluster))
        raise TFConfigError(
            f"task type {job_name!r} is not in the TF_CONFIG cluster (its jobs: {jobs})"
        )
    addresses = cluster[job_name]
    known = range(len(addresses)) if isinstance(addresses, list) else addresses.keys()
    if index not in known:
        raise TFConfigError(
            f"task index {index} is not in job {job_name!r} of the TF_CONFIG cluster "
            f"({len(addresses)} task(s))"
        )
    rpc_layer = config.get("rpc_layer")
    if rpc_layer is not None and not isinstance(rpc_layer, str):
        raise TFConfigError(f"TF_CONFIG rpc_layer must be a string, not {rpc_layer!r}")
    return ServerTask(cluster, job_name, index, rpc_layer or None)


def _parse_cluster(cluster: Any) -> ClusterDict:
    """Check the cluster: job name -> list of "host:port" (or {index: "host:port"})."""
    if not isinstance(cluster, dict) or not cluster:
        raise TFConfigError("TF_CONFIG has no 'cluster' mapping job names to task addresses")
    parsed: ClusterDict = {}
    for job, addresses in cluster.items():
        if isinstance(addresses, list) and all(isinstance(a, str) for a in addresses):
            parsed[job] = addresses
        elif isinstance(addresses, dict) and all(isinstance(a, str) for a in addresses.values()):
            try:
                parsed[job] = {int(index): address for index, address in addresses.items()}
            except ValueError:
                raise TFConfigError(
                    f"TF_CONFIG cluster job {job!r}: task indices must be integers"
                ) from None
        else:
            raise TFConfigError(
                f"TF_CONFIG cluster job {job!r} must be a list of 'host:port' addresses"
            )
    return parsed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Serve this task of the TF_CONFIG cluster with a TensorFlow "
        "gRPC server until stopped (SIGTERM or SIGINT).",
    )
    parser.add_argument(
        "--protocol",
        default=None,
        help="Server protocol, e.g. grpc or grpc+verbs (default: TF_CONFIG's rpc_layer, "
        "else grpc).",
    )
    return parser


def _catch_stop_signals() -> int:
    """Catch SIGTERM and SIGINT; return a pipe that gets a byte for each one received.

    Python's C-level handler writes the byte (``signal.set_wakeup_fd``), whichever thread the
    signal hits: unlike ``threading.Event.set`` in a handler, this cannot deadlock with the
    main thread, and unlike ``signal.pause`` it cannot miss a signal.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _ignore)
    return read_end


def _stop_requested(signals: int, block: bool) -> bool:
    """Whether SIGTERM or SIGINT has arrived; with ``block``, wait until one does."""
    while block or select.select([signals], [], [], 0)[0]:
        if os.read(signals, 1)[0] in STOP_SIGNALS:
            return True
    return False


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A handler that does nothing: the wakeup fd of :func:`_catch_stop_signals` does the work."""


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    """Serve the task that ``TF_CONFIG`` names until SIGTERM or SIGINT; return the exit code."""
    args = _parser().parse_args(argv)
    try:
        task = parse_tf_config(os.environ.get("TF_CONFIG"))
    except TFConfigError as error:
        return _fail(str(error), EXIT_BAD_INPUT)
    protocol: str = args.protocol or task.rpc_layer or "grpc"

    # Let callers (the coordinator of ParameterServerStrategy) see a lost peer as an error
    # instead of waiting for it forever: the setting TensorFlow's docs give for servers.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

    signals = _catch_stop_signals()
    import tensorflow as tf

    if _stop_requested(signals, block=False):  # stopped while TensorFlow loaded
        return 0
    try:
        server = tf.distribute.Server(
            task.cluster,
            job_name=task.job_name,
            task_index=task.task_index,
            protocol=protocol,
            start=True,
        )
    except (tf.errors.OpError, ValueError) as error:
        message = getattr(error, "message", None) or str(error)
        first_line = message.strip().splitlines()[0] if message.strip() else type(error).__name__
        return _fail(
            f"cannot serve /job:{task.job_name}/task:{task.task_index} at {task.address}: "
            f"{first_line}",
            1,
        )
    print(
        f"{PROG}: /job:{task.job_name}/task:{task.task_index} serving at {server.target}",
        flush=True,
    )
    # Not server.join(): it blocks in C++, where Python signal handlers never run.
    _stop_requested(signals, block=True)
    print(f"{PROG}: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
