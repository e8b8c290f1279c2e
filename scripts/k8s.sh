#!/usr/bin/env bash
# A real single-node Kubernetes (1.20.2) on this machine, for the tests and for trying a
# Kubernetes backend: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a
# kubelet on containerd + runc, all listening on 127.0.0.1 only. Only `hostNetwork: true`
# pods run (the CNI configuration is loopback-only), from images imported into containerd
# (nothing is ever pulled: no registry is reachable from here).
#
#   start           install missing Debian packages, build Kubernetes once (kept in the build
#                   cache), start every component that is not running, import the project's
#                   podman images, wait until the node is Ready and the default service
#                   account exists, check that no component holds a connection beyond
#                   loopback; the LAST stdout line is the admin kubeconfig's path:
#                       export KUBECONFIG=$(bash scripts/k8s.sh start | tail -n1)
#   stop            stop every component (by pid file), kill the pods' containers, unmount
#                   what the kubelet mounted, remove what it wrote outside $TRAINFLEET_K8S_DIR
#   status          nodes and pods (kubectl get nodes,pods -A), or "not running" (exit 1)
#   import IMAGE... copy podman images (full names: localhost/x:y) into the cluster's
#                   containerd, where pods find them under the same names (it must run)
#   conf|kubeconfig print the admin kubeconfig's path (like start's last line, starts nothing)
#   packages        install the missing Debian packages only
#   build           install them and build Kubernetes into the build cache, start nothing
#                   (scripts/test.sh builds while it installs the rest, then starts)
#
# Images: `start` imports each podman image named localhost/trainfleet/* (scripts/images.sh
# builds them), or those TRAINFLEET_K8S_IMAGES lists (space-separated; empty for none), once
# per podman image id. A pod names them as podman does, with `imagePullPolicy: Never` (or
# IfNotPresent; a tag is needed, `:latest` would mean Always):
#     image: localhost/trainfleet/python:3.11
# Other podman images keep their names too (`docker.io/library/x:y`, which a pod may call
# `x:y`). Any pull that is tried anyway goes nowhere: every component runs with HTTP(S)_PROXY
# set to a closed port on 127.0.0.1 (NO_PROXY: this machine's own addresses).
#
# Build: Debian bookworm's source package `kubernetes` (1.20.2, vendored dependencies),
# Debian's Go in GOPATH mode, `-tags providerless`, Debian's patches plus ours
# (scripts/k8s/patches: no in-tree credential providers in the kubelet, whose AWS one calls
# the cloud metadata address 169.254.169.254, nor cAdvisor's cloud detection, which would on
# a cloud's machine; the kubelet leaves host sysctls alone). It is kept in
# $TRAINFLEET_K8S_BUILD (default /var/tmp/trainfleet-k8s-build): binaries, source and Go
# cache, keyed on the source package's version, Go's, and the patches. The first build takes
# about 4 minutes on 2 cores; a changed patch builds again (in under a minute, from Go's
# cache); anything else starts from the cache. Debian's package lists for the source are
# refreshed when a week old.
#
# State, configuration, certificates (a CA of a year, others of 30 days, renewed at `start`
# when less than a week is left) and logs live in $TRAINFLEET_K8S_DIR (default
# /var/tmp/trainfleet-k8s); `rm -rf` it after `stop` for a clean slate. API objects persist
# across stop/start, as across a node's reboot: pods that should run are started again.
# A node whose kubelet stops answering is NotReady after 24 s (Kubernetes' default is 40 s),
# so that the tests of a lost node take less time.
# Ports (all on 127.0.0.1; each TRAINFLEET_K8S_<NAME>_PORT overrides one, and a cluster keeps
# the ports it was created with):
#   APISERVER 16443, ETCD 12379 (and 12380 for peers, 12381 for metrics), KUBELET 20250,
#   KUBELET_HEALTHZ 20248, CONTROLLER_MANAGER 20257, SCHEDULER 20259
# and containerd's streaming server on a free port.
#
# The node is this machine, named $(hostname), which /etc/hosts must map to 127.0.0.1 (the
# API server reaches the kubelet by that name). One cluster per machine: `start` refuses
# while another kubelet runs (two would share the /kubepods cgroups, each removing the
# other's pods). What a shared machine keeps: its iptables (--make-iptables-util-chains=false)
# and sysctls; /var/lib/kubelet (DevicePlugins=false: its socket would be there); any other
# containerd (ours has its own root, state and socket). The kubelet's pod cgroups are
# /kubepods in each hierarchy (cgroupfs driver, as podman's /libpod_parent); the pods' logs
# go to /var/log/pods and /var/log/containers, which the kubelet does not let one move.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
SUPPORT="$HERE/k8s"
DIR="${TRAINFLEET_K8S_DIR:-/var/tmp/trainfleet-k8s}"
BUILD="${TRAINFLEET_K8S_BUILD:-/var/tmp/trainfleet-k8s-build}"
MIRROR="${TRAINFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
ETC="$DIR/etc"
PKI="$DIR/pki"
RUN="$DIR/run"
LOG="$DIR/log"
SOCK="$RUN/containerd.sock"
KUBECONFIG_PATH="$ETC/admin.kubeconfig"
NODE="$(hostname)"
PAUSE_IMAGE=localhost/trainfleet-k8s/pause:3.2
PROJECT_IMAGES=localhost/trainfleet/    # podman images imported by `start` (a name prefix)
BUILD_REV=1                             # part of the build's key: bump when the build changes
READY_TIMEOUT=120                       # seconds to wait for a component / the node
# In start order; stop goes the other way round.
COMPONENTS=(etcd kube-apiserver containerd kube-controller-manager kube-scheduler kubelet)
PACKAGES=(golang-go etcd-server containerd runc containernetworking-plugins
    golang-github-modern-go-reflect2-dev openssl curl gcc libc6-dev patch python3 iproute2
    util-linux procps)
