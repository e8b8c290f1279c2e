"""A task's supervisor: runs the task, and records how it ended, whatever happens to trainfleet.

Started as ``python -I -S shim.py -`` in the task's own session and process group, its
options read from its standard input (``options``: NUL-separated, until the end), so that
its command line, which every account may read in ``/proc/PID/cmdline``, names no path of
the job and no secret. The options are ``RECORD_PREFIX [--log PATH [--log-cap BYTES]
[--mask B64,...]] [--tether PID[:GRACE]] [--usage PATH --usage-every SECONDS [--gpus
I,... --nvml PYNVML_FILE]] [--container NAME] [--open-files SOFT_LIMIT] -- ARGV...``; they
may also be given as the command line itself (``--mask`` excepted). The task's standard
input is ``/dev/null``. ``--open-files``: the task's soft limit of open files (a server
raises its own, see ``backends/local/fdlimit.py``, and gives its tasks the one it had).

The shim writes ``RECORD_PREFIX.pid`` (its own pid) at once, runs ARGV as its child, writes
the child's exit status to ``RECORD_PREFIX.exit`` (atomically) and then ends the way the
child did. SIGTERM and SIGINT sent to the group reach the task; the shim only waits (one
that came before the task started is sent to it once it has). A server that dies leaves the
shim and its task running; a restarted server finds the ``.pid`` and ``.exit`` records and
carries on (it knows its shims by the attempt's mark in their environment, which only their
own account reads). ``--tether`` (an embedded ``trainfleet run``) ties the task to that
process instead: when it dies, the task's group gets SIGTERM, then SIGKILL after GRACE
seconds, and then every process that still carries the attempt's mark
(``TRAINFLEET_ATTEMPT``, in its environment: a container's, which its runtime started
outside the group) is killed.

``--container NAME``: the task is the container NAME, ARGV its runtime's client (``podman
run --name NAME ...``). The client may end at any moment of the container's start and leave
it behind (a stop during its creation: created, its monitor waiting); once the client has
ended, for whatever reason, the shim removes the container by its name (``Container``).
Where the shim itself is killed, the backend does (``backends/local/processes.py``).

``--log``: the task's stdout and stderr go through a pipe that the shim moves into the log
(``splice``, no copy through Python), keeping at most ``--log-cap`` bytes: all of an output
that fits, else the head, then a rolling tail added when the task ends, with a line that says
how much was dropped between.
A full disk never loses the exit status: records are written again, with backoff, until
they fit; output that cannot be written meanwhile is dropped, and the log says how much.

``--mask``: secret values (each in base64, separated by commas) to mask in the log, only
ever through the standard input: no file holds them, and no command line shows them. Every
occurrence of a value is written as ``***``. Only a task with values has its output read,
masked and written by the shim instead of spliced, and only then is ``masking.py`` loaded
(beside this file: the masker trainfleet uses too, kept to the standard library for the
shim's sake). Others run no masking code.

``--usage``: the task's process tree is sampled every ``--usage-every`` seconds (CPU, RSS,
and with ``--gpus``, the host indices of its GPUs, their utilisation and its own GPU
memory through NVML, the ``pynvml`` module at ``--nvml``) into a history at PATH (see
``Sampling``). Sampling never stops the task, nor the shim: a sample that fails is skipped.

Standard library only, and no trainfleet import: it starts in a few milliseconds.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Mapping

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (mypy reads it so)
if TYPE_CHECKING:
    from typing import Any

    from trainfleet.backends.supervision.masking import Masker

ATTEMPT_VARIABLE = "TRAINFLEET_ATTEMPT"
"""Set in every task's environment to its attempt's record prefix: the kernel shows it in
``/proc/PID/environ``, which finds the attempt's processes when pids have been reused."""
DURABLE = True
"""Whether records are synced to disk: a server reads them after any crash. A tethered
task's runner learns its exit from the kernel, so it skips the fsyncs (10 ms a task)."""
TETHER_GRACE = 10.0
"""Seconds a tethered task has between SIGTERM and SIGKILL once its runner died."""
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
RETRY_FIRST, RETRY_MOST = 0.05, 2.0
"""Seconds between two tries at a write the disk had no room for: doubling, up to the most."""
LOG_CAP = 1 << 30
"""Bytes a task's log keeps (its first and last halves) when ``--log-cap`` is not given."""
PIPE_SIZE = 1 << 20
CHUNK = 1 << 20


