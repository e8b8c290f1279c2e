"""A task's supervisor: runs the task, and records how it ended, whatever happens to trainfleet.

Started as ``python -I -S shim.py RECORD_PREFIX -- ARGV...`` in the task's own session and
process group. It writes ``RECORD_PREFIX.pid`` (its own pid) at once, runs ARGV as its
child, writes the child's exit status to ``RECORD_PREFIX.exit`` (atomically) and then ends
the way the child did. SIGTERM and SIGINT sent to the group reach the task; the shim only
waits. A server that dies leaves the shim and its task running; a restarted server finds
the ``.pid`` and ``.exit`` records and carries on.

Standard library only, and no trainfleet import: it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any


def write_record(path: str, text: str) -> None:
    """Write a record file atomically: readers see all of it or none."""
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def start(prefix: str, command: list[str], **popen: Any) -> subprocess.Popen[bytes] | None:
    """Record this process's pid and start the task; None (exit 127 recorded) if it cannot."""
    write_record(f"{prefix}.pid", str(os.getpid()))
    try:
        return subprocess.Popen(command, **popen)
    except OSError as error:
        print(f"trainfleet: cannot start {command[0]}: {error.strerror or error}", flush=True)
        write_record(f"{prefix}.exit", "127")
        return None


def finish(prefix: str, child: subprocess.Popen[bytes]) -> int:
    """Wait for the task, record its exit status and end the way it did."""
    code = child.wait()
    write_record(f"{prefix}.exit", str(code))
    if code < 0:  # so that our parent sees the same signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def main(argv: list[str]) -> int:
    prefix, separator, *command = argv
    if separator != "--" or not command:
        print("usage: shim.py RECORD_PREFIX -- ARGV...", file=sys.stderr)
        return 2
    # Caught, not ignored: a caught signal is reset to default in the child at exec.
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: None)
    child = start(prefix, command)
    return 127 if child is None else finish(prefix, child)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
