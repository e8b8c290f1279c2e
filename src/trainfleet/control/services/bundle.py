"""Every service over one engine, as a server holds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainfleet.control.services.accounts import Accounts
from trainfleet.control.services.audit import AuditLog
from trainfleet.control.services.gpus import Gpus
from trainfleet.control.services.jobs import Jobs
from trainfleet.control.services.ownership import QueueTeams
from trainfleet.control.services.queues import Queues
from trainfleet.control.services.secrets import TeamSecrets
from trainfleet.control.services.usage import Usage
from trainfleet.control.services.workflows import Workflows
from trainfleet.store.errors import StoreError
from trainfleet.workdirs.store import WorkdirStore  # (its cap bounds uploads: none here)

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine


@dataclass(frozen=True)
class Services:
    """Jobs, accounts, queues, secrets, the audit trail, tasks' resource use, the
    machine's GPUs and the workflows of one engine."""

    engine: Engine
    jobs: Jobs
    accounts: Accounts
    queues: Queues
    secrets: TeamSecrets
    audit: AuditLog
    usage: Usage
    gpus: Gpus
    workflows: Workflows

    @classmethod
    def of(cls, engine: Engine, local_runners: bool = False) -> Services:
        """The services of ``engine``, which keeps the teams' secrets (``engine.secrets``);
        ValueError where it has no vault. ``local_runners``: see ``Jobs``."""
        if engine.secrets is None:
            raise ValueError("a server keeps teams' secrets: build its engine with a vault")
        store = engine.store
        owners = QueueTeams(store.accounts)
        audit = AuditLog(store.audit)
        queues = Queues(engine, owners)
        jobs = Jobs(engine, owners, local_runners)
        return cls(
            engine=engine,
            jobs=jobs,
            accounts=Accounts(store, audit, queues),
            queues=queues,
            secrets=TeamSecrets(engine.secrets, store.accounts),
            audit=audit,
            usage=Usage(jobs),
            gpus=Gpus(engine, jobs),
            workflows=Workflows(engine, owners, WorkdirStore(engine.data_dir.root / "workdirs", 0)),
        )

    def problem(self, wait: float) -> str | None:
        """Why the store cannot serve now (asked with ``wait`` seconds), or None."""
        try:
            self.engine.store.check(wait=wait)
        except StoreError as error:
            return f"the store cannot answer: {error}"
        return None

    def shutdown(self) -> None:
        """Write the audit records queued, then stop following jobs (see ``Engine.shutdown``)."""
        self.audit.writer.flush()
        self.workflows.close()
        self.engine.shutdown()