def write_record(path: str, text: str) -> None:
    """Write a record file atomically: readers see all of it or none. While the disk is
    full it tries again, with backoff, until the record fits: a status is never lost."""
    pause = RETRY_FIRST
    while True:
        try:
            write_atomically(path, text)
            return
        except OSError as error:
            if error.errno not in DISK_FULL:
                raise
        time.sleep(pause)
        pause = min(2 * pause, RETRY_MOST)


def write_atomically(path: str, text: str, durable: bool | None = None) -> None:
    """Write a record file atomically, once (OSError as it came, nothing left behind);
    ``durable``: synced to disk (default ``DURABLE``)."""
    temporary = f"{path}.tmp"
    try:
        # Owner-only, like every file of the data directory.
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(descriptor, "w") as handle:
            handle.write(text)
            handle.flush()
            if DURABLE if durable is None else durable:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError:
        try:  # noqa: SIM105 (importing contextlib would slow every task's start)
            os.unlink(temporary)
        except OSError:
            pass
        raise


def start(
    prefix: str,
    command: list[str],
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
    capture: Capture | None = None,
    stops: Stops | None = None,
) -> int | None:
    """Record this process's pid and start the task (found on ``env``'s PATH), its output
    into ``capture`` if given; its pid, or None (exit status 127 recorded) when it cannot
    start. ``stops``: told the task's pid at once (a stop that came first is sent on)."""
    write_record(f"{prefix}.pid", str(os.getpid()))
    env = os.environ if env is None else env
    os.environ["PATH"] = env.get("PATH", os.defpath)  # posix_spawnp searches our own PATH
    try:
        pid = os.posix_spawnp(
            command[0],
            command,
            env,
            setsid=new_session,
            file_actions=capture.file_actions() if capture else (),
        )
    except OSError as error:
        message = f"trainfleet: cannot start {command[0]}: {error.strerror or error}\n"
        if capture:
            capture.note(message)
            capture.close()
        else:
            print(message, end="", flush=True)
        write_record(f"{prefix}.exit", "127")
        return None
    if stops is not None:
        stops.started(pid)
    if capture:
        capture.started()
    return pid


