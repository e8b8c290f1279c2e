"""A task's start inside a Slurm allocation: learn where every task landed, then run it.

The batch script starts it as ``python -I -S bootstrap.py LAUNCH_FILE GROUP`` in one step
per component (GROUP) of the job; the n-th task of the step (``SLURM_PROCID``) is the n-th
task of the component. The launch file (written by the backend) holds each task's argv and
environment with a placeholder for every task's host. The bootstrap writes this task's
``RECORD.host`` (its node and Slurm step, as ``tf-node2 41.0``), waits until every task of
the start has written its own, puts the real host names in place of the placeholders, and
runs the task with its log as output, with the local backend's shim (loaded from its file):
``RECORD.pid`` at the start, ``RECORD.exit`` (the exit status) at the end; meanwhile the
shim's ``Sampling`` keeps the task's resource use in the history beside its log (its GPUs:
those Slurm gave the step).

Tasks of one step share it, so a signal for one task comes as a file: the backend writes
``TERM`` or ``KILL`` to ``RECORD.signal`` and the bootstrap sends it to the task's process
group. Signals Slurm sends the bootstrap itself (a cancelled job) go on to the task. A
SIGTERM of Slurm's own (a preemption, the warning ahead of the time limit, a cancel) finds
no ``$TRAINFLEET_STOP_FILE`` of trainfleet's: the bootstrap asks Slurm why (one ``scontrol``)
and writes it there, and in ``RECORD.stopped`` for the backend, before passing it on. Slurm
sends its warnings to the batch shell alone (``--signal=B:TERM``), which says so in a file
the bootstraps watch: the task gets SIGTERM after its stop file. What Slurm signals itself
(every process of a step: a cancel, a preemption where the cluster does not send the
user's signal, the time limit reached) reaches the task as soon as its bootstrap.

Standard library only, and no trainfleet import; the launch file is in ``marshal``'s format
and the records are plain text, so that nothing slow to import is needed: it starts in a
few milliseconds.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import signal
import sys
import threading
import time
from types import ModuleType
from typing import Any

POLL_SECONDS = 0.005
SCONTROL_SECONDS = 5.0
"""How long the bootstrap waits for Slurm to say why it sent SIGTERM (the task waits too)."""
EARLY_SECONDS = 65.0
"""How long before its due time Slurm may send the warning of a time limit (its docs say up
to 60 s), with a little more for ``scontrol``'s answer."""
STOP_VARIABLE = "TRAINFLEET_STOP_FILE"
SIGNAL_POLL_SECONDS = 0.1
GPUS_FROM_SLURM = "<trainfleet:gpus-from-slurm>"
"""In a container's argv: where its ``--device`` options go, one per GPU of the step (the
same text as ``trainfleet.backends.supervision.containers.GPUS_FROM_SLURM``)."""


def _read_host(record: str) -> str | None:
    try:
        with open(f"{record}.host") as handle:
            return handle.read().split()[0]
    except (OSError, IndexError):
        return None


def _hosts(tasks: dict[str, dict[str, Any]], deadline: float) -> dict[str, str] | None:
    """Every task's host by its token, once each has written it in its record; None when
    the deadline passes first."""
    hosts: dict[str, str] = {}
    while True:
        for name, task in tasks.items():
            if name not in hosts and (host := _read_host(task["record"])) is not None:
                hosts[name] = host
        if len(hosts) == len(tasks):
            return {task["token"]: hosts[name] for name, task in tasks.items()}
        if time.monotonic() > deadline:
            missing = ", ".join(sorted(set(tasks) - set(hosts)))
            print(f"trainfleet: tasks {missing} did not start in time", file=sys.stderr)
            return None
        time.sleep(POLL_SECONDS)


def _placed(text: str, tokens: dict[str, str]) -> str:
    for token, host in tokens.items():
        text = text.replace(token, host)
    return text


def _signal(pid: int, number: int) -> None:
    try:  # noqa: SIM105 (contextlib takes longer to import than this whole script)
        os.killpg(pid, number)
    except ProcessLookupError:
        pass


def _seconds(duration: str) -> float | None:
    """Seconds in a Slurm duration (``[D-][[HH:]MM:]SS``); None for ``UNLIMITED`` and such.

    >>> _seconds("1-02:03:04"), _seconds("00:01:00"), _seconds("5:30"), _seconds("UNLIMITED")
    (93784.0, 60.0, 330.0, None)
    """
    days, _, clock = duration.rpartition("-")
    try:
        parts = [int(part) for part in clock.split(":")]
        total = int(days or 0) * 86_400
    except ValueError:
        return None
    for part, unit in zip(reversed(parts), (1, 60, 3600), strict=False):
        total += part * unit
    return float(total)