# Paths outside $DIR that the kubelet or containerd may write; `stop` removes the empty
# folders left in those that did not exist before the cluster started (see note_host_paths).
HOST_PATHS=(/var/log/pods /var/log/containers /var/lib/kubelet /run/containerd /var/lib/cni
    /usr/libexec/kubernetes /var/run/kubernetes)

say() { echo "k8s.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# port NAME DEFAULT: $TRAINFLEET_K8S_<NAME>_PORT, else the port the cluster was created with.
port() {
    local var="TRAINFLEET_K8S_${1}_PORT" saved
    if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
    saved="$(sed -n "s/^${1}=//p" "$ETC/ports" 2>/dev/null || true)"
    echo "${saved:-$2}"
}
APISERVER_PORT="$(port APISERVER 16443)"
ETCD_PORT="$(port ETCD 12379)"
KUBELET_PORT="$(port KUBELET 20250)"
KUBELET_HEALTHZ_PORT="$(port KUBELET_HEALTHZ 20248)"
CONTROLLER_MANAGER_PORT="$(port CONTROLLER_MANAGER 20257)"
SCHEDULER_PORT="$(port SCHEDULER 20259)"

# The binaries the cluster runs ($DIR/bin links to the build they came from).
BIN="$DIR/bin"
kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" --cache-dir "$RUN/kubectl-cache" "$@"; }
ctrk() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

# --- processes ------------------------------------------------------------------------------

# Whether process $1 exists and is not a zombie (kill -0 succeeds on zombies).
alive() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [ "${stat%% *}" != Z ]
}

# The pid in pidfile $1 if that process is alive and its command is $2.
pid_of() {
    local pid
    pid="$(cat "$1" 2>/dev/null)" || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && alive "$pid" && echo "$pid"
}
# The pid of component $1 (its comm is its name cut to 15 characters).
component_pid() { pid_of "$RUN/$1.pid" "${1:0:15}"; }

# containerd's shims of this cluster (they outlive containerd, daemonised).
shim_pids() {
    local pid
    for pid in $(pgrep -x containerd-shim || true); do
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-address $SOCK "; then
            echo "$pid"
        fi
    done
}

# Pids of the processes under pid $1, deepest last.
descendants() {
    local child
    for child in $(pgrep -P "$1" || true); do
        echo "$child"
        descendants "$child"
    done
}

# Waits up to $1 tenths of a second for the pids after it to exit; the ones left on stdout.
wait_exit() {
    local tenths="$1" pid i left
    shift
    for ((i = 0; i <= tenths; i++)); do
        left=""
        for pid in "$@"; do if alive "$pid"; then left="$left $pid"; fi; done
        [ -n "$left" ] || return 0
        sleep 0.1
    done
    echo "$left"
}

# SIGTERM to the given pids, then up to 15 s for them to go; SIGKILL after.
terminate() {
    local left
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    left="$(wait_exit 150 "$@")"
    if [ -n "$left" ]; then
        say "pids$left did not stop on SIGTERM, killing them"
        # shellcheck disable=SC2086  # one argument per pid
        kill -KILL $left 2>/dev/null || true
    fi
}

# The environment of every component: nothing of the caller's, and HTTP(S) proxies that go
# nowhere, so that no component reaches beyond this machine over HTTP (a registry pull, a
# cloud metadata call) even if asked to. This machine's own names and addresses go direct.
daemon_env() {
    local no_proxy="localhost,127.0.0.1,127.0.0.0/8,::1,$NODE" address
    for address in $(hostname -I 2>/dev/null || true); do no_proxy="$no_proxy,$address"; done
    DAEMON_ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
        LANG=C.UTF-8 HOME="$RUN/home"
        HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9
        http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9
        NO_PROXY="$no_proxy" no_proxy="$no_proxy")
}

# launch NAME PROGRAM ARG...: PROGRAM in a session of its own (a Ctrl-C at the terminal that
# ran `start` does not reach it), with DAEMON_ENV and any NAME=VALUE in EXTRA_ENV, output to
# $LOG/NAME.log, pid in $RUN/NAME.pid. Daemons get no stdout: a caller's $(...) would wait.
launch() {
    local name="$1"
    shift
    say "starting $name"
    echo "--- $(date '+%F %T') k8s.sh start" >>"$LOG/$name.log"
    setsid env -i "${DAEMON_ENV[@]}" "${EXTRA_ENV[@]}" "$@" </dev/null >>"$LOG/$name.log" 2>&1 &
    echo $! >"$RUN/$name.pid"
}

# wait_for NAME WHAT COMMAND...: until COMMAND succeeds; dies when component NAME exits or
# after READY_TIMEOUT seconds, with the end of its log.
wait_for() {
    local name="$1" what="$2" i
    shift 2
    for ((i = 0; i < READY_TIMEOUT * 5; i++)); do
        if "$@" >/dev/null 2>&1; then return; fi
        if ! component_pid "$name" >/dev/null; then
            tail -n 20 "$LOG/$name.log" >&2 || true
            die "$name exited (see $LOG/$name.log)"
        fi
        sleep 0.2
    done
    tail -n 20 "$LOG/$name.log" >&2 || true
    die "$name: no $what after ${READY_TIMEOUT}s (see $LOG/$name.log)"
}

# --- setup ----------------------------------------------------------------------------------

check_machine() {
    [ "$(id -u)" = 0 ] || die "must run as root (containerd, runc and the kubelet need it)"
    [[ "$DIR" != *[[:space:]]* && "$BUILD" != *[[:space:]]* ]] \
        || die "TRAINFLEET_K8S_DIR and TRAINFLEET_K8S_BUILD must not contain white space"
    local address
    address="$(getent ahostsv4 "$NODE" | awk 'NR == 1 {print $1}')"
    [[ "$address" == 127.* ]] || die "this machine's name '$NODE' resolves to '${address:-nothing}'," \
        "not to a loopback address: the API server reaches the kubelet by that name and must" \
        "stay on loopback (add '127.0.0.1 $NODE' to /etc/hosts)"
    [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] \
        || die "no cgroup hierarchy in /sys/fs/cgroup"
    # Two kubelets would share the /kubepods cgroups, and each removes the pods' cgroups it
    # does not know, killing the other's pods.
    local pid ours
    ours="$(component_pid kubelet || true)"
    for pid in $(pgrep -x kubelet || true); do
        if [ "$pid" != "$ours" ] && alive "$pid"; then
            die "another kubelet runs (pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-120)):" \
                "one cluster per machine (stop that one first)"
        fi
    done
}