class Stops:
    """The stop signals (SIGTERM, SIGINT, SIGHUP) sent to the task's group, in order, as
    ``handle`` (their handler) sees them. The task has each one, but those that came before
    it was started: ``started`` sends it those."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.early: list[int] = []
        self.pid: int | None = None

    def handle(self, number: int, _: object = None) -> None:
        self.sent.append(number)
        if self.pid is None:
            self.early.append(number)

    def started(self, pid: int) -> None:
        self.pid = pid
        while self.early:
            try:  # noqa: SIM105
                os.kill(pid, self.early.pop(0))
            except ProcessLookupError:
                pass


def finish(
    prefix: str,
    pid: int,
    capture: Capture | None = None,
    leftovers: bool = False,
    sampling: Sampling | None = None,
    container: Container | None = None,
    stops: Stops | None = None,
) -> int:
    """Wait for the task, finish its log, record its exit status and end the way it did.

    ``leftovers``: first end what the task left running (see ``end_marked``), where no
    backend is there to give it its grace period and end it then. ``container``: the task
    is that container's runtime client, and the container is removed once the client has
    ended, whatever state the client left it in. A client that ended with 0 on a stop
    (``stops``: the signals the task was sent) may not have run the task at all (podman's
    client ends with 0 on a SIGTERM while it makes the container): the container's own
    record decides (its exit, where it ran to one; else the stop's signal, not a success).
    """
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if sampling:
        sampling.stop()
    if leftovers:
        end_marked(prefix)
    problem = None
    if container is not None:
        if code == 0 and stops is not None and stops.sent:
            recorded = container.exit_code()
            code = -stops.sent[0] if recorded is None else recorded
        problem = container.remove()
    if capture:
        capture.close()
    if problem:  # after the log is finished: said at its end
        print(f"trainfleet: {problem}", file=sys.stderr, flush=True)
    write_record(f"{prefix}.exit", str(code))
    if code < 0:  # so that our parent sees the same signal
        if code != -signal.SIGKILL:  # whose handler cannot be set (and is the default)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


CONTAINER_SECONDS = 30.0
"""How long the removal of a task's container may take, its monitor's end included."""
RUNTIME_SECONDS = 10.0
"""How long one call of the container runtime may take (one that hangs is tried again)."""
MONITOR_SECONDS = 1.0
"""How long a removed container's monitor has to end on its own."""


class Container:
    """The container that is the task: its runtime's client (the task's program, which
    names it ``--name NAME``) runs it in the foreground, and may end, or be killed, at any
    moment of its start, leaving it behind (created, its monitor and the OCI runtime's init
    waiting), or running. ``remove`` ends and removes it, whatever its state.

    ``runtime``: the client's program (podman's or docker's); ``env``: its environment
    (None: this process's), which the removal is run with too."""

    def __init__(self, runtime: str, name: str, env: Mapping[str, str] | None = None) -> None:
        self.runtime, self.name, self.env = runtime, name, env
        self.podman = os.path.basename(runtime) == "podman"

    def exit_code(self) -> int | None:
        """The exit status that the container recorded, where it ran its program to an
        end (None: it never ran, runs still, or is not there). Podman's only: docker's
        client removes its container (``--rm``), which leaves no record to ask."""
        import subprocess  # here: a task without a container never needs it

        if not self.podman:
            return None
        shown = "{{.State.Status}} {{.State.StartedAt.IsZero}} {{.State.ExitCode}}"
        argv = [self.runtime, "container", "inspect", "--format", shown, self.name]
        try:
            done = subprocess.run(
                argv, env=self.env, capture_output=True, text=True, timeout=RUNTIME_SECONDS
            )
        except (OSError, subprocess.SubprocessError):
            return None
        status, never_started, code = [*done.stdout.split(), "", "", ""][:3]
        ran = done.returncode == 0 and status == "exited" and never_started == "false"
        return int(code) if ran and code.lstrip("-").isdigit() else None

    def remove(self, timeout: float = CONTAINER_SECONDS) -> str | None:
        """Remove the container (its processes killed at once), and wait until podman's
        monitor of it (``conmon``) has ended: what went wrong (None: it is gone, or never
        was)."""
        import subprocess

        options = ["--ignore", "--time", "0"] if self.podman else []
        argv = [self.runtime, "rm", "--force", *options, self.name]
        deadline = time.monotonic() + timeout
        problem = None
        while True:
            left = max(0.1, min(RUNTIME_SECONDS, deadline - time.monotonic()))
            try:
                done = subprocess.run(
                    argv, env=self.env, capture_output=True, text=True, timeout=left
                )
            except OSError as error:  # no runtime: it ran no container either
                problem = f"{error}"
                break
            except subprocess.SubprocessError as error:  # it hangs: try again
                problem = f"{error}"
            else:
                absent = "no such container" in done.stderr.lower()  # docker's word
                if done.returncode == 0 or absent:
                    problem = None
                    break
                problem = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if problem is not None:
            return f"could not remove the container {self.name}: {problem}"
        if self.podman and not end_monitors(self.name, max(0.0, deadline - time.monotonic())):
            return f"the monitor (conmon) of the container {self.name} outlived it"
        return None


def monitors(name: str) -> list[tuple[int, str, list[str]]]:
    """Podman's monitors of the container ``name`` (``conmon ... -c ID -n NAME -r RUNTIME``):
    each one's pid, with the container's ID and the OCI runtime's command (``runc``, ``crun``,
    with the global options conmon gives it, but its log's)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                argv = [os.fsdecode(arg) for arg in handle.read().split(b"\0")]
        except OSError:  # gone meanwhile
            continue
        if os.path.basename(argv[0]) != "conmon" or _option(argv, "-n", "--name") != name:
            continue
        container, runtime = _option(argv, "-c", "--cid"), _option(argv, "-r", "--runtime")
        if container and runtime:
            found.append((int(entry.name), container, [runtime, *_runtime_options(argv)]))
    return found


def _option(argv: list[str], *names: str) -> str | None:
    """The value of the first ``NAME VALUE`` or ``NAME=VALUE`` in ``argv``."""
    for at, word in enumerate(argv):
        if word in names and at + 1 < len(argv):
            return argv[at + 1]
        flag, equals, value = word.partition("=")
        if equals and flag in names:
            return value
    return None


def _runtime_options(argv: list[str]) -> list[str]:
    """The OCI runtime's global options that conmon was given (``--runtime-arg X`` or
    ``--runtime-arg=X``, such as a rootless runtime's ``--root``), less its log's (the
    container's folder, which is gone by now)."""
    given = []
    for at, word in enumerate(argv):
        if word == "--runtime-arg" and at + 1 < len(argv):
            given.append(argv[at + 1])
        elif word.startswith("--runtime-arg="):
            given.append(word.partition("=")[2])
    kept, skip = [], False
    for word in given:
        if skip:
            skip = False
        elif word in ("--log", "--log-format"):
            skip = True
        elif not word.startswith(("--log=", "--log-format=")):
            kept.append(word)
    return kept


def end_monitors(name: str, timeout: float) -> bool:
    """Once the container ``name`` is removed, wait until its monitors have ended (each
    runs the runtime's cleanup of it first); where one outlives ``MONITOR_SECONDS``, its
    container was left to the OCI runtime (a client killed between the runtime's create
    and its own record of it): deleted there (``RUNTIME delete --force ID``, which ends
    its processes), and the monitor killed if it still runs after ``timeout``. Whether
    none is left."""
    import subprocess

    started = time.monotonic()
    deleted = False
    while found := monitors(name):
        waited = time.monotonic() - started
        if waited > timeout:
            for pid, _, _ in found:
                try:  # noqa: SIM105
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
            return not monitors(name)
        if waited > MONITOR_SECONDS and not deleted:
            deleted = True
            for _, container, runtime in found:
                try:  # noqa: SIM105
                    subprocess.run(
                        [*runtime, "delete", "--force", container],
                        capture_output=True,
                        timeout=RUNTIME_SECONDS,
                    )
                except (OSError, subprocess.SubprocessError):
                    pass
        time.sleep(0.02)
    return True


class Capture:
    """Moves a task's output from a pipe into its log, keeping about ``cap`` bytes.

    The log takes the output as it comes, up to the cap. Output past the cap goes to a ring
    of two segment files (``LOG.tail.0``, ``LOG.tail.1``) of a quarter of the cap each: the
    last quarter already in the log becomes the first segment, and the log is cut back to
    its first half (the head). When the task ends, the ring is added to the log after
    ``[trainfleet: N bytes dropped here]`` and deleted. So an output within the cap is in
    the log live and never copied; readers that follow a log by offset see it whole, and
    where a log is cut back below their offset (output past the cap), they go on from its
    new end and see the rest once the task has ended.
    """

    def __init__(self, path: str, cap: int) -> None:
        self.log = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.reader, self.writer = os.pipe()
        self.wake_reader, self.wake_writer = os.pipe()
        try:  # noqa: SIM105 (larger moves, fewer wake-ups; a smaller pipe only costs speed)
            fcntl.fcntl(self.writer, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass
        os.set_blocking(self.reader, False)
        self.segments = (f"{path}.tail.0", f"{path}.tail.1")
        self.segment = max(1, cap // 4)
        start = os.lseek(self.log, 0, os.SEEK_END)  # earlier attempts' output stays whole
        if _remove(self.segments):  # an earlier attempt's shim died before adding its tail
            _write_line(
                self.log,
                "[trainfleet: the rest of the last attempt's output is lost: "
                "its supervisor was killed]\n",
            )
            start = os.lseek(self.log, 0, os.SEEK_CUR)
        self.head = max(start, max(1, cap // 2))  # where the log is cut back past the cap
        self.target = self.log
        self.room = self.head + cap - max(1, cap // 2) - start  # live up to the cap
        self.current = -1  # the ring segment being written (-1: still the log)
        self.past_head = 0  # bytes past the head, once the ring has started
        self.cut_pending = False  # the ring has started, the log is not cut back yet
        self.lost = 0  # bytes dropped while the disk was full, not yet noted in the log
        self.retry_at, self.pause = 0.0, RETRY_FIRST
        self.stop_by: float | None = None  # set once the task has ended
        self.thread = threading.Thread(target=self._run, name="capture", daemon=True)

    def file_actions(self) -> list[tuple[int, int, int]]:
        """The task's stdout and stderr: the pipe."""
        return [(os.POSIX_SPAWN_DUP2, self.writer, 1), (os.POSIX_SPAWN_DUP2, self.writer, 2)]

    def started(self) -> None:
        """The task has the pipe now: move its output until ``close``."""
        os.close(self.writer)
        self.thread.start()

    def close(self) -> None:
        """Once the task has ended: take what is left in the pipe (output of processes it
        left behind included, for a second at most), then finish the log."""
        if self.thread.ident is None:  # never started
            os.close(self.writer)
            self._finish()
        else:
            self.stop_by = time.monotonic() + 1.0
            os.write(self.wake_writer, b"x")
            self.thread.join()
        for descriptor in (self.reader, self.wake_reader, self.wake_writer):
            os.close(descriptor)

    def note(self, text: str) -> None:
        """Write a line of our own where the output is going (best effort)."""
        _write_line(self.target, text)

    def _run(self) -> None:
        try:
            while self.stop_by is None or time.monotonic() < self.stop_by:
                moved = self._move()
                if moved == 0:
                    break  # every writer is gone
                if moved is None:
                    self._wait_for_output()
        except Exception as error:  # said in the log; the task goes on
            self.note(f"[trainfleet: the log stops here: {error!r}]\n")
            self._discard()
        self._finish()

    def _wait_for_output(self) -> None:
        """Until there is output, or the task has ended; once it has, processes it left
        behind (a checkpoint on SIGTERM) still have until ``stop_by`` to write."""
        if self.stop_by is None:
            select.select([self.reader, self.wake_reader], [], [])
        else:
            select.select([self.reader], [], [], max(0.0, self.stop_by - time.monotonic()))

    def _move(self) -> int | None:
        """Move output from the pipe to the log or ring: bytes moved, 0 at the end of the
        output, None when the pipe is empty for now."""
        if self.lost and not self._note_lost():
            return self._drop()
        if self.room <= 0:
            self._next_target()
        try:
            moved = os.splice(
                self.reader, self.target, min(CHUNK, self.room), flags=os.SPLICE_F_NONBLOCK
            )
        except BlockingIOError:
            return None
        except OSError as error:
            if error.errno not in DISK_FULL:
                raise
            return self._drop()
        self._wrote(moved)
        return moved

    def _wrote(self, count: int) -> None:
        """``count`` bytes went to the target; the first past the cap cuts the log back."""
        if count and self.cut_pending:
            self._cut_back()
        self.room -= count
        if self.current >= 0:
            self.past_head += count

    def _next_target(self) -> None:
        """The log is at the cap, or a ring segment is full: go on in the (other) segment,
        emptied. At the cap, the log is cut back once output past it has come."""
        if self.current < 0:
            self.current, self.cut_pending = 0, True
        else:
            os.close(self.target)
        self.current = 1 - self.current
        name = self.segments[self.current]
        self.target = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self.room = self.segment

    def _cut_back(self) -> None:
        """The output passed the cap: the last quarter of the cap in the log becomes the
        ring's older segment, and the log is cut back to its head, which says so."""
        self.cut_pending = False
        end = os.lseek(self.log, 0, os.SEEK_END)
        keep = min(self.segment, end - self.head)
        older = os.open(self.segments[0], os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _copy(self.log, older, end - keep, keep)
        except OSError as error:  # no room for it: the ring starts empty
            if error.errno not in DISK_FULL:
                raise
            os.ftruncate(older, 0)
        finally:
            os.close(older)
        os.ftruncate(self.log, self.head)
        os.lseek(self.log, self.head, os.SEEK_SET)
        self.past_head = end - self.head
        _write_line(
            self.log,
            f"[trainfleet: this log keeps its first {self.head} bytes and the last "
            f"{self.segment}-{2 * self.segment} bytes of the output; they follow when the "
            "task ends]\n",
        )

    def _drop(self) -> int | None:
        """The disk is full: drop what is in the pipe (the task goes on), try again later."""
        try:
            data = os.read(self.reader, CHUNK)
        except BlockingIOError:
            return None
        if self.retry_at == 0.0:
            self.retry_at = time.monotonic() + self.pause
        self.lost += len(data)
        return len(data)

    def _note_lost(self) -> bool:
        """Whether the disk has room again and the log now says what was dropped."""
        if time.monotonic() < self.retry_at:
            return False
        where = self.log if self.cut_pending else self.target  # the ring may never start
        try:
            os.write(where, f"\n[trainfleet: {self.lost} bytes dropped here: disk full]\n".encode())
        except OSError as error:
            if error.errno not in DISK_FULL:
                raise
            self.pause = min(2 * self.pause, RETRY_MOST)
            self.retry_at = time.monotonic() + self.pause
            return False
        self.lost, self.retry_at, self.pause = 0, 0.0, RETRY_FIRST
        return True

    def _discard(self) -> None:
        """Drop the rest of the output, so that the task never blocks on a full pipe."""
        while self.stop_by is None or time.monotonic() < self.stop_by:
            try:
                if not os.read(self.reader, CHUNK):
                    return
            except BlockingIOError:
                if self.stop_by is not None:
                    return
                select.select([self.reader, self.wake_reader], [], [])
            except OSError:
                return

    def _finish(self) -> None:
        """Add the ring (if any) to the log after the line that says what was dropped."""
        if self.cut_pending:  # the output ended at the cap: the log holds all of it
            os.close(self.target)
            _remove(self.segments)
            self.target, self.current, self.cut_pending = self.log, -1, False
        if self.lost:
            self.retry_at = 0.0
            self._note_lost()
        if self.current >= 0:
            os.close(self.target)
            self.target = self.log
            self._append_ring()
        os.close(self.log)

    def _append_ring(self) -> None:
        newer = self.segments[self.current]
        older = self.segments[1 - self.current] if self.past_head > self.segment else None
        sizes = [(name, os.path.getsize(name)) for name in (older, newer) if name]
        # Without the empty: the older one is, where the cut-back's copy found no room.
        parts = [(name, size) for name, size in sizes if size]
        dropped = self.past_head - sum(size for _, size in parts)
        skip = 0
        if dropped and parts:  # start at a line
            with open(parts[0][0], "rb") as first:
                skip = first.read(1 << 16).find(b"\n") + 1
            dropped += skip
        if dropped:
            self.note(f"[trainfleet: {dropped} bytes dropped here]\n")
        try:
            for name, size in parts:
                source = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    _copy(source, self.log, skip, size - skip)
                finally:
                    os.close(source)
                skip = 0
        except OSError as error:
            if error.errno not in DISK_FULL:
                raise
            self.note("[trainfleet: the rest of the output is lost: disk full]\n")
        finally:
            _remove(self.segments)


class MaskingCapture(Capture):
    """A Capture that writes every secret value of the output as ``***`` (in the head and
    in the ring alike): the output is read, masked and written, where Capture splices it.

    The cap counts the bytes written, masked. Output dropped on a full disk is masked all
    the same, so that the masker sees the whole stream: no part of a value cut by the gap
    shows on either side of it.
    """

    def __init__(self, path: str, cap: int, masker: Masker) -> None:
        super().__init__(path, cap)
        self.masker = masker

    def _move(self) -> int | None:
        if self.lost and not self._note_lost():
            return self._drop()
        try:
            data = os.read(self.reader, CHUNK)
        except BlockingIOError:
            return None
        self._write(self.masker.feed(data))
        return len(data)

    def _write(self, data: bytes) -> None:
        """Write masked output to the log or ring, going on in the next segment where one
        is full; on a full disk, drop the rest (counted, as Capture does)."""
        view = memoryview(data)
        while view:
            if self.room <= 0:
                self._next_target()
            try:
                written = os.write(self.target, view[: self.room])
            except OSError as error:
                if error.errno not in DISK_FULL:
                    raise
                self._lose(len(view))
                return
            self._wrote(written)
            view = view[written:]

    def _drop(self) -> int | None:
        try:
            data = os.read(self.reader, CHUNK)
        except BlockingIOError:
            return None
        self._lose(len(self.masker.feed(data)))
        return len(data)

    def _lose(self, count: int) -> None:
        """``count`` bytes of masked output could not be written: say so once there is
        room, as Capture does."""
        if self.retry_at == 0.0:
            self.retry_at = time.monotonic() + self.pause
        self.lost += count

    def _discard(self) -> None:
        self.masker.reset()
        super()._discard()

    def _finish(self) -> None:
        self._write(self.masker.flush())
        super()._finish()


FROM_STDIN = "-"
"""The shim's whole command line when its options come through its standard input."""


def options(argv: list[str], mask: tuple[bytes, ...] = ()) -> bytes:
    """What a shim started as ``shim.py -`` reads from its standard input: ``argv`` (its
    options, as on a command line) and the secret values ``mask``, NUL-separated."""
    import base64

    if mask:
        values = ",".join(base64.b64encode(value).decode() for value in mask)
        argv = ["--mask", values, *argv]
    return b"\0".join(os.fsencode(arg) for arg in argv)


def read_options() -> list[str]:
    """The options sent on standard input (``options``), which becomes ``/dev/null``."""
    data = bytearray()
    while chunk := os.read(0, 1 << 16):
        data += chunk
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return [os.fsdecode(arg) for arg in bytes(data).split(b"\0")] if data else []


def mask_values(text: str) -> list[bytes]:
    """The values of ``--mask`` (base64, comma-separated); ValueError for bad base64."""
    import binascii

    try:
        return [binascii.a2b_base64(value, strict_mode=True) for value in text.split(",") if value]
    except binascii.Error as error:
        raise ValueError(f"not base64: {error}") from None


def load_masker(values: list[bytes]) -> Masker:
    """A masker of ``values``, from ``masking.py`` beside this file: loaded only for a task
    that has secrets, so that the others start as fast as ever."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "masking.py")
    masker: Masker = load_file("trainfleet_masking", path).Masker(values)
    return masker


def load_file(name: str, path: str) -> Any:
    """The module in the file ``path``, loaded as ``name``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # what dataclasses look their module up by
    spec.loader.exec_module(module)
    return module


HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLER = os.path.join(HERE, "sampling.py")
USAGE_FORMAT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "datadir", "usage.py")
"""The history's format, with its writer: ``trainfleet/datadir/usage.py``."""


class Sampling:
    """Samples the task ``child``'s process tree every ``every`` seconds into the history
    at ``path`` (``sampling.py`` beside this file, writing ``datadir/usage.py``'s format),
    on a thread of its own. Both are loaded when the first sample is due, so that a task's
    start pays nothing for them; so is NVML (``nvml``: the ``pynvml`` module's file), for
    the host GPUs ``gpus`` only. Without NVML, CPU and memory are sampled all the same."""

    def __init__(
        self, child: int, path: str, every: float, gpus: list[int], nvml: str | None = None
    ) -> None:
        self.child, self.path, self.every, self.gpus, self.nvml = child, path, every, gpus, nvml
        self.started = time.monotonic()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sampling", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop sampling (the history is closed within a second)."""
        self.stopped.set()
        self.thread.join(1.0)

    def _run(self) -> None:
        if self.stopped.wait(self.every):
            return
        try:
            usage = load_file("trainfleet_usage", USAGE_FORMAT)
            sampling = load_file("trainfleet_sampling", SAMPLER)
        except Exception as error:  # a broken installation: the task runs unsampled
            print(f"trainfleet: no resource sampling: {error!r}", file=sys.stderr, flush=True)
            return
        devices = None
        if self.gpus and self.nvml:
            try:
                devices = sampling.Gpus(load_file("pynvml", self.nvml), self.gpus)
            except Exception:  # no driver or library here: CPU and memory only
                devices = None
        writer = usage.UsageWriter(self.path)
        sampler = sampling.Sampler(
            self.child, self.every, writer, usage.Sample, devices, self.started, self.stopped
        )
        sampler.run()


def _write_line(descriptor: int, text: str) -> None:
    """Write ``text`` at the descriptor's position, on a line of its own (best effort)."""
    data = text.encode()
    try:
        position = os.lseek(descriptor, 0, os.SEEK_CUR)
        if position and os.pread(descriptor, 1, position - 1) != b"\n":
            data = b"\n" + data
        while data:
            data = data[os.write(descriptor, data) :]
    except OSError:
        pass


def _remove(paths: tuple[str, ...]) -> bool:
    """Delete the files that exist; whether there were any."""
    removed = False
    for path in paths:
        try:
            os.unlink(path)
            removed = True
        except FileNotFoundError:
            pass
    return removed


def _copy(source: int, target: int, offset: int, count: int) -> None:
    """Copy ``count`` bytes of ``source`` from ``offset`` to where ``target`` is, in the kernel."""
    while count > 0:
        try:
            moved = os.copy_file_range(source, target, count, offset)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            moved = os.sendfile(target, source, offset, count)
        if moved == 0:
            return
        offset += moved
        count -= moved


def tether(child: int, runner: int, grace: float) -> bool:
    """Return once the task has ended (False), or once ``runner`` died and the task's group
    was ended (True): SIGTERM, then SIGKILL for what is left after ``grace`` seconds.

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
            return False  # the task ended (its runner may live on)
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
    return True


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


def marked_processes(marker: str) -> list[tuple[int, int]]:
    """``(pid, pgid)`` of the live processes whose environment holds ``marker`` (``NAME=value``).

    The kernel shows a process's starting environment in ``/proc/PID/environ``; a zombie's
    reads empty. Processes of other users cannot be read, and are left out.
    """
    needle = b"\0" + marker.encode() + b"\0"
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                environ = handle.read()
            if needle in b"\0" + environ + b"\0":
                found.append((int(entry.name), os.getpgid(int(entry.name))))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def end_marked(record: str, timeout: float = 5.0) -> bool:
    """SIGKILL what is left of the attempt ``record`` but this process, wherever it runs
    (a container's processes, which its runtime started outside the task's group), until
    none is left (False if some outlive ``timeout``)."""
    marker, own = f"{ATTEMPT_VARIABLE}={record}", os.getpid()
    deadline = time.monotonic() + timeout
    while marked := [pid for pid, _ in marked_processes(marker) if pid != own]:
        for pid in marked:
            try:  # noqa: SIM105
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def parse_tether(value: str) -> tuple[int, float]:
    """``PID`` or ``PID:GRACE_SECONDS``."""
    pid, _, grace = value.partition(":")
    return int(pid), float(grace) if grace else TETHER_GRACE


def take_option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    """The value of ``name VALUE`` among the options before ``--``, and argv without it."""
    end = argv.index("--") if "--" in argv else len(argv)
    if name in argv[:end] and argv.index(name) + 1 < end:
        at = argv.index(name)
        return argv[at + 1], argv[:at] + argv[at + 2 :]
    return None, argv


USAGE = (
    "usage: shim.py - (options on standard input) | shim.py RECORD_PREFIX [--log PATH "
    "[--log-cap BYTES]] [--tether PID[:GRACE]] [--usage PATH --usage-every SECONDS "
    "[--gpus I,... --nvml PYNVML_FILE]] [--container NAME] [--open-files SOFT_LIMIT] -- ARGV..."
)


def limit_open_files(soft: int) -> None:
    """Give the task ``soft`` as its limit of open files (the one its server had before it
    raised its own), within the hard limit."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    except (ValueError, OSError):
        return  # the task keeps the server's


def main(argv: list[str]) -> int:
    global DURABLE
    piped = argv == [FROM_STDIN]
    if piped:
        argv = read_options()
    mask_text, argv = take_option(argv, "--mask")
    if mask_text is not None and not piped:  # a command line is every account's to read
        print("trainfleet: --mask is read from standard input only", file=sys.stderr)
        return 2
    log, argv = take_option(argv, "--log")
    cap, argv = take_option(argv, "--log-cap")
    tethered, argv = take_option(argv, "--tether")
    usage, argv = take_option(argv, "--usage")
    every, argv = take_option(argv, "--usage-every")
    gpus, argv = take_option(argv, "--gpus")
    nvml, argv = take_option(argv, "--nvml")
    name, argv = take_option(argv, "--container")
    open_files, argv = take_option(argv, "--open-files")
    if len(argv) < 3 or argv[1] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        sample_every = float(every) if usage and every else 0.0
        devices = [int(gpu) for gpu in (gpus or "").split(",") if gpu]
        soft_limit = int(open_files) if open_files else None
    except ValueError as error:
        print(f"trainfleet: {error}\n{USAGE}", file=sys.stderr)
        return 2
    prefix, _, *command = argv
    try:
        mask = mask_values(mask_text) if mask_text else []
    except ValueError as error:  # never run a task whose secrets would show
        print(f"trainfleet: cannot read the values to mask: {error}", file=sys.stderr)
        return 2
    runner = None
    if tethered is not None:
        runner, DURABLE = parse_tether(tethered), False
    # Caught, not ignored: a caught signal is reset to default in the child at exec.
    stops = Stops()
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, stops.handle)
    if soft_limit is not None:
        limit_open_files(soft_limit)
    capture = None
    if log:
        size = int(cap) if cap else LOG_CAP
        masker = load_masker(mask) if mask else None
        capture = MaskingCapture(log, size, masker) if masker else Capture(log, size)
    child = start(prefix, command, capture=capture, stops=stops)
    if child is None:
        return 127
    sampling = None
    if usage and sample_every > 0:
        sampling = Sampling(child, usage, sample_every, devices, nvml)
    # A dead runner's backend cannot end what the task leaves outside its group.
    orphaned = runner is not None and tether(child, *runner)
    container = Container(command[0], name) if name else None
    return finish(prefix, child, capture, orphaned, sampling, container, stops)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
