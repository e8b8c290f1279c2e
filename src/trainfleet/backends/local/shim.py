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
import sys
from collections.abc import Mapping


def write_record(path: str, text: str) -> None:
    """Write a record file atomically: readers see all of it or none."""
    temporary = f"{path}.tmp"
    # Owner-only, like every file of the data directory.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(descriptor, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def start(
    prefix: str,
    command: list[str],
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
) -> int | None:
    """Record this process's pid and start the task (found on ``env``'s PATH); its pid, or
    None (exit status 127 recorded) when it cannot start."""
    write_record(f"{prefix}.pid", str(os.getpid()))
    env = os.environ if env is None else env
    os.environ["PATH"] = env.get("PATH", os.defpath)  # posix_spawnp searches our own PATH
    try:
        return os.posix_spawnp(command[0], command, env, setsid=new_session)
    except OSError as error:
        print(f"trainfleet: cannot start {command[0]}: {error.strerror or error}", flush=True)
        write_record(f"{prefix}.exit", "127")
        return None


def finish(prefix: str, pid: int) -> int:
    """Wait for the task, record its exit status and end the way it did."""
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
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
