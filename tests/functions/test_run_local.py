"""``trainfleet.run``: a function as a job on this machine's engine, with real PyTorch
processes (gloo on CPU)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

import trainfleet
from trainfleet.cli.reading import StoreReader
from trainfleet.domain.errors import BadInput, RemoteError
from trainfleet.functions.payload import Unpicklable


@pytest.fixture
def folders(tmp_path: Path, reap: Path) -> tuple[Path, Path]:
    """The caller's folder (sent) and a data directory apart from it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("sent with the call\n")
    return work, tmp_path / "data"


def _jobs(data: Path) -> list[tuple[str, str]]:
    reader = StoreReader.open(str(data))
    try:
        found = reader.find(state=None, name=None, user=None, labels={}, limit=100)
        return [(job.name, job.state) for job in found]
    finally:
        reader.close()


def test_a_closure_all_reduces_over_gloo_and_rank_zero_answers(
    folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    work, data = folders
    offset = 10  # captured: the function goes by value, with its closure

    def contribute(scale: float) -> float:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        value = torch.tensor([(rank + offset) * scale])
        dist.all_reduce(value)
        print(f"rank {rank} of {dist.get_world_size()} sees {value.item()}")
        print("notes:", Path("notes.txt").read_text().strip())  # the caller's folder came along
        dist.destroy_process_group()
        return value.item() + rank * 1000  # rank 0's is the one returned

    result = trainfleet.run(
        contribute, 2.0, workers=2, framework="pytorch", workdir=work, data_dir=data
    )
    assert result == (10 + 11) * 2.0
    shown = capsys.readouterr().out
    assert "worker/0 | rank 0 of 2 sees 42.0" in shown
    assert "worker/1 | rank 1 of 2 sees 42.0" in shown
    assert "worker/1 | notes: sent with the call" in shown
    assert _jobs(data) == [("contribute", "succeeded")]
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]  # nothing left in it


def test_a_process_group_left_open_is_closed_before_the_task_exits(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """A function that leaves its gloo group open: gloo's threads, still running as the
    interpreter exits, sometimes aborted a task after a call that succeeded (SIGABRT).
    Each task notes, as it exits, whether its group was still open."""
    work, data = folders
    seen = tmp_path / "seen"
    seen.mkdir()

    def leave_it_open(folder: str) -> float:
        import atexit

        import torch
        import torch.distributed as dist

        def note() -> None:
            at_exit = "open" if dist.is_initialized() else "closed"
            Path(folder, os.environ["TRAINFLEET_INDEX"]).write_text(at_exit)

        atexit.register(note)
        dist.init_process_group("gloo")
        value = torch.tensor([1.0])
        dist.all_reduce(value)
        return value.item()

    result = trainfleet.run(
        leave_it_open, str(seen), workers=2, framework="pytorch", workdir=work, data_dir=data
    )
    assert result == 2.0
    assert {p.name: p.read_text() for p in seen.iterdir()} == {"0": "closed", "1": "closed"}


def test_a_raising_function_raises_remote_error_with_the_remote_traceback(
    folders: tuple[Path, Path],
) -> None:
    work, data = folders

    def divide_badly(x: int) -> float:
        if os.environ["TRAINFLEET_INDEX"] == "1":
            raise ValueError(f"cannot use {x} in task 1")
        return x / 2

    with pytest.raises(RemoteError) as caught:
        trainfleet.run(divide_badly, 7, workers=2, framework="generic", workdir=work, data_dir=data)
    error = caught.value
    assert (error.task, error.remote_type, error.remote_message) == (
        "worker/1",
        "ValueError",
        "cannot use 7 in task 1",
    )
    assert "in divide_badly" in error.remote_traceback
    assert "Remote traceback:" in str(error)
    assert _jobs(data) == [("divide-badly", "failed")]


def test_what_cannot_be_pickled_is_named_before_anything_is_stored(
    folders: tuple[Path, Path],
) -> None:
    work, data = folders
    lock = threading.Lock()

    def guarded() -> int:
        with lock:
            return 1

    with pytest.raises(Unpicklable, match=r"'lock', captured by .*guarded: a lock"):
        trainfleet.run(guarded, workdir=work, data_dir=data)

    def counts(items: object) -> int:
        return 0

    with pytest.raises(Unpicklable, match=r"argument 0: a generator"):
        trainfleet.run(counts, (n for n in range(3)), workdir=work, data_dir=data)
    assert not data.exists() or _jobs(data) == []


def test_a_result_over_the_cap_and_another_python_are_refused(
    folders: tuple[Path, Path],
) -> None:
    work, data = folders

    def huge() -> bytes:
        return b"x" * (65 << 20)

    with pytest.raises(RemoteError, match=r"takes \d+ bytes pickled, over the cap"):
        trainfleet.run(huge, framework="generic", workdir=work, data_dir=data)
    with pytest.raises(BadInput, match=r"environment.python: 3.9 differs from this Python"):
        trainfleet.run(huge, environment={"python": "3.9"}, workdir=work, data_dir=data)
    with pytest.raises(BadInput, match="workers"):
        trainfleet.run(huge, workers=0, workdir=work, data_dir=data)


def test_a_module_of_the_callers_folder_goes_as_the_caller_has_it_now(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    work, data = folders
    (work / "shapes.py").write_text("def area(side):\n    return side * side\n")
    monkeypatch.syspath_prepend(str(work))
    import shapes  # type: ignore[import-not-found]

    (work / "shapes.py").write_text("def area(side):\n    return -1\n")  # edited since
    assert trainfleet.run(shapes.area, 3, framework="generic", workdir=work, data_dir=data) == 9


def test_ctrl_c_stops_the_job(folders: tuple[Path, Path]) -> None:
    """A script's Ctrl-C (SIGINT) stops its job and no task is left running."""
    work, data = folders
    (work / "call.py").write_text(
        textwrap.dedent(
            f"""
            import time, trainfleet

            def wait():
                print("waiting", flush=True)
                time.sleep(600)

            trainfleet.run(wait, workers=2, framework="generic", data_dir={str(data)!r})
            """
        )
    )
    script = subprocess.Popen(
        [sys.executable, "call.py"], cwd=work, stdout=subprocess.PIPE, text=True
    )
    assert script.stdout is not None
    seen = ""
    while "waiting" not in seen:
        seen += script.stdout.readline()
        assert script.poll() is None, seen
    script.send_signal(signal.SIGINT)
    assert script.wait(timeout=60) != 0
    assert _jobs(data) == [("wait", "cancelled")]
    time.sleep(0.5)
    assert not [task for task in psutil.process_iter() if _runs_in(task, data)]


def _runs_in(process: psutil.Process, folder: Path) -> bool:
    try:
        return Path(process.cwd()).is_relative_to(folder)
    except psutil.Error:
        return False
