"""Secret values a task prints show as ``***`` in its log: real tasks under the real shim,
started by the local backend with ``TaskLaunch.mask``; without values, the log is the
output byte for byte, through the splice path as before."""

from __future__ import annotations

import base64
import os
import queue
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import missing, wait_for

from trainfleet.backends.api import JobLaunch, Outside, TaskLaunch
from trainfleet.backends.local import LocalBackend
from trainfleet.backends.local.processes import _write_mask_file
from trainfleet.backends.supervision import SHIM
from trainfleet.scheduling.placement import Placement, TaskKey, TaskSlot, task_keys
from trainfleet.spec.models import JobSpec
from trainfleet.store.layout import DataDir
from trainfleet.vault.masking import Masker

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
mask_file = os.environ["TRAINFLEET_ATTEMPT"] + ".mask"
write(b"mask file there: %d\\n" % os.path.exists(mask_file))
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
    assert not list(data_dir.run_dir(job_id).glob("*.mask"))
    return log, (workdir / "raw.out").read_bytes()


def _masked(output: bytes) -> bytes:
    masker = Masker([SECRET])
    return masker.feed(output) + masker.flush()


def test_a_value_split_across_writes_is_masked(reap: Path) -> None:
    log, output = _run(reap, "short", (SECRET,))
    assert log == _masked(output)
    assert log.startswith(b"mask file there: 0\n")  # deleted before the task started
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


def test_the_mask_file_is_private_and_no_launch_shows_its_values(tmp_path: Path) -> None:
    launch = TaskLaunch(
        ("worker", 0), ["true"], {}, tmp_path, tmp_path / "log", tmp_path / "w-0-0", mask=(SECRET,)
    )
    assert SECRET.hex() not in repr(launch) and repr(SECRET) not in repr(launch)
    path = _write_mask_file(launch)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path == tmp_path / "w-0-0.mask"


def test_a_shim_whose_mask_file_cannot_be_read_runs_nothing(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(SHIM),
            str(tmp_path / "w-0-0"),
            "--log",
            str(tmp_path / "log"),
            "--mask-file",
            str(tmp_path / "absent"),
            "--",
            "touch",
            str(ran),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "cannot read the mask file" in done.stderr
    assert not ran.exists()


@pytest.mark.parametrize("masked", [False, True])
def test_the_shim_reads_the_mask_file_before_the_task_starts(tmp_path: Path, masked: bool) -> None:
    """Directly through the shim: the file is gone once the task runs; the values are
    masked in the log; a task's unmasked output is untouched."""
    record = tmp_path / "w-0-0"
    mask_file = tmp_path / "w-0-0.mask"
    mask_file.write_bytes(b"c2VjcmV0LXZhbHVl\n")  # secret-value
    script = "import os,sys; print(os.path.exists(sys.argv[1])); print('a secret-value b')"
    options = ["--mask-file", str(mask_file)] if masked else []
    subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(SHIM),
            str(record),
            "--log",
            str(tmp_path / "log"),
            *options,
            "--",
            sys.executable,
            "-c",
            script,
            str(mask_file),
        ],
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    log = (tmp_path / "log").read_bytes()
    assert log == (b"False\na *** b\n" if masked else b"True\na secret-value b\n")


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
        mask_file = tmp_path / "w.mask"
        mask_file.write_bytes(base64.b64encode(SECRET) + b"\n")
        shim = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                str(SHIM),
                str(tmp_path / "w-0-0"),
                "--log",
                str(disk / "log"),
                "--mask-file",
                str(mask_file),
                "--",
                sys.executable,
                "-S",
                str(tmp_path / "task.py"),
                SECRET.hex(),
                str(tmp_path / "room"),
            ],
        )
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