def slurm_reason(shown: str, warning: float) -> str:
    """Why Slurm sends a job SIGTERM, from ``scontrol -o show job``'s line: ``preempted``
    (it has a PreemptTime), ``time-limit`` (at most ``warning`` seconds, the ``--signal``
    lead, are left, give or take Slurm's minute), else ``cancelled``.

    >>> slurm_reason("JobId=7 RunTime=00:00:31 TimeLimit=00:01:00 PreemptTime=None", 20)
    'time-limit'
    >>> slurm_reason("RunTime=00:00:02 TimeLimit=UNLIMITED PreemptTime=2026-01-01T00:00:00", 0)
    'preempted'
    >>> slurm_reason("JobId=7 RunTime=00:00:02 TimeLimit=1-00:00:00 PreemptTime=None", 20)
    'cancelled'
    """
    fields: dict[str, str] = {}
    for field in shown.split():  # the first of each: a Command= could hold more
        key, equals, value = field.partition("=")
        if equals:
            fields.setdefault(key, value)
    if fields.get("PreemptTime", "None") not in ("None", "Unknown", ""):
        return "preempted"
    limit = _seconds(fields.get("TimeLimit", ""))
    ran = _seconds(fields.get("RunTime", ""))
    if limit is not None and ran is not None and limit - ran <= warning + EARLY_SECONDS:
        return "time-limit"
    return "cancelled"


def _ask_slurm(job: str, warning: float) -> str | None:
    """Why Slurm signals ``job`` (see ``slurm_reason``); None where it does not answer."""
    import subprocess  # here: only a signal needs it, and it takes a while to import

    try:
        shown = subprocess.run(
            ["scontrol", "-o", "show", "job", job],
            capture_output=True,
            text=True,
            timeout=SCONTROL_SECONDS,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return slurm_reason(shown, warning) if f"JobId={job} " in shown else None


def write_stop_file(path: str, why: str) -> bool:
    """Write ``why`` to the stop file ``path`` unless one is there already (trainfleet's):
    a new file under another name, linked into place whole, its group the folder's (the
    task's account's), never through a link; whether it was written."""
    folder, name = os.path.split(path)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        directory = os.open(folder, flags)
    except OSError:
        return False
    temporary = f".{name}.{os.getpid()}.tmp"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(temporary, flags, 0o600, dir_fd=directory)
        try:
            try:  # noqa: SIM105 (contextlib takes longer to import than this whole script)
                os.fchown(descriptor, -1, os.fstat(directory).st_gid)
            except PermissionError:  # not a group of ours: the file stays our group's
                pass
            os.fchmod(descriptor, 0o640)
            os.write(descriptor, f"{why}\n".encode())
        finally:
            os.close(descriptor)
        try:
            os.link(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary, dir_fd=directory)
        return True
    except OSError:
        return False
    finally:
        os.close(directory)


class _Stops:
    """A running task's SIGTERMs from Slurm: each one after why is in its stop file."""

    def __init__(self, shim: ModuleType, record: str, stop_file: str | None) -> None:
        self.shim, self.record, self.stop_file = shim, record, stop_file
        self.pid: int | None = None
        """The task's, once started (``started``)."""
        self.sent: list[int] = []
        """The signals the task was sent (the first decides the exit of a container that
        its runtime's client left behind, see the shim's ``finish``)."""
        self.early: list[int] = []
        """Those sent before it was started: sent to it once it is."""
        self.job = ""
        """The Slurm job to ask why (none: nothing is asked, nor written)."""
        self.warning = 0.0
        """Seconds ahead of the time limit that Slurm warns the batch shell."""
        self.warned: str | None = None
        """The file the batch shell creates when Slurm warns it (see batch_script)."""

    def terminate(self) -> None:
        """SIGTERM the task, once its stop file says why (unless trainfleet's said it)."""
        stop_file = self.stop_file
        if stop_file and self.job and not os.path.lexists(stop_file):
            why = _ask_slurm(self.job, self.warning)
            if why is not None and write_stop_file(stop_file, why):
                self.shim.write_record(f"{self.record}.stopped", f"{why}\n")
        self.send(signal.SIGTERM)

    def send(self, number: int) -> None:
        """Send the task's process group ``number`` (once it runs, if not yet)."""
        self.sent.append(number)
        if self.pid is None:
            self.early.append(number)
        else:
            _signal(self.pid, number)

    def started(self, pid: int) -> None:
        self.pid = pid
        while self.early:
            _signal(pid, self.early.pop(0))

    def pass_on(self, number: int, _: object = None) -> None:
        """A signal Slurm sent this step's processes (the task has it too, or soon will)."""
        if number == signal.SIGTERM:
            self.terminate()
        else:
            self.send(number)

    def obey(self, ended: threading.Event) -> None:
        """Send the task the signals the backend asks for in ``RECORD.signal``, and
        SIGTERM once the batch shell says Slurm warned the job."""
        path, warned = f"{self.record}.signal", self.warned
        while not ended.wait(SIGNAL_POLL_SECONDS):
            if warned is not None and os.path.exists(warned):
                warned = None
                self.terminate()
            try:
                with open(path) as handle:
                    name = handle.read().strip()
                os.remove(path)
            except FileNotFoundError:
                continue
            if name in ("TERM", "KILL"):
                self.send(getattr(signal, f"SIG{name}"))


def _supervise(
    shim: ModuleType,
    record: str,
    command: list[str],
    env: dict[str, str],
    usage: tuple[str, float, list[int], str | None] | None = None,
    slurm: tuple[str, float, str | None] | None = None,
    container: str | None = None,
) -> int:
    """Run the task under the shim's records; ``usage``: sample it (the history's path,
    seconds between samples, its GPUs, NVML's file); ``slurm``: the Slurm job, its time
    limit's warning and its ``warned`` file, to say why Slurm stops it (see the module's
    text); ``container``: the name of the container that the task (its runtime's client,
    ``command``) runs, removed once the client has ended (see the shim's ``Container``)."""
    stops = _Stops(shim, record, env.get(STOP_VARIABLE))
    if slurm is not None:
        stops.job, stops.warning, stops.warned = slurm
    # Before the start: a signal that comes meanwhile is passed on once the task runs.
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, stops.pass_on)
    pid = shim.start(record, command, env, new_session=True, stops=stops)
    if pid is None:
        return 127
    sampling = shim.Sampling(pid, *usage) if usage else None
    ended = threading.Event()
    threading.Thread(target=stops.obey, args=(ended,), daemon=True).start()
    runtime = shim.Container(command[0], container, env) if container else None
    try:
        # Leftovers (a container's processes among them) end with the task, as Slurm would
        # end the rest of the step; the runtime starts a container outside of it.
        return int(shim.finish(record, pid, None, True, sampling, runtime, stops))
    finally:
        ended.set()


