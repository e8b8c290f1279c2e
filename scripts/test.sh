#!/usr/bin/env bash
# Create the environment (if needed) and run every check: lint, format, types, tests.
# The store's tests also run against a real PostgreSQL, started here (scripts/postgres.sh)
# unless TRAINFLEET_TEST_POSTGRES_URL already names one; the Slurm backend's against a real
# three-node Slurm cluster on this machine (scripts/slurm.sh), unless
# TRAINFLEET_TEST_SLURM_CONF already names one's slurm.conf; the Kubernetes backend's against
# a real single-node Kubernetes (scripts/k8s.sh, built once: about 4 minutes), unless
# TRAINFLEET_TEST_KUBECONFIG already names one's kubeconfig.
set -euo pipefail
cd "$(dirname "$0")/.."
k8s_build=""
if [ -z "${TRAINFLEET_TEST_KUBECONFIG:-}" ]; then  # Kubernetes builds while the rest installs
    bash scripts/k8s.sh packages
    k8s_log="$(mktemp)"
    bash scripts/k8s.sh build > "$k8s_log" 2>&1 &
    k8s_build=$!
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,tensorflow,pytorch,tensorboard,notebook,kubernetes]'
if [ -z "${TRAINFLEET_TEST_POSTGRES_URL:-}" ]; then
    TRAINFLEET_TEST_POSTGRES_URL="$(bash scripts/postgres.sh start | tail -n 1)"
    export TRAINFLEET_TEST_POSTGRES_URL
fi
if [ -z "${TRAINFLEET_TEST_SLURM_CONF:-}" ]; then
    TRAINFLEET_TEST_SLURM_CONF="$(bash scripts/slurm.sh start | tail -n 1)"
    export TRAINFLEET_TEST_SLURM_CONF
fi
bash scripts/images.sh build > /dev/null  # podman and the test image, kept once built
if [ -n "$k8s_build" ]; then  # the Kubernetes backend's tests, on a real cluster
    wait "$k8s_build" || { cat "$k8s_log" >&2; exit 1; }
    TRAINFLEET_TEST_KUBECONFIG="$(TRAINFLEET_K8S_IMAGES="${TRAINFLEET_K8S_IMAGES-localhost/trainfleet/python:3.11 localhost/trainfleet/torch:2.13.0}" \
        bash scripts/k8s.sh start | tail -n 1)"
    export TRAINFLEET_TEST_KUBECONFIG
fi
bash scripts/mpi.sh  # Open MPI for the MPI jobs that run outside containers
if [ -z "${TRAINFLEET_TEST_CHROMIUM:-}" ]; then  # the dashboard's tests in a real browser
    TRAINFLEET_TEST_CHROMIUM="$(bash scripts/browser.sh | tail -n 1)"
    export TRAINFLEET_TEST_CHROMIUM
fi
if ! command -v nft >/dev/null; then  # nftables: --isolate-teams guards jobs' ports with it
    as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables > /dev/null
fi
.venv/bin/ruff check src tests benchmarks examples
.venv/bin/ruff format --check src tests benchmarks examples
.venv/bin/mypy
# Two workers (tests/conftest.py says what runs together on one); a short folder for the
# tests' files, as UNIX sockets in it have at most 107 bytes of path; a failed test runs once
# more, and the summary lists each one that did (RERUN), passed then or not
.venv/bin/pytest -q -n 2 --reruns 1 -rfER --basetemp="/tmp/trainfleet-tests-$(id -u)" "$@"
