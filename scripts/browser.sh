#!/usr/bin/env bash
# Debian's chromium for the dashboard's browser tests (driven by the playwright package,
# which downloads no browser of its own); installed once. Prints the browser's path.
set -euo pipefail
root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v chromium >/dev/null; then
    echo "browser.sh: installing chromium" >&2
    root apt-get update -qq >&2
    root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium >&2
fi
command -v chromium
