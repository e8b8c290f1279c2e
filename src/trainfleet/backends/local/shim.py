"""A task's supervisor: runs the task, and records how it ended, whatever happens to trainfleet.

Started as ``python -I -S shim.py RECORD_PREFIX [--tether PID[:GRACE]] -- ARGV...`` in the
task's own session and process group. It writes ``RECORD_PREFIX.pid`` (its own pid) at
once, runs ARGV as its child, writes the child's exit status to ``RECORD_PREFIX.exit``
(atomically) and then ends the way the child did. SIGTERM and SIGINT sent to the group
reach the task; the shim only waits. A server that dies leaves the shim and its task
running; a restarted server finds the ``.pid`` and ``.exit`` records and carries on.
``--tether`` (an embedded ``trainfleet run``) ties the task to that process instead: when
it dies, the task's group gets SIGTERM, then SIGKILL after GRACE seconds.

Standard library only, and no trainfleet import: it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Mapping

DURABLE = True
"""Whether records are synced to disk: a server reads them after any crash. A tethered
task's runner learns its exit from the kernel, so it skips the fsyncs (10 ms a task)."""
TETHER_GRACE = 10.0
"""Seconds a tethered task has between SIGTERM and SIGKILL once its runner died."""


def write_record(path: str, text: str) -> None:
    """Write a record file atomically: readers see all of it or none."""
    temporary = f"{path}.tmp"
    # Owner-only, like every file of the data directory.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(descriptor, "w") as handle:
        handle.write(text)
        handle.flush()
        if DURABLE:
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
        if code != -signal.SIGKILL:  # whose handler cannot be set (and is the default)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def tether(child: int, runner: int, grace: float) -> None:
    """Return once the task has ended, or once ``runner`` died and the task's group was
    ended: SIGTERM, then SIGKILL for what is left after ``grace`` seconds.

    A runner that is not our parent any more has died already (its pid may belong to
    another process by now): it is taken as dead, not watched.
    """
    task = os.pidfd_open(child)
    watched = [task]
    if os.getppid() == runner:
        try:  # noqa: SIM105 (importing contextlib would slow every task's start)
            watched.append(os.pidfd_open(runner))
        except OSError:  # gone between the two calls
            pass
    try:
        if len(watched) > 1 and task in select.select(watched, [], [])[0]:
            return  # the task ended (its runner may live on)
    finally:
        for descriptor in watched:
            os.close(descriptor)
    os.killpg(os.getpid(), signal.SIGTERM)  # the shim itself only catches it
    deadline = time.monotonic() + grace
    while group_members() and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in group_members():
        try:  # noqa: SIM105
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def group_members() -> list[int]:
    """The live processes of the shim's group but the shim (zombies, the task among them
    once it ended, are dead already)."""
    own, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == own:
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                state, _, group = stat.read().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == own and state != "Z":
            found.append(int(name))
    return found


def parse_tether(value: str) -> tuple[int, float]:
    """``PID`` or ``PID:GRACE_SECONDS``."""
    pid, _, grace = value.partition(":")
    return int(pid), float(grace) if grace else TETHER_GRACE


def main(argv: list[str]) -> int:
    global DURABLE
    runner: tuple[int, float] | None = None
    if argv[1:2] == ["--tether"] and len(argv) > 2:
        runner, DURABLE = parse_tether(argv[2]), False
        argv = [argv[0], *argv[3:]]
    prefix, separator, *command = argv
    if separator != "--" or not command:
        print("usage: shim.py RECORD_PREFIX [--tether PID[:GRACE]] -- ARGV...", file=sys.stderr)
        return 2
    # Caught, not ignored: a caught signal is reset to default in the child at exec.
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: None)
    child = start(prefix, command)
    if child is None:
        return 127
    if runner is not None:
        tether(child, *runner)
    return finish(prefix, child)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
