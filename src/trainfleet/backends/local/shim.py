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


def _write(path: str, text: str) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def main(argv: list[str]) -> int:
    prefix, separator, *command = argv
    if separator != "--" or not command:
        print("usage: shim.py RECORD_PREFIX -- ARGV...", file=sys.stderr)
        return 2
    # Caught, not ignored: a caught signal is reset to default in the child at exec.
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: None)
    _write(f"{prefix}.pid", str(os.getpid()))
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        print(f"trainfleet: cannot start {command[0]}: {error.strerror or error}", flush=True)
        _write(f"{prefix}.exit", "127")
        return 127
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:
            continue
    _write(f"{prefix}.exit", str(code))
    if code < 0:  # end the way the task did, so our parent sees the same signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
