"""One settings object: flags, then environment, then config file, then defaults, each value
knowing where it came from; the assembly builds the engine from it alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainfleet.backends.api import BackendError
from trainfleet.backends.local import LocalBackend
from trainfleet.backends.local.gpus import GpuConfigError
from trainfleet.backends.registry import BACKENDS, BackendSettings, UnknownBackend, make_backend
from trainfleet.control.assembly import backend_of, build_engine, embedded_engine
from trainfleet.control.settings import Setting, Settings, SettingsError, Source
from trainfleet.environments.task_base import USERS_OWN


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    """An environment whose config file holds ``text``."""
    path = tmp_path / "config" / "trainfleet" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return {"XDG_CONFIG_HOME": str(tmp_path / "config")}


def test_flags_then_environment_then_file(tmp_path: Path) -> None:
    env = _config(tmp_path, "server: http://file\ntoken: from-file\nca_cert: ca.pem\n")
    assert Settings.resolve(env).target().server == "http://file"
    env["TRAINFLEET_SERVER"] = "http://env"
    assert Settings.resolve(env).target().server == "http://env"
    assert Settings.resolve(env, server="http://flag").target().server == "http://flag"
    target = Settings.resolve(env).target()
    assert (target.token, target.ca_cert) == (
        "from-file",
        str(tmp_path / "config/trainfleet/ca.pem"),
    )
    env |= {"TRAINFLEET_TOKEN": "from-env", "TRAINFLEET_CA_CERT": "env.pem"}
    target = Settings.resolve(env).target()
    assert (target.token, target.ca_cert, target.ca_source) == (
        "from-env",
        "env.pem",
        "TRAINFLEET_CA_CERT",
    )
    assert Settings.resolve(env, ca_cert="flag.pem").target().ca_source == "--ca-cert"


def test_each_value_knows_its_source() -> None:
    env = {"TRAINFLEET_LOG_CAP": "2Gi", "TRAINFLEET_GPUS": "", "TRAINFLEET_RESOURCES": ""}
    settings = Settings.resolve(env, environment_cache="1Gi")
    assert settings["log_cap"] == Setting("2Gi", Source.ENV, "TRAINFLEET_LOG_CAP")
    assert settings["environment_cache"] == Setting("1Gi", Source.FLAG, "--environment-cache")
    assert settings["gpus"] == Setting("", Source.ENV, "TRAINFLEET_GPUS")  # empty: no GPUs
    assert settings["resources"].source is Source.DEFAULT  # empty: not given
    given = Setting("3Gi", Source.ENV, "TRAINFLEET_LOG_CAP")  # as click's envvar found it
    assert Settings.resolve({}, log_cap=given)["log_cap"] is given


def test_the_data_directory(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    assert Settings.resolve(env).data_dir.root == tmp_path / "xdg" / "trainfleet"
    env["TRAINFLEET_DATA_DIR"] = str(tmp_path / "env")
    assert Settings.resolve(env).data_dir.root == tmp_path / "env"
    assert Settings.resolve(env, data_dir=tmp_path / "flag").data_dir.root == tmp_path / "flag"


def test_a_bad_config_file_is_named_with_exit_code_2(tmp_path: Path) -> None:
    env = _config(tmp_path, "colour: blue\n")
    with pytest.raises(SettingsError, match="unknown key 'colour'") as caught:
        Settings.resolve(env).backend_config()
    assert caught.value.exit_code == 2
    env = _config(tmp_path, "container_runtime: rkt\n")
    with pytest.raises(SettingsError, match=r"config\.yaml: container_runtime: "):
        Settings.resolve(env).backend_config()
    url = tmp_path / "url"
    url.write_text("")
    with pytest.raises(SettingsError, match=r"--database-url-file: .* is empty"):
        Settings.resolve({}, database_url_file=str(url)).database_url()


def test_backends_come_from_the_registry_with_their_settings() -> None:
    assert set(BACKENDS) == {"local", "slurm", "kubernetes"}
    backend = make_backend("local", BackendSettings(gpus="0,2", resources="licence=2"))
    assert isinstance(backend, LocalBackend)
    node = backend.nodes()[0]
    assert (node.devices, node.capacity.custom) == ((0, 2), {"licence": 2})
    with pytest.raises(GpuConfigError, match="TRAINFLEET_GPUS='x'"):
        make_backend("local", BackendSettings(gpus="x")).nodes()
    with pytest.raises(UnknownBackend, match="no backend 'k8s'"):
        make_backend("k8s", BackendSettings())


def test_kubeconfig_comes_from_the_config_file_else_the_environment(tmp_path: Path) -> None:
    """As kubectl reads it: ``$KUBECONFIG``'s first file where the config file names none."""
    (tmp_path / "trainfleet").mkdir()
    config = tmp_path / "trainfleet" / "config.yaml"
    config.write_text("backend: kubernetes\nkubernetes: {namespace: ml}\n")
    env = {"XDG_CONFIG_HOME": str(tmp_path), "KUBECONFIG": f"/a/one{os.pathsep}/a/two"}
    backend = backend_of(Settings.resolve(env))
    assert (backend.config.kubeconfig, backend.config.namespace) == ("/a/one", "ml")
    config.write_text("backend: kubernetes\nkubernetes: {kubeconfig: /b/k}\n")
    assert backend_of(Settings.resolve(env)).config.kubeconfig == "/b/k"
    with pytest.raises(BackendError, match="kubeconfig /b/k: no such file"):
        backend_of(Settings.resolve(env)).nodes()


def test_the_environment_reaches_the_backend_through_the_settings(tmp_path: Path) -> None:
    env = {"TRAINFLEET_GPUS": "1", "TRAINFLEET_LOG_CAP": "8Mi"}
    backend = backend_of(Settings.resolve(env))
    assert isinstance(backend, LocalBackend)
    assert (backend.nodes()[0].devices, backend.log_cap) == ((1,), 8 << 20)


def test_the_assembly_hands_the_engine_all_its_parts(tmp_path: Path) -> None:
    settings = Settings.resolve({"TRAINFLEET_GPUS": ""}, data_dir=tmp_path / "data")
    engine = embedded_engine(settings)
    try:
        assert engine.task_base == USERS_OWN and engine.secrets is None
        assert engine.environments.root == tmp_path / "data" / "environments"
        assert engine.backend.nodes()[0].devices == ()
    finally:
        engine.store.close()
    served = build_engine(settings, supervised=True, vault=True)
    try:
        assert served.supervised and served.secrets is not None
    finally:
        served.store.close()


def test_the_settings_and_the_assembly_are_cheap_to_import() -> None:
    """``trainfleet run`` reads them first: neither loads the engine, a backend, the store,
    YAML or pydantic."""
    code = (
        "import sys, trainfleet.control.assembly\n"
        "heavy = ('trainfleet.control.engine', 'trainfleet.backends.', 'trainfleet.store.', "
        "'yaml', 'pydantic')\n"
        "print([m for m in sys.modules if m.startswith(heavy)])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_config_file_is_a_source_too(tmp_path: Path) -> None:
    env = _config(tmp_path, "server: http://file\nbackend: slurm\n")
    settings = Settings.resolve(env)
    path = tmp_path / "config" / "trainfleet" / "config.yaml"
    assert settings["server"] == Setting("http://file", Source.FILE, f"{path}: server")
    assert settings["backend"].source is Source.FILE
    assert settings["token"] == Setting(None, Source.DEFAULT, "TRAINFLEET_TOKEN")
    assert Settings.resolve(env, server="http://flag")["server"].source is Source.FLAG
