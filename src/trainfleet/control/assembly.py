"""The one assembly: from the settings (``control.settings``), the store, the backend (by
name, from ``backends.registry``), the environment cache, the task base, the vault, the
teams' accounts and the firewall, then the ``Engine`` with all of them.

``trainfleet run`` and an embedded ``submit`` take ``embedded_engine``, ``trainfleet
server`` ``server_engine``; tests and programs ``build_engine`` (``engine_at``) with the
parts they vary. Cheap to import: the engine and each part load when built.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from trainfleet.control.settings import Settings, SettingsError

if TYPE_CHECKING:
    from trainfleet.backends.accounts import TeamAccounts
    from trainfleet.backends.api import Backend
    from trainfleet.backends.launch import ServerAccess
    from trainfleet.backends.local.firewall import Firewall
    from trainfleet.control.engine import Engine
    from trainfleet.environments.cache import EnvironmentCache
    from trainfleet.environments.task_base import TaskBase
    from trainfleet.spec.backends import KubernetesConfig


def backend_of(settings: Settings, supervised: bool = False) -> Backend:
    """The backend the config file names (``backend:``, this machine's by default), made
    from its settings: ``supervised`` (a server's: tasks outlive this process)."""
    from trainfleet.backends.registry import BackendSettings, make_backend

    config = settings.backend_config()
    return make_backend(
        config.backend,
        BackendSettings(
            supervised=supervised,
            log_cap=settings.text("log_cap"),
            log_cap_source=settings["log_cap"].where,
            container_runtime=config.container_runtime,
            gpus=settings.value("gpus"),
            resources=settings.text("resources") or "",
            slurm=config.slurm,
            kubernetes=_with_kubeconfig(config.kubernetes, settings),
            usage_interval=settings.text("usage_interval"),
            usage_interval_source=settings["usage_interval"].where,
            gpu_sharing=settings.text("gpu_sharing"),
            gpu_sharing_source=settings["gpu_sharing"].where,
        ),
    )


def _with_kubeconfig(config: KubernetesConfig, settings: Settings) -> KubernetesConfig:
    """``config`` with ``$KUBECONFIG`` (its first file) where it names no kubeconfig, as
    kubectl reads it."""
    named = settings.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if config.kubeconfig is not None or not named:
        return config
    return config.model_copy(update={"kubeconfig": named})


def environment_cache_of(settings: Settings) -> EnvironmentCache:
    """Built Python environments, in the data directory, kept up to their size setting."""
    from trainfleet.environments.cache import EnvironmentCache, cache_size

    size = cache_size(settings.text("environment_cache"))
    return EnvironmentCache(settings.data_dir.root / "environments", size)


def team_accounts_of(settings: Settings) -> TeamAccounts | None:
    """``--isolate-teams`` and ``--team-account TEAM=USER``: the accounts each team's tasks
    run as; None without either. SettingsError naming a bad pair."""
    pairs = settings.value("team_accounts") or ()
    if not settings.value("isolate_teams") and not pairs:
        return None
    from trainfleet.backends.accounts import TeamAccounts

    configured = {}
    for pair in pairs:
        team, sep, user = pair.partition("=")
        if not sep or not team or not user:
            raise SettingsError(f"--team-account {pair!r}: expected TEAM=USER")
        configured[team] = user
    return TeamAccounts(configured)


def build_engine(
    settings: Settings,
    *,
    supervised: bool = False,
    task_base: TaskBase | None = None,
    backend: Backend | None = None,
    vault: bool = False,
    team_accounts: TeamAccounts | None = None,
    firewall: Firewall | None = None,
) -> Engine:
    """The engine on the settings' data directory and database.

    ``task_base``: where tasks' environments start (a server's small base by default);
    ``backend``: instead of the configured one; ``vault``: teams' secrets are kept (a
    server's); ``team_accounts``: each team's tasks run as its account, and on this machine
    only that account reaches a job's ports (``firewall``; made where tasks share this
    machine by default).
    """
    from trainfleet.control.engine import Engine
    from trainfleet.environments.task_base import SERVERS
    from trainfleet.store.database import Store

    data_dir = settings.data_dir
    data_dir.ensure()
    store = Store.open(settings.database_url() or data_dir.database)
    try:
        backend = backend or backend_of(settings, supervised)
        environments = environment_cache_of(settings)
        firewall = firewall or _firewall(settings, backend, team_accounts, environments)
        secrets = None
        if vault:
            from trainfleet.vault.secrets import KeySource, Secrets

            secrets = Secrets(store, KeySource(data_dir.root, settings.environ))
    except BaseException:
        store.close()
        raise
    return Engine(
        data_dir,
        store,
        backend,
        environments,
        supervised=supervised,
        task_base=task_base or SERVERS,
        secrets=secrets,
        team_accounts=team_accounts,
        firewall=firewall,
    )


def _firewall(
    settings: Settings,
    backend: Backend,
    team_accounts: TeamAccounts | None,
    environments: EnvironmentCache,
) -> Firewall | None:
    """With team accounts: their folders opened to them, and a firewall where tasks share
    this machine's network; none without."""
    if team_accounts is None:
        return None
    from trainfleet.backends.accounts import open_to_tasks

    root = settings.data_dir.root
    open_to_tasks([root, root / "jobs", environments.root])
    if backend.queues_tasks:  # tasks run elsewhere: their ports are not this machine's
        return None
    from trainfleet.backends.local.firewall import Firewall

    return Firewall.open(str(root))


def engine_at(
    data_dir: str | os.PathLike[str], database: str | None = None, **parts: Any
) -> Engine:
    """``build_engine`` on ``data_dir`` (and ``database``), the other settings from the
    environment: an engine of a program or a test of its own."""
    return build_engine(Settings.resolve(data_dir=data_dir, database_url=database), **parts)


def embedded_engine(settings: Settings) -> Engine:
    """``trainfleet run`` and an embedded ``submit``: tasks start from the user's own
    environment and end with this process; no vault."""
    from trainfleet.environments.task_base import USERS_OWN

    return build_engine(settings, task_base=USERS_OWN)


def dashboard_engine(settings: Settings) -> Engine:
    """``trainfleet ui``'s: an embedded engine (jobs submitted from the page start from the
    user's own environment and end with the command) with the vault a server's services need."""
    from trainfleet.environments.task_base import USERS_OWN

    return build_engine(settings, task_base=USERS_OWN, vault=True)


def server_engine(settings: Settings, backend: Backend | None = None) -> Engine:
    """``trainfleet server``'s engine: supervised tasks from the server's small base (its
    ``--task-python``), the vault, and each team's account with ``--isolate-teams``;
    ``backend``: instead of the configured one (a benchmark's simulated one)."""
    from trainfleet.datadir.records import remove_mask_files
    from trainfleet.environments.task_base import server_task_base

    accounts = team_accounts_of(settings)
    base = server_task_base(settings.text("task_python"))
    if accounts is not None:
        accounts.check()
    engine = build_engine(
        settings,
        supervised=True,
        task_base=base,
        backend=backend,
        vault=True,
        team_accounts=accounts,
    )
    if accounts is None and not engine.backend.queues_tasks:
        from trainfleet.backends.local.firewall import Firewall

        Firewall.clear(str(engine.data_dir.root))  # what an isolating start left
    remove_mask_files(engine.data_dir.root / "jobs")  # secret values earlier versions left
    engine.server_access = server_access_of(settings, engine.backend)
    return engine


def server_access_of(settings: Settings, backend: Backend) -> ServerAccess | None:
    """Where a server's notebooks reach it (``--host``, ``--port``, HTTPS with
    ``--tls-cert``; on Kubernetes ``kubernetes.server_url``), with the CA its clients trust
    it by (``ca_cert``: TRAINFLEET_CA_CERT or the config file's) over HTTPS; None where
    they cannot be told (``control.task_server``)."""
    from trainfleet.backends.launch import ServerAccess
    from trainfleet.control.task_server import url_for_tasks

    config = settings.backend_config()
    cluster = config.kubernetes.server_url if config.backend == "kubernetes" else None
    https = settings.text("tls_cert") is not None
    host, port = settings.value("host"), settings.value("port")
    if host is None or port is None:
        return None
    url = url_for_tasks(str(host), int(port), https, not backend.queues_tasks, cluster)
    if url is None:
        return None
    ca_cert = settings.ca_cert()[0] if url.startswith("https:") else None
    return ServerAccess(url, ca_cert=os.path.abspath(ca_cert) if ca_cert else None)
