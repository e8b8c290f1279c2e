#!/usr/bin/env bash
# Create the environment (if needed) and run every check: lint, format, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[dev,tensorflow,pytorch]'
.venv/bin/ruff check src tests benchmarks examples
.venv/bin/ruff format --check src tests benchmarks examples
.venv/bin/mypy
.venv/bin/pytest -q "$@"