def _pass_gpus(command: list[str], env: dict[str, str], gpus: str | None) -> None:
    """Give a container the step's GPUs as CDI devices; it sees them numbered from 0."""
    devices = [gpu for gpu in (gpus or "").split(",") if gpu]
    at = command.index(GPUS_FROM_SLURM)
    command[at : at + 1] = [f"--device=nvidia.com/gpu={gpu}" for gpu in devices]
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = env["TRAINFLEET_GPUS"] = ",".join(
            str(n) for n in range(len(devices))
        )


def _load_shim(path: str) -> ModuleType:
    """The local backend's shim (its record writing), loaded from its file."""
    spec = importlib.util.spec_from_file_location("trainfleet_shim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    launch_file, group = argv
    with open(launch_file, "rb") as handle:
        launch = marshal.load(handle)
    shim = _load_shim(launch["shim"])
    tasks: dict[str, dict[str, Any]] = launch["tasks"]
    me = tasks[launch["groups"][int(group)][int(os.environ["SLURM_PROCID"])]]
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    # A component of a heterogeneous job has its own job id: its steps are named by it.
    job = os.environ.get(f"SLURM_JOB_ID_HET_GROUP_{group}") or os.environ.get("SLURM_JOB_ID")
    step = f"{job}.{os.environ.get('SLURM_STEP_ID', '')}"
    shim.write_record(f"{me['record']}.host", f"{host} {step}\n")
    # The tasks of this start, and the running ones it joins (a task restarted alone).
    deadline = time.monotonic() + launch["rendezvous_timeout"]
    tokens = _hosts({**launch.get("peers", {}), **tasks}, deadline)
    if tokens is None:
        shim.write_record(f"{me['record']}.exit", "75")  # EX_TEMPFAIL: trying again may work
        return 75
    # The task's own environment, and what Slurm says of the step (SLURM*), nothing more.
    env = {key: value for key, value in os.environ.items() if key.startswith("SLURM")}
    env.update({key: _placed(value, tokens) for key, value in me["env"].items()})
    slurm_gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    # The devices Slurm gave the step; for a fraction (GPU shards), the GPU they are of,
    # Slurm's SLURM_SHARDS_ON_NODE saying how many.
    if me["gpus"] and slurm_gpus:
        env["CUDA_VISIBLE_DEVICES"] = env["TRAINFLEET_GPUS"] = slurm_gpus
    command = [_placed(arg, tokens) for arg in me["argv"]]
    if GPUS_FROM_SLURM in command:
        _pass_gpus(command, env, slurm_gpus if me["gpus"] else None)
    os.makedirs(os.path.dirname(me["log"]), exist_ok=True)
    log = os.open(me["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    try:
        os.chdir(me["cwd"])
    except OSError as error:
        print(f"trainfleet: cannot start the task: {error}", flush=True)
        shim.write_record(f"{me['record']}.exit", "127")
        return 127
    usage = None
    if me.get("usage") and me.get("usage_every", 0) > 0:
        gpus = [int(gpu) for gpu in (slurm_gpus or "").split(",") if gpu.isdigit()]
        usage = (me["usage"], me["usage_every"], gpus if me["gpus"] else [], launch.get("nvml"))
    slurm = (job, float(launch.get("time_warning", 0)), launch.get("warned")) if job else None
    return _supervise(shim, me["record"], command, env, usage, slurm, me.get("container"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
