"""``trainfleet run-function [--python X.Y] PAYLOAD``: one task of a function sent as a job.

Run by the task's own python (standard library only here; unpickling the function needs
the ``cloudpickle`` it was sent with). PAYLOAD, in the job's folder, is a JSON header line
then the pickled ``(function, args, kwargs)``. Every task calls the function; rank 0
(``RANK``, else worker 0) leaves what it returned in ``$TRAINFLEET_OUTPUT_DIR/result.pkl``,
and a task whose call raises leaves ``error-<role>-<index>.json`` there (type, message,
traceback), prints the traceback and exits 1.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import traceback
from pathlib import Path

RESULT = "result.pkl"
"""Rank 0's result in the job's output (read back by ``functions.outcome``)."""
MAX_RESULT = 64 << 20
"""Bytes a result may take once pickled; a bigger one is refused with its size."""


class FunctionFailed(Exception):
    """The call could not be made or its result not kept; the message says why."""


def main(argv: list[str]) -> int:
    payload = Path(argv[-1])
    try:
        header, body = payload.read_bytes().split(b"\n", 1)
        wanted = json.loads(header).get("python", "")
        here = "{}.{}".format(*sys.version_info[:2])
        if wanted and wanted != here:
            raise FunctionFailed(
                f"the function was sent from Python {wanted}, but this task runs Python "
                f"{here} ({sys.executable}): give the job an environment with Python {wanted}"
            )
        sys.path.insert(0, os.getcwd())  # the caller's modules sent by reference, if any
        function, args, kwargs = pickle.loads(body)
        result = function(*args, **kwargs)
        if _is_rank_zero():
            _keep(RESULT, _pickled(result))
        _close_process_group()
    except BaseException as error:  # every failure is the caller's to see
        _report(error)
        return 130 if isinstance(error, KeyboardInterrupt) else 1
    return 0


def _close_process_group() -> None:
    """Close the torch.distributed process group the function left open: gloo's threads,
    still running as the interpreter exits, abort the task (SIGABRT, "terminate called
    without an active exception") after a call that succeeded."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is None or not distributed.is_available() or not distributed.is_initialized():
        return
    try:
        distributed.destroy_process_group()
    except Exception as error:  # the call succeeded and its result is kept: say so only
        print(f"trainfleet: could not close the process group: {error}", file=sys.stderr)


def _is_rank_zero() -> bool:
    rank = os.environ.get("RANK")
    if rank is not None:
        return rank == "0"
    return os.environ.get("TRAINFLEET_INDEX", "0") == "0"


def _pickled(result: object) -> bytes:
    try:
        import cloudpickle  # type: ignore[import-untyped,unused-ignore]

        data: bytes = cloudpickle.dumps(result)
    except ImportError:
        data = pickle.dumps(result)
    if len(data) > MAX_RESULT:
        raise FunctionFailed(
            f"the result takes {len(data)} bytes pickled, over the cap of {MAX_RESULT} "
            "(64 MiB): write large results to a file instead"
        )
    return data


def _keep(name: str, data: bytes) -> None:
    """Write output ``name`` whole, or not at all (a reader never sees half of it)."""
    folder = _output_dir()
    partial = folder / f".{name}.{os.getpid()}"
    partial.write_bytes(data)
    os.replace(partial, folder / name)


def _report(error: BaseException) -> None:
    text = "".join(traceback.format_exception(error))
    print(text, end="", file=sys.stderr, flush=True)
    role, index = os.environ.get("TRAINFLEET_ROLE", "task"), os.environ.get("TRAINFLEET_INDEX")
    kind = type(error)
    report = {
        "task": f"{role}/{index}",
        "type": kind.__name__ if kind.__module__ == "builtins" else kind.__qualname__,
        "module": kind.__module__,
        "message": str(error),
        "traceback": text,
    }
    try:
        _keep(f"error-{role}-{index}.json", json.dumps(report).encode())
    except (OSError, FunctionFailed) as problem:
        print(f"trainfleet: could not keep the error: {problem}", file=sys.stderr)


def _output_dir() -> Path:
    folder = os.environ.get("TRAINFLEET_OUTPUT_DIR")
    if not folder:
        raise FunctionFailed("TRAINFLEET_OUTPUT_DIR is not set: not run by trainfleet")
    return Path(folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
