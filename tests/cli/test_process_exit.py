"""How a ``trainfleet`` process ends: with its command's status, once what the interpreter
runs at its exit has run (other threads joined, ``atexit`` functions, streams flushed), and
without the interpreter's teardown. In that teardown a daemon thread still inside a call (a
Kubernetes watch or log copy let go after its wait) is ended with ``pthread_exit``, which
aborted ``trainfleet run`` (-6, in CI) after its job had succeeded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SETUP = textwrap.dedent(
    """
    import atexit, gc, os, sys, threading, time

    gc.disable()  # the cycle below is then collected by the interpreter's teardown only
    class Torn:
        def __del__(self):
            os.write(1, b"torn down\\n")

    torn = Torn()
    torn.me = torn
    del torn
    atexit.register(lambda: print("atexit ran"))
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined"))).start()
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    print("buffered, no newline", end="")
    sys.argv = ["trainfleet", *sys.argv[1:]]
    """
)
ENTRIES = {
    "python -m trainfleet": "import runpy; runpy.run_module('trainfleet', run_name='__main__')",
    "the console script": "from trainfleet.starter.client import main; main()",
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("args", "status"), [(["--help"], 0), (["no-such-command"], 2)])
def test_a_command_ends_with_its_status_after_the_exit_s_work_and_without_teardown(
    entry: str, args: list[str], status: int
) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", SETUP + ENTRIES[entry], *args],
        env={"TRAINFLEET_STARTER": "off", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ended.returncode == status, ended.stderr
    assert ended.stdout.startswith("buffered, no newline")
    assert ended.stdout.endswith("thread joined\natexit ran\n"), ended.stdout[-200:]
    assert "torn down" not in ended.stdout