install_packages() {
    local missing=() package
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$package")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    say "installing ${missing[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    # Where systemd runs, the packages start a system etcd and containerd: not wanted here.
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
        for package in etcd containerd; do
            if [[ " ${missing[*]} " == *" $package"* ]]; then
                systemctl disable --now "$package" >&2 2>/dev/null || true
            fi
        done
    fi
}

# --- build ----------------------------------------------------------------------------------

# apt for the source package only: lists, cache and sources of its own in $BUILD/apt.
apt_src() {
    apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$BUILD/apt/sources" \
        -o Dir::State::Lists="$BUILD/apt/lists" -o Dir::Cache="$BUILD/apt/cache" \
        -o APT::Sandbox::User=root "$@"
}

# The version of Debian's source package `kubernetes`; the lists are refreshed when missing
# or a week old (a failed refresh is only a warning while older lists are there).
source_version() {
    mkdir -p "$BUILD/apt/sources" "$BUILD/apt/lists/partial" "$BUILD/apt/cache" "$BUILD/apt/pool"
    cat >"$BUILD/apt/sources/debian-src.sources" <<SOURCES
Types: deb-src
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    local stamp="$BUILD/apt/lists/updated"
    if [ -z "$(find "$stamp" -mtime -7 2>/dev/null)" ]; then
        say "refreshing Debian's source package lists ($MIRROR)"
        if apt_src update -qq >&2; then
            touch "$stamp"
        elif [ -e "$stamp" ]; then
            say "could not refresh them: using the lists of $(date -r "$stamp" +%F)"
        else
            die "cannot read Debian's source package lists from $MIRROR"
        fi
    fi
    apt-cache -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$BUILD/apt/sources" \
        -o Dir::State::Lists="$BUILD/apt/lists" -o Dir::Cache="$BUILD/apt/cache" \
        showsrc --only-source kubernetes 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -n1
}

# The build's key: what its binaries depend on besides the source package.
build_key() {
    {
        echo "rev $BUILD_REV"
        go version
        dpkg-query -W -f='${Version}\n' golang-github-modern-go-reflect2-dev
        gcc -dumpfullversion
        cat "$SUPPORT"/patches/*.patch "$SUPPORT/mkimage.py"
    } | sha256sum | cut -c1-12
}

# Builds Kubernetes into $BUILD/<version>-<key> unless it is there; sets BUILT to that folder.
ensure_build() {
    local version key
    mkdir -p "$BUILD"
    version="$(source_version)"
    [ -n "$version" ] || die "Debian's lists have no source package 'kubernetes' ($MIRROR $SUITE)"
    key="$(build_key)"
    BUILT="$BUILD/$version-$key"
    [ -e "$BUILT/done" ] && return
    # One build at a time (another cluster directory may be building the same).
    (
        flock 9
        [ -e "$BUILT/done" ] || build "$version"
    ) 9>"$BUILD/lock"
    [ -e "$BUILT/done" ] || die "the build did not finish (see $BUILT/build.log)"
}

# build VERSION: fetch, patch and build into $BUILT (run under the build lock).
build() {
    local version="$1" t0 src log="$BUILT/build.log" patch upstream release
    t0=$(date +%s)
    upstream="${version#*:}"
    upstream="${upstream%-*}"      # 1.20.5+really1.20.2: Debian's name for 1.20.2
    release="${upstream##*really}"
    say "building Kubernetes from Debian's source package $version (about 4 minutes;" \
        "log: $log)"
    rm -rf "$BUILT"
    mkdir -p "$BUILT/bin.new" "$BUILT/images" "$BUILD/gocache" "$BUILD/tmp" "$BUILD/gopath/src/k8s.io"
    : >"$log"
    (cd "$BUILD/apt/pool" && apt_src source --download-only -qq "kubernetes=$version" >>"$log" 2>&1) \
        || die "cannot download the source package kubernetes=$version (see $log)"
    src="$BUILT/src"
    mkdir -p "$src"
    tar -xzf "$BUILD/apt/pool/kubernetes_$upstream.orig.tar.gz" -C "$src" --strip-components=1
    tar -xJf "$BUILD/apt/pool/kubernetes_${version#*:}.debian.tar.xz" -C "$BUILT"
    # Debian's patches (kubectl fixes), then ours.
    if [ -f "$BUILT/debian/patches/series" ]; then
        for patch in $(grep -v '^#' "$BUILT/debian/patches/series"); do
            patch -d "$src" -p1 -s <"$BUILT/debian/patches/$patch" >>"$log" 2>&1 \
                || die "Debian's patch $patch does not apply (see $log)"
        done
    fi
    for patch in "$SUPPORT"/patches/*.patch; do
        patch -d "$src" -p1 -s <"$patch" >>"$log" 2>&1 || die "$patch does not apply (see $log)"
    done
    # The vendored reflect2 1.0.1 corrupts memory with Go >= 1.18: Debian's 1.0.2 instead.
    rm -f "$src"/vendor/github.com/modern-go/reflect2/*.go "$src"/vendor/github.com/modern-go/reflect2/*.s
    cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go \
        /usr/share/gocode/src/github.com/modern-go/reflect2/*.s "$src/vendor/github.com/modern-go/reflect2/"

    # GOPATH mode, as Kubernetes 1.20's own scripts build (the vendor tree does not satisfy
    # module mode with this Go). One GOPATH path for every build, so that Go's cache serves
    # a rebuild after a patch changed.
    ln -sfn "$src" "$BUILD/gopath/src/k8s.io/kubernetes"
    (
        cd "$BUILD/gopath/src/k8s.io/kubernetes"
        export GOPATH="$BUILD/gopath" GOCACHE="$BUILD/gocache" GOTMPDIR="$BUILD/tmp" \
            GO111MODULE=off CGO_ENABLED=0 GOFLAGS='' GOPROXY=off
        # The API server's OpenAPI definitions are generated (not in the tarball).
        local t dirs ld pkg
        t=$(date +%s)
        nice -n 19 go build -o "$BUILT/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen >>"$log" 2>&1 \
            || die "openapi-gen does not build (see $log)"
        dirs="$(find -H . \( -path ./_\* -o -path ./.\* -o -path ./vendor \) -prune -o -type f -name '*.go' -print \
            | sed 's|^\./staging/src|vendor|; s|^\./||' \
            | grep -v -E '^vendor/k8s.io/(code-generator|sample-apiserver)/' \
            | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' | xargs -n1 dirname \
            | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)"
        nice -n 19 "$BUILT/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
            -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
            -r "$BUILT/openapi-violations.report" >>"$log" 2>&1 || die "openapi-gen failed (see $log)"
        say "  generated the OpenAPI definitions in $(($(date +%s) - t))s"
        ld="-s -w"
        for pkg in k8s.io/kubernetes/vendor/k8s.io/component-base/version \
            k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
            ld="$ld -X $pkg.gitVersion=v$release -X $pkg.gitTreeState=archive"
            ld="$ld -X $pkg.gitMajor=${release%%.*} -X $pkg.gitMinor=$(echo "$release" | cut -d. -f2)"
        done
        t=$(date +%s)
        nice -n 19 go build -tags selinux,notest,providerless -trimpath -ldflags "$ld" -o "$BUILT/bin.new/" \
            ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet \
            ./cmd/kubectl >>"$log" 2>&1 || die "the build failed (see $log)"
        say "  built kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl" \
            "in $(($(date +%s) - t))s"
    )
    # The kubelet must hold nothing that asks a cloud's metadata address (scripts/k8s/patches).
    local cloud='pkg/credentialprovider/\(aws\|azure\|gcp\)\.\|cloudinfo/\(aws\|azure\|gce\)\.'
    cloud="$cloud"'\|aws-sdk-go/aws/ec2metadata\.\|cloud\.google\.com/go/compute/metadata\.'
    if grep -aq "$cloud" "$BUILT/bin.new/kubelet"; then
        die "the kubelet still has code that asks a cloud's metadata address: $(grep -ao "$cloud" \
            "$BUILT/bin.new/kubelet" | sort -u | paste -sd' ' -)"
    fi

    # The pod sandbox ("pause") image: Kubernetes' own pause.c, static.
    mkdir -p "$BUILT/images/pause-root"
    gcc -static -Os -Wall -Werror -DVERSION=v3.2-trainfleet -o "$BUILT/images/pause-root/pause" \
        "$src/build/pause/linux/pause.c" >>"$log" 2>&1 || die "pause does not build (see $log)"
    strip "$BUILT/images/pause-root/pause"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$BUILT/images/pause-root" \
        -cf "$BUILT/images/pause-rootfs.tar" .
    /usr/bin/python3 "$SUPPORT/mkimage.py" "$BUILT/images/pause-rootfs.tar" "$PAUSE_IMAGE" \
        "$BUILT/images/pause.tar" /pause

    mv "$BUILT/bin.new" "$BUILT/bin"
    touch "$BUILT/done"
    say "build done in $(($(date +%s) - t0))s"
}

# Earlier builds (another version or patch set) that no process runs from: their source and
# binaries go, Go's cache stays.
prune_builds() {
    local other
    for other in "$BUILD"/*/done; do
        other="$(dirname "$other")"
        if [ "$other" != "$BUILT" ] && ! in_use "$other"; then
            say "removing the earlier build $other"
            rm -rf "$other"
        fi
    done
}

# Whether a running process's program is in folder $1 (a cluster of another directory).
in_use() {
    local exe
    for exe in /proc/[0-9]*/exe; do
        if [[ "$(readlink "$exe" 2>/dev/null)" == "$1/"* ]]; then return 0; fi
    done
    return 1
}

# --- certificates ---------------------------------------------------------------------------

# new_key FILE: an ECDSA P-256 key.
new_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; chmod 600 "$1"; }

# cert NAME SUBJECT EXTENSIONS: $PKI/NAME.crt and .key signed by the CA, for 30 days; kept
# while it is the same request, signed by the current CA, and valid for a week more.
cert() {
    local name="$1" subject="$2" ext="$3" crt="$PKI/$1.crt"
    local spec="$subject $ext"
    if [ -f "$crt" ] && [ "$(cat "$PKI/$name.spec" 2>/dev/null)" = "$spec" ] \
        && openssl x509 -checkend $((7 * 86400)) -noout -in "$crt" >/dev/null 2>&1 \
        && openssl verify -CAfile "$PKI/ca.crt" "$crt" >/dev/null 2>&1; then
        return
    fi
    say "certificate $name"
    new_key "$PKI/$name.key"
    printf '%s\n' "$ext" | tr ';' '\n' >"$PKI/$name.ext"
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -CAcreateserial -CAserial "$PKI/ca.srl" -days 30 -extfile "$PKI/$name.ext" \
        -out "$crt" 2>/dev/null
    echo "$spec" >"$PKI/$name.spec"
    rm -f "$PKI/$name.csr"
}

pki() {
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    # The CA: a year, renewed (with everything it signed) when less than a month is left.
    if ! openssl x509 -checkend $((31 * 86400)) -noout -in "$PKI/ca.crt" >/dev/null 2>&1; then
        [ -f "$PKI/ca.crt" ] && say "renewing the cluster's CA"
        new_key "$PKI/ca.key"
        openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=trainfleet-k8s-ca" -days 365 \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
            -out "$PKI/ca.crt" 2>/dev/null
    fi
    local server="keyUsage=critical,digitalSignature;extendedKeyUsage=serverAuth"
    local client="keyUsage=critical,digitalSignature;extendedKeyUsage=clientAuth"
    cert apiserver "/CN=kube-apiserver" "$server;subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:$NODE,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
    cert admin "/O=system:masters/CN=trainfleet-admin" "$client"
    cert controller-manager "/CN=system:kube-controller-manager" "$client"
    cert scheduler "/CN=system:kube-scheduler" "$client"
    cert kubelet "/O=system:nodes/CN=system:node:$NODE" "$client"
    cert kubelet-server "/CN=$NODE" "$server;subjectAltName=DNS:$NODE,IP:127.0.0.1"
    # Service account tokens' key (kept across CA renewals: issued tokens stay valid).
    if [ ! -f "$PKI/sa.key" ]; then
        new_key "$PKI/sa.key"
        openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    fi
}

# --- configuration --------------------------------------------------------------------------

# kubeconfig NAME USER: a kubeconfig for $PKI/USER.crt with everything embedded.
kubeconfig() {
    cat <<KUBECONFIG
# Generated by scripts/k8s.sh; rewritten at each start.
apiVersion: v1
kind: Config
clusters:
- name: trainfleet
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: trainfleet
  context: {cluster: trainfleet, user: $2}
current-context: trainfleet
KUBECONFIG
}

# args NAME: the command line of component NAME, one word a line.
args() {
    case "$1" in
        etcd) printf '%s\n' etcd --name=default --data-dir="$DIR/etcd" --logger=zap \
            --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
            --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
            --listen-peer-urls="http://127.0.0.1:$((ETCD_PORT + 1))" \
            --initial-advertise-peer-urls="http://127.0.0.1:$((ETCD_PORT + 1))" \
            --initial-cluster="default=http://127.0.0.1:$((ETCD_PORT + 1))" \
            --listen-metrics-urls="http://127.0.0.1:$((ETCD_PORT + 2))" ;;
        kube-apiserver) printf '%s\n' "$BIN/kube-apiserver" \
            --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
            --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" --cert-dir="$DIR/apiserver" \
            --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
            --client-ca-file="$PKI/ca.crt" \
            --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
            --service-account-issuer=https://kubernetes.default.svc.cluster.local \
            --service-cluster-ip-range=10.96.0.0/24 \
            --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
            --allow-privileged=true \
            --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
            --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
            --kubelet-certificate-authority="$PKI/ca.crt" \
            --kubelet-preferred-address-types=Hostname --profiling=false ;;
        containerd) printf '%s\n' containerd --config="$ETC/containerd.toml" ;;
        kube-controller-manager) printf '%s\n' "$BIN/kube-controller-manager" \
            --kubeconfig="$ETC/controller-manager.kubeconfig" \
            --authentication-kubeconfig="$ETC/controller-manager.kubeconfig" \
            --authorization-kubeconfig="$ETC/controller-manager.kubeconfig" \
            --bind-address=127.0.0.1 --secure-port="$CONTROLLER_MANAGER_PORT" --port=0 \
            --cert-dir="$DIR/controller-manager" --leader-elect=false --profiling=false \
            --flex-volume-plugin-dir="$DIR/controller-manager/volume-plugins" \
            --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
            --use-service-account-credentials=true \
            --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
            --node-monitor-grace-period=24s ;;
        kube-scheduler) printf '%s\n' "$BIN/kube-scheduler" \
            --kubeconfig="$ETC/scheduler.kubeconfig" \
            --authentication-kubeconfig="$ETC/scheduler.kubeconfig" \
            --authorization-kubeconfig="$ETC/scheduler.kubeconfig" \
            --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --port=0 \
            --cert-dir="$DIR/scheduler" --leader-elect=false --profiling=false ;;
        kubelet) printf '%s\n' "$BIN/kubelet" --config="$ETC/kubelet.yaml" \
            --kubeconfig="$ETC/kubelet.kubeconfig" \
            --container-runtime=remote --container-runtime-endpoint="unix://$SOCK" \
            --root-dir="$DIR/kubelet" --cert-dir="$DIR/kubelet/pki" \
            --volume-plugin-dir="$DIR/kubelet/volume-plugins" \
            --seccomp-profile-root="$DIR/kubelet/seccomp" \
            --hostname-override="$NODE" --pod-infra-container-image="$PAUSE_IMAGE" ;;
    esac
}

