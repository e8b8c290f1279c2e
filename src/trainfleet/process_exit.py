"""How a trainfleet process ends: its command's exit status, after what the interpreter
runs as it exits, and then no teardown (``os._exit``)."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def exit_status(command: Callable[[], object]) -> int:
    """Run ``command`` (the one this process was given); its exit status, once what the
    interpreter runs as it exits has run: its non-daemon threads joined, ``atexit``
    functions, its streams flushed. The process must end then (``os._exit``): threading
    is shut down."""
    try:
        command()
        return 0
    except SystemExit as error:
        return _exit_code(error)
    except KeyboardInterrupt:
        return 130
    except BaseException:  # the traceback, status 1
        import traceback

        traceback.print_exc()
        return 1
    finally:
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit does
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def run_and_exit(command: Callable[[], object]) -> NoReturn:
    """Run ``command``, then end the process without the interpreter's teardown. A daemon
    thread still inside a library call then (a Kubernetes watch or log copy let go after
    its wait) is ended by the teardown with ``pthread_exit``, which aborted ``trainfleet
    run`` (-6) after its job had succeeded."""
    os._exit(exit_status(command))


def _exit_code(error: SystemExit) -> int:
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1
