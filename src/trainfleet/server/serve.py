"""``trainfleet server``: open the data directory, make sure a token exists, serve."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import uvicorn

from trainfleet.backends.api import Backend
from trainfleet.backends.task_environment import SERVERS, TaskBase
from trainfleet.control.engine import Engine
from trainfleet.server.app import create_app
from trainfleet.server.auth import bootstrap
from trainfleet.server.settings import Settings
from trainfleet.spec.queues import QueuesFile
from trainfleet.store.layout import DataDir

GRACEFUL_SHUTDOWN = 3
"""Seconds a stopping server waits for open requests before it cuts them."""


def database_url_of(given: str | None, file: str | None) -> str | None:
    """The database URL from ``--database-url`` (or TRAINFLEET_DATABASE_URL) or from the
    first line of ``--database-url-file``; ValueError naming the option when it is unusable.

    A file or the environment keeps the password out of the process list (``ps``).
    """
    if file is None:
        return given
    if given is not None:
        raise ValueError(
            "--database-url-file: give the database URL once, not also with --database-url "
            "or TRAINFLEET_DATABASE_URL"
        )
    try:
        lines = Path(file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"--database-url-file: cannot read {file}: {error}") from None
    url = lines[0].strip() if lines else ""
    if not url:
        raise ValueError(f"--database-url-file: {file} is empty (its first line is the URL)")
    return url


def serve(
    data_dir: str | None,
    host: str,
    port: int,
    database_url: str | None = None,
    queues: QueuesFile | None = None,
    backend: Backend | None = None,
    settings: Settings | None = None,
    task_base: TaskBase = SERVERS,
    environment_cache: int | None = None,
) -> None:
    """Run the server in this process until SIGINT or SIGTERM.

    Supervised tasks outlive this process; a restarted server adopts them (resume).
    ``queues`` (from ``--queues FILE``) are created or updated before jobs resume.
    ``backend``: where jobs run (the local backend, supervised, by default).
    ``settings``: limits and defaults (``Settings``' own, in this directory, by default).
    ``task_base``: where tasks' environments start (never this process's own environment).
    """
    engine = Engine(
        DataDir.resolve(data_dir),
        backend,
        supervised=True,
        database=database_url,
        task_base=task_base,
        environment_cache=environment_cache,
    )
    for queue in queues.queues if queues else []:
        engine.set_queue(queue)
    token = bootstrap(engine.store, os.environ.get("TRAINFLEET_ADMIN_TOKEN") or None)
    if token is not None:
        print(f"trainfleet | admin token (shown only this once): {token}", flush=True)
    resumed = engine.resume()
    if resumed:
        print(f"trainfleet | resumed {len(resumed)} unfinished job(s)", flush=True)
    app = create_app(engine, settings or Settings(workdir=Path.cwd()))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="info",
        server_header=False,
        # Followed streams last as long as their jobs: on stop, give them this long, then
        # cut them, so that the jobs can be stopped (clients resume elsewhere or give up).
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
    )
