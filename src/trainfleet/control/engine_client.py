"""The engine as a server's API process sees it (``docs/api-process.md``): reads in this
process, on a read-only store of its own; everything that changes jobs, queues or the
store is done by the engine's process, through the door.

``ENGINE_CALLS`` are the engine's methods the door answers (with ``forwarded_store``'s
store writes); ``EngineClient`` has the attributes the services use of an ``Engine``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from trainfleet.control.door import DoorClient, Forwarded
from trainfleet.control.forwarded_store import ForwardedStore
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.records import JobNotFound, JobRecord
from trainfleet.store.database import Store

if TYPE_CHECKING:
    from trainfleet.control import queueing
    from trainfleet.domain.conditions import Condition
    from trainfleet.scheduling.resources import Resources
    from trainfleet.spec.models import JobSpec
    from trainfleet.spec.queues import QueueConfig

ENGINE_CALLS = frozenset(
    {
        "submit",
        "submit_soon",
        "cancel",
        "delete",
        "set_queue",
        "queues",
        "would_start",
        "clear_gpu",
        "log_path",
        "gpu_health.look",
        "secrets.create",
        "secrets.list",
        "secrets.get",
        "secrets.delete",
    }
)
"""The engine's own operations that the API's process calls through the door."""


class EngineClient:
    """An ``Engine`` for the services of the API's process: ``store`` forwards its writes,
    ``data_dir`` is read here, and the engine's operations are calls through ``door``."""

    def __init__(self, door: DoorClient, store: ForwardedStore, data_dir: DataDir) -> None:
        self._door = door
        self.store = store
        self.data_dir = data_dir
        self.secrets = Forwarded(door, "secrets")  # the vault: its keys stay there
        self.gpu_health = Forwarded(door, "gpu_health")

    def get(self, job_id: str) -> JobRecord:
        job = self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r}")
        return job  # type: ignore[no-any-return]

    def submit_soon(
        self,
        spec: JobSpec,
        workdir: Path | None,
        source: str = "trainfleet",
        user: str | None = None,
        team: str = "default",
        key: str | None = None,
    ) -> Future[JobRecord]:
        """``Engine.submit_soon`` there: its checks, then the job stored with a batch."""
        return self._door.call("submit_soon", spec, workdir, source, user=user, team=team, key=key)

    def submit(
        self,
        spec: JobSpec,
        workdir: Path | None,
        source: str = "trainfleet",
        user: str | None = None,
        start: bool = False,
        fill_workdir: Callable[[Path], None] | None = None,
        team: str = "default",
        key: str | None = None,
    ) -> JobRecord:
        """``Engine.submit`` there; ``fill_workdir`` crosses pickled (the routes' is a
        ``WorkdirStore.copy`` of a stored tree, which the engine's process reads as well)."""
        call = self._door.call(
            "submit",
            spec,
            workdir,
            source,
            user=user,
            start=start,
            fill_workdir=fill_workdir,
            team=team,
            key=key,
        )
        return call.result()  # type: ignore[no-any-return]

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord:
        return self._door.call("cancel", job_id, reason).result()  # type: ignore[no-any-return]

    def delete(self, job_id: str, force: bool = False) -> None:
        self._door.call("delete", job_id, force=force).result()

    def set_queue(self, config: QueueConfig, team: str = "default") -> None:
        self._door.call("set_queue", config, team).result()

    def queues(self) -> list[queueing.QueueStatus]:
        return self._door.call("queues").result()  # type: ignore[no-any-return]

    def would_start(self, queue: str, resources: Resources) -> Condition | None:
        return self._door.call("would_start", queue, resources).result()  # type: ignore[no-any-return]

    def clear_gpu(self, index: int, by: str = "") -> None:
        self._door.call("clear_gpu", index, by=by).result()

    def log_path(self, job_id: str, role: str, index: int) -> Path:
        return self._door.call("log_path", job_id, role, index).result()  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        """This process's part ends (its store connection); the engine runs on there."""
        self.store.close()


def engine_over(door: DoorClient, store: str, data_dir: Path) -> EngineClient:
    """The engine of the process behind ``door``, whose store is at ``store`` (a path or
    URL; opened here read-only) and whose data directory is ``data_dir``."""
    local = Store.open(store, read_only=True)
    return EngineClient(door, ForwardedStore(local, door), DataDir(data_dir))
