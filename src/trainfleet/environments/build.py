"""Building one environment with uv: a virtual environment with pip, then the requirements.

uv is a dependency of trainfleet (the ``uv`` package ships its binary), so nothing is
downloaded to get it. It never downloads a Python either (``UV_PYTHON_DOWNLOADS=never``):
a version that is not on the machine fails the build with uv's own words. Packages come
from uv's configured indexes (``UV_INDEX_URL``, ``UV_EXTRA_INDEX_URL``, ``UV_FIND_LINKS``,
``uv.toml``), which the build's environment passes on, with certificates and proxies,
and nothing else of this process's environment.

A build runs what the requirements bring (a package's build hooks): under a server that
isolates teams it runs as an unprivileged ``Builder`` (see ``environments.cache``), never
as the server's own user.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Protocol

from uv import find_uv_bin

from trainfleet.environments.recipe import Recipe
from trainfleet.environments.task_base import TaskBase

PASSED_ON = ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
TIMEOUT = 3600.0
"""Seconds one uv command may take (a large framework from a slow index)."""
TAIL = 2000
"""Characters of the build log a failed build's reason keeps."""


POLL = 0.2
"""Seconds between two looks at whether a build should stop."""


class BuildFailed(Exception):
    """uv could not build the environment; the message is the end of its output."""


class BuildStopped(Exception):
    """The build was stopped (its job was): nothing of it is kept."""


class Builder(Protocol):
    """A Unix account that builds (``backends.accounts.Account`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> int: ...
    @property
    def gid(self) -> int: ...

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run as this account."""
        ...


def build_environment() -> dict[str, str]:
    """The environment uv runs in: a task's small base, uv's settings, certificates, proxies."""
    env = TaskBase().environment()
    for name, value in os.environ.items():
        if name.startswith("UV_") or name.upper() in PASSED_ON:
            env[name] = value
    env["UV_PYTHON_DOWNLOADS"] = "never"
    return env


def build(
    recipe: Recipe,
    target: Path,
    log: IO[bytes],
    requirements: Path | None = None,
    builder: Builder | None = None,
    cache: Path | None = None,
    cwd: Path | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Build ``recipe`` as a virtual environment at ``target`` (an empty folder the builder
    may write); uv's output goes to ``log``. ``requirements``: the recipe's requirements
    file, written already where the builder may read it; ``builder``: the account uv runs
    as (None: this process's), with ``cache`` as its uv cache; ``cwd``: where uv runs
    (a relative path in the requirements is relative to it); ``stop``: asked while uv runs,
    True ends it (and what it started) at once.

    Raises BuildFailed with the tail of that output, BuildStopped once ``stop`` said so.
    """
    uv, env = find_uv_bin(), build_environment()
    if builder is not None:
        assert cache is not None, "a builder needs a uv cache of its own"
        env |= {"UV_CACHE_DIR": str(cache), "HOME": str(cache), "USER": builder.name}
        env["LOGNAME"] = builder.name
    python = str(target / "bin" / "python")
    # pip itself too, so that `pip` in a task is the environment's (uv's --seed would add
    # setuptools and wheel as well, and take a second round of downloads).
    install = [uv, "pip", "install", "--python", python, "pip", *recipe.pip]
    if requirements is not None:
        install += ["--requirement", str(requirements)]
    for argv in ([uv, "venv", "--allow-existing", "--python", recipe.python, str(target)], install):
        log.write(f"$ {' '.join(argv[1:])}\n".encode())
        log.flush()
        command = builder.command(argv) if builder is not None else argv
        where = cwd if cwd is not None and cwd.is_dir() else "/"
        returncode = _run(command, log, env, where, stop, argv[1])
        if returncode != 0:
            log.flush()
            raise BuildFailed(_tail(log.name) or f"uv {argv[1]} exited {returncode}")


def _run(
    argv: list[str],
    log: IO[bytes],
    env: dict[str, str],
    cwd: Path | str,
    stop: Callable[[], bool],
    step: str,
) -> int:
    """Run one uv command in a session of its own: its exit code, unless ``stop`` or the
    time limit ends it and all it started first."""
    process = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
    )
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            return process.wait(timeout=POLL)
        except subprocess.TimeoutExpired:
            stopped, late = stop(), time.monotonic() > deadline
            if not (stopped or late):
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if stopped:
            raise BuildStopped(f"stopped while uv {step} ran")
        raise BuildFailed(f"uv {step} took more than {TIMEOUT:.0f}s")


def end_processes_of(uid: int) -> int:
    """Kill every process whose real uid is ``uid`` (what a build left running as an
    account no task runs as); how many there were."""
    import psutil  # imported here: only a server that isolates teams needs it

    found = [
        p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid
    ]
    for process in found:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(found, timeout=5)
    return len(found)


def _tail(path: object) -> str:
    try:
        text = Path(str(path)).read_text(errors="replace")
    except OSError:
        return ""
    return text[-TAIL:].strip()