# write_config OUT: every generated file of the cluster, into folder OUT.
write_config() {
    local out="$1" component
    mkdir -p "$out/cni" "$out/args"
    cat >"$out/ports" <<PORTS
APISERVER=$APISERVER_PORT
ETCD=$ETCD_PORT
KUBELET=$KUBELET_PORT
KUBELET_HEALTHZ=$KUBELET_HEALTHZ_PORT
CONTROLLER_MANAGER=$CONTROLLER_MANAGER_PORT
SCHEDULER=$SCHEDULER_PORT
PORTS
    kubeconfig admin admin >"$out/admin.kubeconfig"
    kubeconfig controller-manager controller-manager >"$out/controller-manager.kubeconfig"
    kubeconfig scheduler scheduler >"$out/scheduler.kubeconfig"
    kubeconfig kubelet kubelet >"$out/kubelet.kubeconfig"
    # A restart when a certificate the components read from $PKI changed.
    cat "$PKI"/*.crt "$PKI/sa.pub" | sha256sum >"$out/pki.sum"
    for component in "${COMPONENTS[@]}"; do args "$component" >"$out/args/$component"; done
    # Loopback only: the node is Ready and hostNetwork pods run; other pods get no network.
    echo '{"cniVersion": "0.4.0", "name": "trainfleet-lo", "plugins": [{"type": "loopback"}]}' \
        >"$out/cni/99-loopback.conflist"
    cat >"$out/containerd.toml" <<TOML
# Generated by scripts/k8s.sh; rewritten at each start.
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$RUN/containerd-ttrpc.sock"
[debug]
  address = "$RUN/containerd-debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: runc cannot set the pause container's oom_score_adj
  # (-998) otherwise ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
        Root = "$RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ETC/cni"
    max_conf_num = 1
TOML
    cat >"$out/kubelet.yaml" <<YAML
# Generated by scripts/k8s.sh; rewritten at each start.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-server.crt
tlsPrivateKeyFile: $PKI/kubelet-server.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
# A shared machine: no iptables chains; the sysctls are left alone (KUBELET_SKIP_KERNEL_TUNABLES).
makeIPTablesUtilChains: false
protectKernelDefaults: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# The disk may be fuller than the default 10-15 % thresholds allow; images are never
# collected (they cannot be pulled again).
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# The device plugin socket would be /var/lib/kubelet/device-plugins/kubelet.sock, whatever
# the root directory.
featureGates: {DevicePlugins: false}
YAML
}

# The components that read generated file $1 ("all" for every one).
readers() {
    case "$1" in
        args/*) echo "${1#args/}" ;;
        containerd.toml | cni/*) echo containerd ;;
        kubelet.yaml | kubelet.kubeconfig) echo kubelet ;;
        controller-manager.kubeconfig) echo kube-controller-manager ;;
        scheduler.kubeconfig) echo kube-scheduler ;;
        admin.kubeconfig) ;;
        *) echo all ;;  # ports, certificates
    esac
}

# Writes the configuration; the running components whose configuration changed are stopped
# (start then starts them again with it), every one if ports or certificates changed.
configure() {
    local tmp f readers="" component
    tmp="$(mktemp -d)"
    write_config "$tmp"
    mkdir -p "$ETC"
    for f in $(cd "$tmp" && find . -type f | sort); do
        f="${f#./}"
        if ! cmp -s "$tmp/$f" "$ETC/$f"; then readers="$readers $(readers "$f")"; fi
    done
    if [[ " $readers " == *" all "* ]]; then
        if [ -n "$(running_components)" ]; then
            say "ports or certificates changed, restarting the cluster"
            stop
        fi
    else
        for component in $(tr ' ' '\n' <<<"$readers" | sort -u); do
            if component_pid "$component" >/dev/null; then
                say "the configuration of $component changed, restarting it"
                stop_component "$component"
            fi
        done
    fi
    cp -r "$tmp"/. "$ETC"/
    chmod 600 "$ETC"/*.kubeconfig
    rm -rf "$tmp"
}

running_components() {
    local component
    for component in "${COMPONENTS[@]}"; do
        if component_pid "$component" >/dev/null; then echo "$component"; fi
    done
}

# Paths outside $DIR that the components may create (some only once pods run, such as
# containerd's shim sockets in /run/containerd/s): those not there when the cluster starts
# are noted in $RUN/host-paths, for `stop` to remove the empty folders left in them.
note_host_paths() {
    local path
    for path in "${HOST_PATHS[@]}"; do
        if [ ! -e "$path" ] && ! grep -qxF "$path" "$RUN/host-paths" 2>/dev/null; then
            echo "$path" >>"$RUN/host-paths"
        fi
    done
}

# --- images ---------------------------------------------------------------------------------

# The manifest digest of containerd's image REF (empty if it has none).
manifest_of() { ctrk images ls 2>/dev/null | awk -v ref="$1" '$1 == ref {print $3}'; }

# import_image NAME: podman's image NAME into the cluster's containerd under the same name,
# unless that very image (the same id) is there already.
import_image() {
    local name="$1" id old new t0 digest layers
    id="$(podman image inspect --format '{{.Id}}' "$name" 2>/dev/null)" \
        || { say "no podman image '$name'"; return 1; }
    old="$(manifest_of "$name")"
    if [ -n "$old" ] && [ "$old" = "$(manifest_of "sha256:$id")" ]; then return 0; fi
    t0=$(date +%s)
    # Uncompressed: quicker than gzip, and the layers are dropped once unpacked (below).
    if ! podman save --quiet --uncompressed --format oci-archive "$name" | ctrk images import - >/dev/null; then
        say "could not import '$name'"
        return 1
    fi
    new="$(manifest_of "$name")"
    [ -n "$new" ] || { say "'$name' imported under another name: $(ctrk images ls -q | paste -sd' ')"; return 1; }
    # The id reference containerd kept for the image this one replaces.
    if [ -n "$old" ] && [ "$old" != "$new" ] \
        && ! ctrk images ls | awk -v m="$old" '$3 == m && $1 !~ /^sha256:/' | grep -q .; then
        for digest in $(ctrk images ls | awk -v m="$old" '$3 == m && $1 ~ /^sha256:/ {print $1}'); do
            ctrk images rm "$digest" >/dev/null 2>&1 || true
        done
    fi
    # Containers run from the unpacked snapshots: the layer blobs would only double the disk.
    layers="$(ctrk content get "$new" | /usr/bin/python3 -c \
        'import json, sys; print("\n".join(l["digest"] for l in json.load(sys.stdin)["layers"]))')"
    for digest in $layers; do ctrk content rm "$digest" >/dev/null 2>&1 || true; done
    say "imported $name in $(($(date +%s) - t0))s"
}

# The podman images `start` imports: $TRAINFLEET_K8S_IMAGES if set, else localhost/trainfleet/*.
project_images() {
    if [ -n "${TRAINFLEET_K8S_IMAGES+set}" ]; then
        # shellcheck disable=SC2086  # one line per name
        printf '%s\n' $TRAINFLEET_K8S_IMAGES
        return
    fi
    command -v podman >/dev/null || return 0
    podman images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null \
        | awk -v prefix="$PROJECT_IMAGES" 'index($0, prefix) == 1 && !/:<none>$/' | sort -u
}

import_project_images() {
    local images name
    images="$(project_images)"
    if [ -z "$images" ]; then
        say "no project images to import (scripts/images.sh builds them; then: $0 import NAME...)"
        return
    fi
    command -v podman >/dev/null || die "podman is not installed: cannot import $images"
    for name in $images; do import_image "$name" || die "could not import the image '$name'"; done
}

# --- network check --------------------------------------------------------------------------

loopback() {
    local address="${1%:*}"
    address="${address#[}"
    address="${address%]}"
    address="${address%%%*}"
    case "$address" in 127.* | ::1 | ::ffff:127.*) return 0 ;; *) return 1 ;; esac
}

# Every process of the cluster: the components and containerd's shims (not the pods).
cluster_pids() {
    local component
    for component in "${COMPONENTS[@]}"; do component_pid "$component" || true; done
    shim_pids
}

# Dies if a process of the cluster has a TCP or UDP socket that is connected to, or listens
# on, an address beyond loopback.
check_network() {
    local pids bad="" netid state local_address peer rest pid comm
    pids=" $(cluster_pids | tr '\n' ' ') "
    while read -r netid state _ _ local_address peer rest; do
        for pid in $(grep -o 'pid=[0-9]*' <<<"$rest" | cut -d= -f2 | sort -u); do
            [[ "$pids" == *" $pid "* ]] || continue
            comm="$(cat "/proc/$pid/comm" 2>/dev/null || echo "?")"
            if [ "$state" = LISTEN ] || [ "$state" = UNCONN ]; then
                loopback "$local_address" \
                    || bad="$bad"$'\n'"  $comm (pid $pid) $netid listens on $local_address"
            elif ! loopback "$peer"; then
                bad="$bad"$'\n'"  $comm (pid $pid) $netid $state $local_address -> $peer"
            fi
        done
    done < <(ss -tuanpH)
    [ -z "$bad" ] || die "a component of the cluster reaches beyond loopback:$bad"
}

# --- daemons --------------------------------------------------------------------------------

start_component() {
    local component="$1"
    local -a command
    component_pid "$component" >/dev/null && return
    mapfile -t command <"$ETC/args/$component"
    EXTRA_ENV=()
    if [ "$component" = kubelet ]; then
        # No cloud metadata calls even from a library that would try; no host sysctls.
        EXTRA_ENV=(AWS_EC2_METADATA_DISABLED=true KUBELET_SKIP_KERNEL_TUNABLES=1)
    fi
    launch "$component" "${command[@]}"
}

apiserver_ready() { kc get --raw /readyz; }
# Whether the node is Ready, as last said at or after $KUBELET_SINCE (UTC, RFC 3339): a
# kubelet stopped less than 40 s ago still has a Ready condition that says True.
node_ready() {
    local ready
    ready="$(kc get node "$NODE" -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.lastHeartbeatTime}{end}')" \
        || return 1
    # shellcheck disable=SC2071  # RFC 3339 times of one format compare as strings
    [ "${ready% *}" = True ] && [[ ! "${ready#* }" < "$KUBELET_SINCE" ]]
}

start() {
    local t0 component
    t0=$(date +%s)
    check_machine
    install_packages
    ensure_build
    mkdir -p "$ETC" "$RUN/home" "$LOG" "$DIR/etcd" "$DIR/kubelet"
    chmod 700 "$DIR/etcd"
    pki
    # The build the cluster runs: a new one (another patch set) restarts the cluster.
    if [ "$(readlink "$BIN" 2>/dev/null)" != "$BUILT/bin" ]; then
        if [ -n "$(running_components)" ]; then
            say "the cluster runs an earlier build, restarting it"
            stop
        fi
        ln -sfn "$BUILT/bin" "$BIN"
    fi
    configure
    daemon_env
    local was_running
    was_running="$(running_components | paste -sd' ' -)"
    note_host_paths

    start_component etcd
    wait_for etcd "health" curl -sf "http://127.0.0.1:$ETCD_PORT/health"
    start_component kube-apiserver
    wait_for kube-apiserver "readiness" apiserver_ready
    start_component containerd
    wait_for containerd "answer" ctrk version
    if [ -z "$(manifest_of "$PAUSE_IMAGE")" ]; then
        ctrk images import "$BUILT/images/pause.tar" >/dev/null || die "cannot import the pause image"
    fi
    start_component kube-controller-manager
    start_component kube-scheduler
    KUBELET_SINCE="$(date -u +%FT%TZ)"
    if component_pid kubelet >/dev/null; then KUBELET_SINCE=0; fi
    start_component kubelet
    # While the node comes up.
    import_project_images
    wait_for kube-controller-manager "health" curl -sfk "https://127.0.0.1:$CONTROLLER_MANAGER_PORT/healthz"
    wait_for kube-scheduler "health" curl -sfk "https://127.0.0.1:$SCHEDULER_PORT/healthz"
    wait_for kubelet "Ready node $NODE" node_ready
    # Pods need their namespace's service account, which the controller-manager creates.
    wait_for kube-controller-manager "default service account" kc -n default get serviceaccount default
    check_network
    prune_builds
    if [ "$was_running" = "${COMPONENTS[*]}" ]; then
        say "running (node $NODE Ready)"
    else
        say "cluster up in $(($(date +%s) - t0))s: node $NODE Ready, API server https://127.0.0.1:$APISERVER_PORT"
    fi
    echo "$KUBECONFIG_PATH"
}

# Kills every pod container through containerd (running), or, without containerd, every
# process under this cluster's shims.
kill_pods() {
    local task container pid pids
    if component_pid containerd >/dev/null; then
        for task in $(ctrk tasks ls -q 2>/dev/null); do ctrk tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true; done
        for task in $(ctrk tasks ls -q 2>/dev/null); do ctrk tasks delete -f "$task" >/dev/null 2>&1 || true; done
        for container in $(ctrk containers ls -q 2>/dev/null); do
            ctrk containers delete "$container" >/dev/null 2>&1 || true
        done
    fi
    pids=""
    for pid in $(shim_pids); do pids="$pids $(descendants "$pid" | tr '\n' ' ') $pid"; done
    if [ -n "${pids// /}" ]; then
        # shellcheck disable=SC2086  # one argument per pid
        kill -KILL $pids 2>/dev/null || true
    fi
}

# Whether a kubelet or containerd that is not this cluster's runs (then what they share
# with ours outside $DIR is left alone).
others_running() {
    local pid
    for pid in $(pgrep -x kubelet || true) $(pgrep -x containerd || true); do
        alive "$pid" && return 0
    done
    return 1
}

kubepods_cgroups() {
    local path
    for path in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
        if [ -d "$path" ]; then echo "$path"; fi
    done
}

# remove_pod_logs DIR: a pod's log folder and the links to it in /var/log/containers.
remove_pod_logs() {
    local link
    for link in /var/log/containers/*.log; do
        if [[ "$(readlink "$link" 2>/dev/null)" == "$1/"* ]]; then rm -f "$link"; fi
    done
    rm -rf "$1"
}

cleanup_host() {
    local mount uid path link
    # Mounts under $DIR (the kubelet's root directory, its volumes, rootfs left by a crash).
    for mount in $(awk -v dir="$DIR/" 'index($5, dir) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || say "cannot unmount $mount"
    done
    # The pods' logs: the kubelet keeps them in /var/log/pods/NAMESPACE_POD_UID, whatever its
    # root directory, with links in /var/log/containers; it removes a pod's a minute or so
    # after the pod (or at its next start), as it removes those of any pod it does not know.
    if others_running; then
        # Those of the pods the kubelet has a folder for, then.
        for uid in "$DIR"/kubelet/pods/*/; do
            [ -d "$uid" ] || continue  # no pods: the pattern itself
            uid="$(basename "$uid")"
            for path in /var/log/pods/*_"$uid"; do
                if [ -d "$path" ]; then remove_pod_logs "$path"; fi
            done
        done
        say "another kubelet or containerd runs: leaving the /kubepods cgroups and ${HOST_PATHS[*]} alone"
        return
    fi
    # No kubelet runs: every pod's logs are left over, as a kubelet would find them; those in
    # a /var/log/pods that this cluster created are removed.
    if grep -qxF /var/log/pods "$RUN/host-paths" 2>/dev/null; then
        for path in /var/log/pods/*/; do
            if [ -d "$path" ]; then remove_pod_logs "${path%/}"; fi
        done
    fi
    # The pods' cgroups (cgroupfs driver): empty ones, deepest first.
    local i
    for ((i = 0; i < 20; i++)); do
        for path in $(kubepods_cgroups); do
            find "$path" -depth -type d -exec rmdir {} + 2>/dev/null || true
        done
        [ -n "$(kubepods_cgroups)" ] || break
        sleep 0.2
    done
    if [ -n "$(kubepods_cgroups)" ]; then say "cgroups still in use: $(kubepods_cgroups | paste -sd' ' -)"; fi
    # The folders the components created outside $DIR, once empty (what is left in one is
    # not this cluster's: it stays, with its folder).
    if [ -f "$RUN/host-paths" ]; then
        local left=()
        while read -r path; do
            if [ -d "$path" ]; then find "$path" -depth -type d -empty -delete 2>/dev/null || true; fi
            if [ -e "$path" ]; then left+=("$path"); fi
        done <"$RUN/host-paths"
        if [ ${#left[@]} -gt 0 ]; then
            say "left (not empty): ${left[*]}"
            printf '%s\n' "${left[@]}" >"$RUN/host-paths"
        else
            rm -f "$RUN/host-paths"
        fi
    fi
}

# Stops one component (its pods keep running while containerd's shims do).
stop_component() {
    local pid
    pid="$(component_pid "$1")" || return 0
    say "stopping $1"
    if [ "$1" = kubelet ]; then
        # The kubelet 1.20 exits only on a second SIGTERM.
        kill -TERM "$pid" 2>/dev/null || true
        sleep 1
    fi
    terminate "$pid"
    rm -f "$RUN/$1.pid"
}

stop() {
    local pid component pids=()
    stop_component kubelet
    for component in kube-scheduler kube-controller-manager kube-apiserver; do
        if pid="$(component_pid "$component")"; then say "stopping $component"; pids+=("$pid"); fi
    done
    terminate "${pids[@]}"
    kill_pods
    if pid="$(component_pid containerd)"; then say "stopping containerd"; terminate "$pid"; fi
    mapfile -t pids < <(shim_pids)
    terminate "${pids[@]}"
    if pid="$(component_pid etcd)"; then say "stopping etcd"; terminate "$pid"; fi
    for component in "${COMPONENTS[@]}"; do rm -f "$RUN/$component.pid"; done
    cleanup_host
}

status() {
    if ! { [ -x "$BIN/kubectl" ] && [ -f "$KUBECONFIG_PATH" ] && apiserver_ready >/dev/null 2>&1; }; then
        die "not running (no cluster answers at https://127.0.0.1:$APISERVER_PORT; run: $0 start)"
    fi
    kc get nodes,pods -A -o wide
}

import() {
    [ $# -gt 0 ] || die "usage: $0 import IMAGE..."
    component_pid containerd >/dev/null || die "the cluster's containerd is not running (run: $0 start)"
    local name
    for name in "$@"; do import_image "$name" || die "could not import the image '$name'"; done
}

case "${1:-}" in
    packages) [ "$(id -u)" = 0 ] || die "must run as root"; install_packages ;;
    build) [ "$(id -u)" = 0 ] || die "must run as root"; install_packages; ensure_build ;;
    start) start ;;
    stop) [ "$(id -u)" = 0 ] || die "must run as root"; stop ;;
    status) status ;;
    import) shift; import "$@" ;;
    conf | kubeconfig) echo "$KUBECONFIG_PATH" ;;
    *) echo "usage: $0 start|stop|status|import IMAGE...|conf|packages|build" >&2; exit 2 ;;
esac
