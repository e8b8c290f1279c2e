"""A server may open as many files as it is allowed (a pidfd per running task), and gives
its tasks back the limit it had."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trainfleet.backends.supervision import SHIM

RAISE = """
import resource
from trainfleet.backends.local import fdlimit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
fdlimit.raise_open_files()
fdlimit.raise_open_files()  # once per process: the limit before stays known
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard, fdlimit.tasks_open_files())
"""


def test_a_server_raises_its_limit_and_remembers_the_one_before() -> None:
    out = subprocess.run([sys.executable, "-c", RAISE], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "256"]


def test_the_shim_gives_its_task_the_limit_it_is_told(tmp_path: Path) -> None:
    argv = [sys.executable, "-I", "-S", str(SHIM), str(tmp_path / "task-0-1")]
    argv += ["--open-files", "300", "--", "sh", "-c", "ulimit -n"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == "300"
