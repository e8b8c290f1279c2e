"""Secret values a task prints show as ``***`` in its log: real tasks under the real shim,
started by the local backend with ``TaskLaunch.mask``; without values, the log is the
output byte for byte, through the splice path as before."""

from __future__ import annotations

import base64
import os
import queue
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import missing, wait_for

from trainfleet.backends.api import NotStarted, Outside
from trainfleet.backends.launch import JobLaunch
from trainfleet.backends.local import LocalBackend
from trainfleet.backends.supervision import SHIM
from trainfleet.backends.supervision.masking import Masker
from trainfleet.backends.supervision.shim import options as shim_options
from trainfleet.datadir.layout import DataDir
from trainfleet.scheduling.placement import Placement, TaskKey, TaskSlot, task_keys
from trainfleet.spec.models import JobSpec

SECRET = b"s3cr\x00t-\xff\nvalue-42"
"""Any byte may be in a value: a NUL, a newline, bytes that are no UTF-8."""
CAP = 64 << 10
# Writes SECRET cut into pieces of every size, pausing between them so that the shim reads
# them apart; "long" then writes far more than the cap, with SECRET on some lines. Every
# byte also goes to raw.out, the output as the task wrote it.
TASK = """\
import os, sys, time
secret = bytes.fromhex(sys.argv[1])
raw = open("raw.out", "wb")
def write(data):
    raw.write(data)
    raw.flush()
    while data:
        data = data[os.write(1, data):]
write(b"stdin: %r\\n" % os.read(0, 100))
for size in range(1, len(secret) + 1):
    write(b"pieces of %d: " % size)
    for at in range(0, len(secret), size):
        write(secret[at : at + size])
        time.sleep(0.001)
    write(b" end\\n")
if sys.argv[2] == "long":
    for n in range(40_000):
        write(b"line %d %s\\n" % (n, secret if n % 997 == 0 else b"plain"))
    write(b"last " + secret[:7])
    time.sleep(0.05)
    write(secret[7:] + b"\\n")
"""


class Reports:
    def __init__(self) -> None:
        self.exits: queue.Queue[tuple[TaskKey, int]] = queue.Queue()

    def exited(self, key: TaskKey, returncode: int, outside: Outside | None = None) -> None:
        self.exits.put((key, returncode))

    def placed(self, key: TaskKey, address: str, note: str) -> None:
        pass


def _run(root: Path, length: str, mask: tuple[bytes, ...]) -> tuple[bytes, bytes]:
    """Run the task through the local backend; its log and its raw output."""
    workdir = root / f"work-{length}-{len(mask)}"
    workdir.mkdir()
    (workdir / "task.py").write_text(TASK)
    command = ["python", "-S", "task.py", SECRET.hex(), length]
    spec = JobSpec.model_validate({"name": "masked", "roles": {"worker": {"command": command}}})
    backend = LocalBackend(supervised=True, log_cap=CAP)
    job_id = f"masked-{workdir.name}"
    addresses = backend.reserve(job_id, spec)
    slots = tuple(TaskSlot(*key, *addresses[key], ()) for key in task_keys(spec))
    attempts = dict.fromkeys(task_keys(spec), 0)
    data_dir = DataDir(root / "data")
    job = JobLaunch(job_id, spec, Placement(slots), workdir, data_dir, attempts, mask=mask)
    reports = Reports()
    try:
        backend.start(job, reports)
        assert reports.exits.get(timeout=120) == (("worker", 0), 0)
    finally:
        backend.release(job_id)
    log = backend.log_path(data_dir, job_id, ("worker", 0)).read_bytes()
    for path in data_dir.root.rglob("*"):  # no file ever held a value
        if path.is_file() and path != backend.log_path(data_dir, job_id, ("worker", 0)):
            content = path.read_bytes()
            assert SECRET not in content and base64.b64encode(SECRET) not in content, path
    return log, (workdir / "raw.out").read_bytes()


def _masked(output: bytes) -> bytes:
    masker = Masker([SECRET])
    return masker.feed(output) + masker.flush()


def test_a_value_split_across_writes_is_masked(reap: Path) -> None:
    log, output = _run(reap, "short", (SECRET,))
    assert log == _masked(output)
    assert log.startswith(b"stdin: b''\n")  # the task's stdin is not the shim's options
    assert log.count(b"***") == len(SECRET)
    assert SECRET not in log


