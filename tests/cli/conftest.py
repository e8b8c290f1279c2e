"""CLI tests run with no server configured by the environment or a config file."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def no_server_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty XDG_CONFIG_HOME of this test; TRAINFLEET_SERVER and _TOKEN unset."""
    config = tmp_path / "xdg-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv("TRAINFLEET_SERVER", raising=False)
    monkeypatch.delenv("TRAINFLEET_TOKEN", raising=False)
    return config
