"""The PostgreSQL cases skip without a server, except under CI, where they fail loudly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(("ci", "outcome"), [("", "1 skipped"), ("true", "1 error")])
def test_postgres_cases_without_a_server(ci: str, outcome: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TRAINFLEET_TEST_POSTGRES_URL")}
    env["CI"] = ci
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/store/test_tokens.py::test_tokens_round_trip[postgresql]"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert outcome in result.stdout, result.stdout
    if ci:
        assert (
            result.returncode == 1
            and "CI must have what this test needs: the store on PostgreSQL" in result.stdout
        )
