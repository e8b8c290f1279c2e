"""A notebook job's JupyterLab: on the task's port, on loopback only, with base URL
``/notebooks/<job id>/`` (where a trainfleet server proxies it), stopped once idle.

Run as ``python3 notebook_serve.py`` by the notebook's role, under the job's own Python
(stdlib only: that Python needs ``jupyterlab``, not trainfleet). Jupyter reads its token
from ``JUPYTER_TOKEN`` (never on the command line, which every local user may read).

Idle means Jupyter's own activity records: no kernel busy, and no kernel or terminal
activity (code run, output, a keystroke in a terminal) for ``TRAINFLEET_NOTEBOOK_IDLE``
seconds. A browser tab left open polls Jupyter's API, which is not activity here: an
idle notebook on a GPU gives the GPU back even while its page stays open. Asked with
``no_track_activity``, so that looking is not activity either.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime

PROBE_TIMEOUT = 5.0


def argv(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """JupyterLab's command line for this task (its token is in the environment)."""
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={env['TRAINFLEET_PORT']}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.base_url=/notebooks/{env['TRAINFLEET_JOB']}/",
        f"--ServerApp.root_dir={os.getcwd()}",
        "--ServerApp.quit_button=False",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        # A task runs as root only where trainfleet itself does (embedded, as root):
        # Jupyter's refusal would add nothing there.
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ]


def last_activity(port: str, job: str, token: str) -> float | None:
    """When Jupyter last saw a kernel or terminal do something (seconds since the epoch);
    now while a kernel is busy; None where Jupyter does not answer (yet)."""
    base = f"http://127.0.0.1:{port}/notebooks/{job}/api"
    try:
        kernels = _get(f"{base}/kernels", token)
    except (OSError, ValueError):
        return None
    try:
        terminals = _get(f"{base}/terminals", token)
    except (OSError, ValueError):  # a Jupyter without terminals
        terminals = []
    if any(kernel.get("execution_state") == "busy" for kernel in kernels):
        return time.time()
    stamps = [_when(item.get("last_activity")) for item in [*kernels, *terminals]]
    return max((stamp for stamp in stamps if stamp is not None), default=0.0)


def _get(url: str, token: str) -> list[dict[str, object]]:
    request = urllib.request.Request(
        f"{url}?no_track_activity=1", headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT) as answer:
        found = json.load(answer)
    if not isinstance(found, list):
        raise ValueError(f"{url}: not a list")
    return found


def _when(stamp: object) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def watch(jupyter: subprocess.Popen[bytes], idle_timeout: float) -> int:
    """Wait for Jupyter; stop it once idle for ``idle_timeout`` (0: never). Its exit
    status, or 0 where it was stopped for being idle."""
    env = os.environ
    since = time.time()  # a notebook no one ever used is idle from its start
    interval = min(max(idle_timeout / 10, 1.0), 30.0)
    while True:
        try:
            return jupyter.wait(timeout=interval)
        except subprocess.TimeoutExpired:
            pass
        if idle_timeout <= 0:
            continue
        seen = last_activity(env["TRAINFLEET_PORT"], env["TRAINFLEET_JOB"], env["JUPYTER_TOKEN"])
        if seen is None:
            continue
        since = max(since, seen)
        if time.time() - since >= idle_timeout:
            print(
                f"trainfleet: JupyterLab idle for {idle_timeout:g} s (no kernel or terminal "
                "activity): stopping it",
                flush=True,
            )
            jupyter.terminate()
            try:
                jupyter.wait(timeout=30)
            except subprocess.TimeoutExpired:
                jupyter.kill()
                jupyter.wait()
            return 0


def main() -> int:
    if importlib.util.find_spec("jupyterlab") is None:
        print(
            f"trainfleet: JupyterLab is not installed in the job's Python ({sys.executable}): "
            "pip install jupyterlab there (or name it in the job's environment: packages)",
            file=sys.stderr,
        )
        return 1
    if not os.environ.get("JUPYTER_TOKEN"):
        print("trainfleet: no JUPYTER_TOKEN: a notebook never runs open", file=sys.stderr)
        return 1
    idle_timeout = float(os.environ.get("TRAINFLEET_NOTEBOOK_IDLE", "3600"))
    jupyter = subprocess.Popen(argv(os.environ))
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda signum, _frame: jupyter.send_signal(signum))
    when = f"stops after {idle_timeout:g} s idle" if idle_timeout else "never stops for idling"
    print(f"trainfleet: JupyterLab on 127.0.0.1:{os.environ['TRAINFLEET_PORT']} ({when})")
    sys.stdout.flush()
    return watch(jupyter, idle_timeout)


if __name__ == "__main__":
    sys.exit(main())
