"""A server that stops ends its backend's threads (the local exit watcher); its tasks run on."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

from trainfleet.backends.local import LocalBackend
from trainfleet.backends.local.watcher import Watch
from trainfleet.server.serve import close_backend


def test_a_stopping_server_ends_the_exit_watcher() -> None:
    backend = LocalBackend(supervised=True)
    task = subprocess.Popen(["sleep", "30"])
    try:
        backend._exits.watch(Watch(task.pid, task.poll, lambda: False, lambda code: None))
        thread = backend._exits.thread
        assert thread is not None and thread.is_alive()
        engine: Any = SimpleNamespace(backend=backend)
        close_backend(engine)
        assert not thread.is_alive()
        assert task.poll() is None  # left to run, for the next server to adopt
    finally:
        task.kill()
        task.wait()


def test_a_backend_without_threads_is_left_alone() -> None:
    engine: Any = SimpleNamespace(backend=object())
    close_backend(engine)
