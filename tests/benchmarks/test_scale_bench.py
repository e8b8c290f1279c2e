"""Smoke test of benchmarks/scale.py's parts E (stored jobs on PostgreSQL) and F (running local
jobs): a quick run writes sane figures, the counts answered are the database's own, and
no task outlives the run. A part that cannot be imported is said so, and the rest run."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import postgres_admin_url

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
KEYS = {"value", "peer", "ratio", "target", "ok"}


def test_a_quick_run_of_stored_and_local_jobs_writes_sane_figures(tmp_path: Path) -> None:
    admin = postgres_admin_url()
    out = tmp_path / "scale.json"
    argv = [sys.executable, str(BENCHMARKS / "scale.py"), "--part", "stored,local", "--quick"]
    argv += ["--postgres-url", admin, "--out", str(out), "--stored", "3000"]
    argv += ["--stored-requests", "5", "--local", "6", "--local-peer", "2", "--local-sleep", "117"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "E list p99 (ms)" in result.stdout and "F server threads" in result.stdout
    document = json.loads(out.read_text())
    assert document["failed"] == {} and document["missing"] == {}
    stored, local = document["figures"]["stored"], document["figures"]["local"]
    assert all(set(entry) >= KEYS for entry in [*stored.values(), *local.values()])
    for kind in ("list", "state", "label", "team", "pages", "describe"):
        p50, p99 = stored[f"E {kind} p50 (ms)"], stored[f"E {kind} p99 (ms)"]
        assert 0 < p50["value"] <= p99["value"] and 0 < p50["peer"] <= p99["peer"]
        assert p99["target"] == 150 and p99["explain"], kind
    counted = stored["E counts exact"]
    assert counted["value"] is True and counted["ok"] is True, counted
    assert sum(counted["counts"]["list"]["answered"].values()) == 3000
    assert stored["E server start (s)"]["value"] > 0
    assert local["F jobs running"]["value"] == 6 and local["F jobs running"]["peer"] == 2
    assert local["F all running (s)"]["value"] > 0
    threads = local["F server threads"]
    assert threads["value"] > 0 and sum(threads["names"].values()) == threads["value"]
    for name in ("VmRSS", "Pss"):
        mean, most = local[f"F supervisor {name} mean (MB)"], local[f"F supervisor {name} max (MB)"]
        assert 0 < mean["value"] <= most["value"] < 100
    assert (
        local["F supervisor Pss max (MB)"]["value"] <= local["F supervisor VmRSS max (MB)"]["value"]
    )
    assert _sleeping(117) == []  # the tasks were killed


def _sleeping(seconds: int) -> list[int]:
    """The pids of the processes running ``sleep seconds``."""
    wanted = f"sleep\0{seconds}\0".encode()
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes() == wanted:
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # gone meanwhile
    return found


def test_a_part_that_cannot_be_imported_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    scale = importlib.import_module("scale")
    monkeypatch.setitem(scale.PARTS, "nothing", "scale_nothing_here")
    modules, missing = scale.load_parts()
    assert set(modules) == {"sim", "stored", "local"}
    assert "scale_nothing_here" in missing["nothing"]
