"""The layers stay apart: what a face imports does not drag in the engine beneath it."""

from __future__ import annotations

import subprocess
import sys


def _loaded_by(statement: str) -> list[str]:
    """The trainfleet modules a fresh interpreter has loaded after ``statement``."""
    code = (
        f"import sys\n{statement}\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('trainfleet'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_sdk_loads_no_engine_store_or_server() -> None:
    """`import trainfleet.client` loads the wire models and the domain, and nothing of the
    control, backends, scheduling, store or server packages (39 modules before, supervisor
    and scheduler included)."""
    loaded = _loaded_by("import trainfleet.client")
    assert "trainfleet.wire" in loaded and "trainfleet.domain.records" in loaded
    below = ("control", "backends", "scheduling", "store", "server")
    assert [m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in below] == []
