#!/usr/bin/env bash
# Container images for the tests and the examples, built here from Debian packages (no
# registry is reachable): `build` installs podman, runc, catatonit (the containers' init),
# mmdebstrap and docker-registry (the pull tests serve a registry on 127.0.0.1 with it) if
# missing, configures podman for this machine where it has no configuration of its own,
# builds each image once (kept when present) and prints the base image's name (the last
# line of stdout):
#   localhost/trainfleet/python:3.11        Debian bookworm's python3 and pip (`python` too)
#   localhost/trainfleet/torch:2.13.0       + PyTorch (CPU), from PIP_FIND_LINKS or PyPI
#   localhost/trainfleet/tensorflow:2.21.0  + tensorflow-cpu, from PyPI
#   localhost/trainfleet/openmpi:4          + Open MPI 4 and mpi4py, Debian's
# The framework images install with the host's pip settings (PIP_*) and CA bundle.
#
# Why the settings: root here lacks CAP_SYS_RESOURCE, so podman's default ulimits cannot be
# raised; crun refuses the hybrid cgroup layout, runc takes it.
set -euo pipefail
MIRROR="${TRAINFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
BASE=localhost/trainfleet/python:3.11
TORCH=localhost/trainfleet/torch:2.13.0
TENSORFLOW=localhost/trainfleet/tensorflow:2.21.0
OPENMPI=localhost/trainfleet/openmpi:4
CA_BUNDLE="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
CONF=/etc/containers/containers.conf
MARK="# written by trainfleet's scripts/images.sh"

say() { echo "images.sh: $*" >&2; }
root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

install() {
    if command -v podman >/dev/null && command -v runc >/dev/null \
        && command -v mmdebstrap >/dev/null && command -v catatonit >/dev/null \
        && command -v docker-registry >/dev/null; then
        return
    fi
    say "installing podman, runc, mmdebstrap and docker-registry"
    root apt-get update -qq >&2
    root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        podman runc catatonit mmdebstrap conmon netavark aardvark-dns slirp4netns uidmap fuse-overlayfs \
        docker-registry ca-certificates >&2
    # The tests serve their own registry; the package's service (port 5000) is not wanted.
    if command -v systemctl >/dev/null && systemctl is-enabled -q docker-registry 2>/dev/null; then
        root systemctl disable --now docker-registry >&2 || true
    fi
}

configure() {
    # An operator's own configuration is left alone; ours is rewritten when it changes.
    if [ -s "$CONF" ] && ! grep -q "$MARK" "$CONF"; then return; fi
    local wanted
    wanted="$(cat <<CONF
$MARK
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
CONF
)"
    if [ "$(cat "$CONF" 2>/dev/null)" = "$wanted" ]; then return; fi
    say "writing $CONF"
    root mkdir -p "$(dirname "$CONF")"
    echo "$wanted" | root tee "$CONF" >/dev/null
}

build_base() {
    if root podman image exists "$BASE"; then return; fi
    local work
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' RETURN
    say "building $BASE from $MIRROR ($SUITE, minbase, python3)"
    root mmdebstrap --quiet --variant=minbase \
        --include=python3,python3-pip,python-is-python3,ca-certificates \
        "$SUITE" "$work/rootfs.tar" "$MIRROR" >&2
    root podman import --quiet --change 'CMD ["/bin/sh"]' "$work/rootfs.tar" "$BASE" >&2
}

# built IMAGE: whether IMAGE is here, built by this script as it is now (an image that kept
# the build's pip settings in its ENV, as earlier versions left them, is built again).
built() {
    root podman image exists "$1" || return 1
    ! root podman image inspect --format '{{json .Config.Env}}' "$1" | grep -q '"PIP_'
}

# build_with_pip IMAGE PACKAGE...: the base image with PACKAGEs pip-installed, committed.
# The build's pip settings (the host's PIP_*, its CA bundle) are the pip command's only:
# given through `env`, they stay out of the image's ENV, where `pip install` in a task would
# look for a CA file and a wheel folder that are not there.
build_with_pip() {
    local image="$1" name="trainfleet-image-build-$$"
    shift
    if built "$image"; then return; fi
    local old  # an earlier build to remove once this one has its name
    old="$(root podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
    say "building $image: pip install $*"
    local mounts=(--volume "$CA_BUNDLE:/etc/trainfleet-ca.crt:ro")
    local env=(PIP_CERT=/etc/trainfleet-ca.crt PIP_BREAK_SYSTEM_PACKAGES=1
        PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore)
    local variable
    for variable in $(compgen -e | grep '^PIP_' | grep -v '^PIP_CERT$'); do
        env+=("$variable=${!variable}")
    done
    if [ -n "${PIP_FIND_LINKS:-}" ] && [ -d "$PIP_FIND_LINKS" ]; then
        mounts+=(--volume "$PIP_FIND_LINKS:$PIP_FIND_LINKS:ro")
    fi
    root podman rm --force --ignore "$name" >/dev/null
    root podman run --name "$name" --network host "${mounts[@]}" "$BASE" \
        env "${env[@]}" pip install --quiet "$@" >&2
    root podman commit --quiet --change 'CMD ["/bin/sh"]' "$name" "$image" >&2
    root podman rm --force "$name" >/dev/null
    if [ -n "$old" ]; then root podman rmi "$old" >/dev/null 2>&1 || true; fi
}

# build_with_apt IMAGE PACKAGE...: the base image with Debian PACKAGEs installed, committed.
build_with_apt() {
    local image="$1" name="trainfleet-image-build-$$"
    shift
    if root podman image exists "$image"; then return; fi
    say "building $image: apt-get install $*"
    root podman rm --force --ignore "$name" >/dev/null
    root podman run --name "$name" --network host --env DEBIAN_FRONTEND=noninteractive "$BASE" \
        sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" \
            && rm -rf /var/lib/apt/lists/*' sh "$@" >&2
    root podman commit --quiet --change 'CMD ["/bin/sh"]' "$name" "$image" >&2
    root podman rm --force "$name" >/dev/null
}

case "${1:-build}" in
build)
    install
    configure
    build_base
    build_with_pip "$TORCH" torch==2.13.0
    build_with_pip "$TENSORFLOW" tensorflow-cpu==2.21.0
    build_with_apt "$OPENMPI" openmpi-bin python3-mpi4py
    echo "$BASE"
    ;;
*)
    echo "usage: $0 [build]" >&2
    exit 2
    ;;
esac