def test_a_value_in_output_over_the_cap_is_masked_in_head_and_tail(reap: Path) -> None:
    log, output = _run(reap, "long", (SECRET,))
    masked = _masked(output)
    assert SECRET not in log
    assert len(log) <= CAP + 1024
    assert log[: CAP // 4] == masked[: CAP // 4]
    assert log.endswith(masked[-CAP // 8 :])
    assert log.endswith(b"last ***\n")
    dropped = [line for line in log.splitlines() if line.endswith(b"bytes dropped here]")]
    assert len(dropped) == 1, dropped
    assert b"line 997 ***\n" in log and b"line 39880 ***\n" in log


def test_without_values_the_log_is_the_output(reap: Path) -> None:
    log, output = _run(reap, "short", ())
    assert log == output
    assert SECRET in log


def test_values_too_short_to_mask_leave_the_output_alone(reap: Path) -> None:
    log, output = _run(reap, "short", (b"s3c", b""))
    assert log == output


def test_no_launch_nor_command_line_shows_the_values_or_the_paths(reap: Path) -> None:
    """The shim's command line, which every account reads, names no record, log or value:
    they come through its standard input."""
    workdir = reap / "work"
    workdir.mkdir()
    spec = JobSpec.model_validate({"name": "masked", "roles": {"worker": {"command": "sleep 60"}}})
    backend = LocalBackend(supervised=True)
    job_id = "masked-cmdline"
    addresses = backend.reserve(job_id, spec)
    slots = tuple(TaskSlot(*key, *addresses[key], ()) for key in task_keys(spec))
    attempts = dict.fromkeys(task_keys(spec), 0)
    job = JobLaunch(
        job_id, spec, Placement(slots), workdir, DataDir(reap / "data"), attempts, mask=(SECRET,)
    )
    launch = job.task(("worker", 0))
    assert SECRET.hex() not in repr(launch) and repr(SECRET) not in repr(launch)
    reports = Reports()
    handle = backend.start(job, reports)[("worker", 0)]
    assert not isinstance(handle, NotStarted), handle
    try:
        pid = int(handle)
        wait_for(lambda: launch.record.with_suffix(".pid").exists(), what="the shim's pid record")
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        assert command == [sys.executable.encode(), b"-I", b"-S", bytes(SHIM), b"-"]
    finally:
        backend.stop(handle, force=True)
        reports.exits.get(timeout=60)
        backend.release(job_id)


def _shim(options: list[str], mask: tuple[bytes, ...] = (), **run: Any) -> Any:
    """Run the shim with ``options`` (and ``mask``) on its standard input, as the backend does."""
    argv = [sys.executable, "-I", "-S", str(SHIM), "-"]
    return subprocess.run(argv, input=shim_options(options, mask), timeout=60, **run)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (["--mask", "@@not base64@@"], "cannot read the values to mask"),
        ([], "usage: shim.py"),  # options cut short: no "--" and no command
    ],
)
def test_a_shim_whose_options_cannot_be_read_runs_nothing(
    tmp_path: Path, options: list[str], error: str
) -> None:
    ran = tmp_path / "ran"
    command = ["--", "touch", str(ran)] if options else []
    done = _shim(
        [str(tmp_path / "w-0-0"), "--log", str(tmp_path / "log"), *options, *command],
        capture_output=True,
        text=False,
    )
    assert done.returncode == 2
    assert error in done.stderr.decode()
    assert not ran.exists()


def test_values_to_mask_on_the_command_line_are_refused(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    argv = [sys.executable, "-I", "-S", str(SHIM), str(tmp_path / "w-0-0")]
    argv += ["--mask", "c2VjcmV0LXZhbHVl", "--", "touch", str(ran)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--mask is read from standard input only" in done.stderr
    assert not ran.exists()


@pytest.mark.parametrize("masked", [False, True])
def test_the_shim_reads_its_options_before_the_task_starts(tmp_path: Path, masked: bool) -> None:
    """Directly through the shim: its options come on its standard input, which the task
    finds empty; the values are masked in the log; a task's unmasked output is untouched."""
    script = "import sys; print(repr(sys.stdin.read())); print('a secret-value b')"
    command = [sys.executable, "-c", script]
    options = [str(tmp_path / "w-0-0"), "--log", str(tmp_path / "log"), "--", *command]
    mask = (b"secret-value",) if masked else ()
    _shim(options, mask, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log = (tmp_path / "log").read_bytes()
    assert log == (b"''\na *** b\n" if masked else b"''\na secret-value b\n")


# Writes lines with the value until told the disk has room again, then some more.
FILLING = """\
import os, sys, time
secret, room = bytes.fromhex(sys.argv[1]), sys.argv[2]
n = 0
while not os.path.exists(room) or n < 40_000:
    os.write(1, b"line %d %s\\n" % (n, secret if n % 7 == 0 else b"plain"))
    n += 1
for n in range(100):
    os.write(1, b"after %d %s\\n" % (n, secret))
    time.sleep(0.02)
"""


def test_output_dropped_on_a_full_disk_leaks_no_part_of_a_value(tmp_path: Path) -> None:
    """The log's disk fills while the task writes lines with the value: the log says how
    much was dropped and goes on once there is room; the value never shows."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        missing("cannot mount a tmpfs here (root is needed)")
    try:
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (900 << 10))
        (tmp_path / "task.py").write_text(FILLING)
        options = [str(tmp_path / "w-0-0"), "--log", str(disk / "log"), "--"]
        options += [sys.executable, "-S", str(tmp_path / "task.py"), SECRET.hex()]
        shim = subprocess.Popen([sys.executable, "-I", "-S", str(SHIM), "-"], stdin=subprocess.PIPE)
        assert shim.stdin is not None
        with shim.stdin:
            shim.stdin.write(shim_options([*options, str(tmp_path / "room")], (SECRET,)))
        log = disk / "log"
        wait_for(lambda: log.exists() and log.stat().st_size > 100 << 10, what="a full disk")
        time.sleep(0.3)  # output dropped meanwhile
        filler.unlink()
        (tmp_path / "room").touch()
        assert shim.wait(timeout=120) == 0
        text = log.read_bytes()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    assert SECRET not in text
    assert any(line.endswith(b"bytes dropped here: disk full]") for line in text.splitlines())
    assert text.endswith(b"after 99 ***\n")
    pieces = {SECRET[at : at + 4] for at in range(len(SECRET) - 3)}
    assert not [piece for piece in pieces if piece in text]  # nor a part cut by the gap
