#!/usr/bin/env bash
# Debian's Open MPI (mpirun) and mpi4py on this machine, for the MPI tests and for MPI jobs
# that run outside containers; installed once (the MPI image has its own: scripts/images.sh).
set -euo pipefail
root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if command -v mpirun >/dev/null && /usr/bin/python3 -c "import mpi4py" 2>/dev/null; then
    exit 0
fi
echo "mpi.sh: installing openmpi-bin and python3-mpi4py" >&2
root apt-get update -qq >&2
root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openmpi-bin python3-mpi4py >&2
