#!/usr/bin/env bash
# Downloads into .whl/ (at the repository's root, never committed) the wheels that
# scripts/gpu-check.sh installs on a GPU machine without network: trainfleet's dependencies
# (pyproject.toml), at constraints.txt's versions, with theirs, pip, and setuptools and wheel
# (to install trainfleet itself from this tree), for CPython
# 3.12 on x86_64 Linux (PYTHON_VERSION to change it). About 45 MB. PyTorch is not among
# them: the GPU machine brings its own.
#
#   usage: scripts/gpu-wheels.sh    (where there is network; then carry .whl/ along)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
VERSION=${PYTHON_VERSION:-3.12}
ABI=cp${VERSION/./}
"$PY" - "$ROOT/pyproject.toml" > "$ROOT/.whl.requirements" <<'PYEOF'
import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))
PYEOF
"$PY" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
    --python-version "$VERSION" --implementation cp --abi "$ABI" --abi abi3 --abi none \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_34_x86_64 \
    -c "$ROOT/constraints.txt" -r "$ROOT/.whl.requirements" pip "setuptools>=69" wheel \
    -d "$ROOT/.whl"
rm -f "$ROOT/.whl.requirements"
echo "$(ls "$ROOT/.whl" | wc -l) wheels, $(du -sh "$ROOT/.whl" | cut -f1), in $ROOT/.whl"
