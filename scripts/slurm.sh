#!/usr/bin/env bash
# A local Slurm cluster for the tests and for trying the Slurm backend: one slurmctld and three
# compute nodes (tf-node1..tf-node3), all on this machine, each node its own `slurmd -N NAME`
# (Debian's slurm-wlm is built with multiple-slurmd support).
#
#   start               install slurm-wlm + munge if missing, start munged, slurmctld and the
#                       three slurmd, wait until every node is idle; the LAST stdout line is the
#                       path of slurm.conf:  export SLURM_CONF=$(bash scripts/slurm.sh start | tail -n1)
#   stop                cancel all jobs, stop every daemon this script started
#   status              sinfo and squeue
#   node-start NODE     (re)start one node's slurmd, wait until the node is back in service
#   node-kill NODE      kill -9 one node's slurmd and the job steps it was running (a node failure)
#   conf                print the path of slurm.conf (like start's last line, starts nothing)
#
# State, config and logs live in $TRAINFLEET_SLURM_DIR (default /var/tmp/trainfleet-slurm);
# `rm -rf` it after `stop` for a clean slate. Ports: $TRAINFLEET_SLURM_PORT (slurmctld, default
# 16817) and the next three for the nodes, away from the standard 6817/6818 so a real Slurm on
# the same machine is left alone. Each node gets its own loopback address 127.0.10.N, with an
# /etc/hosts entry, so a process in a job step can use the node name as a host name.
#
# The cluster is built for fast turnaround, not fidelity: 4 CPUs, 4000 MB and 2 fake GPUs per
# node whatever the hardware (SlurmdParameters=config_overrides), no cgroups (task/none,
# proctrack/linuxproc), no slurmdbd (so no sacct; finished jobs are in jobcomp.txt), everything
# runs as root.
set -euo pipefail

DIR="${TRAINFLEET_SLURM_DIR:-/var/tmp/trainfleet-slurm}"
CTLD_PORT="${TRAINFLEET_SLURM_PORT:-16817}"
NODES=(tf-node1 tf-node2 tf-node3)
NET=127.0.10          # node N gets $NET.N (not 127.0.1.x, which Debian gives the host's own name)
CONF="$DIR/etc/slurm.conf"
READY_TIMEOUT=60      # seconds to wait for daemons / nodes

say() { echo "slurm.sh: $*" >&2; }
die() { say "$*"; exit 1; }
root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# Client commands of this cluster (never a system-wide /etc/slurm/slurm.conf).
sl() { SLURM_CONF="$CONF" "$@"; }

node_index() {  # tf-node2 -> 2
    local i
    for i in "${!NODES[@]}"; do
        if [ "${NODES[$i]}" = "$1" ]; then echo $((i + 1)); return; fi
    done
    die "unknown node '$1' (nodes: ${NODES[*]})"
}

# --- processes ------------------------------------------------------------------------------

# The pid in pidfile $1 if that process is alive and its command is $2.
pid_of() {
    local pid
    pid="$(cat "$1" 2>/dev/null)" || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}
ctld_pid() { pid_of "$DIR/run/slurmctld.pid" slurmctld; }
slurmd_pid() { pid_of "$DIR/run/slurmd-$1.pid" slurmd; }

# slurmstepd processes of node $1. A stepd outlives its slurmd (it is daemonised), so they are
# found by the unix sockets they listen on, which live in the node's SlurmdSpoolDir.
stepd_pids() {
    local inodes pid link
    inodes="$(awk -v dir="$DIR/spool/$1/" 'index($8, dir) == 1 {print "socket:[" $7 "]"}' /proc/net/unix)"
    [ -n "$inodes" ] || return 0
    for pid in $(pgrep -x slurmstepd || true); do
        for link in /proc/"$pid"/fd/*; do
            if grep -qxF -- "$(readlink "$link" 2>/dev/null)" <<<"$inodes"; then echo "$pid"; break; fi
        done
    done
}

# Pids of the processes under pid $1 (children, grandchildren, ...), deepest last.
descendants() {
    local child
    for child in $(pgrep -P "$1" || true); do
        echo "$child"
        descendants "$child"
    done
}

# Sends signal $1 to pid $2 and waits up to $3 seconds for it to go; SIGKILL after that.
terminate() {
    local sig="$1" pid="$2" secs="$3" i
    kill "-$sig" "$pid" 2>/dev/null || return 0
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    say "pid $pid did not stop on SIG$sig, killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

# --- setup ----------------------------------------------------------------------------------

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sinfo >/dev/null && command -v munged >/dev/null; then return; fi
    say "installing slurm-wlm and munge"
    root apt-get update -qq >&2
    # --no-install-recommends: the metapackage recommends every plugin (hdf5, influxdb, ...).
    root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >&2
}

# munged is shared with anything else on the machine that uses munge; it is only stopped by
# `stop` if this script started it.
start_munge() {
    if [ ! -s /etc/munge/munge.key ]; then
        say "creating /etc/munge/munge.key"
        root mungekey --create --keyfile /etc/munge/munge.key
        root chown munge:munge /etc/munge/munge.key
        root chmod 0400 /etc/munge/munge.key
    fi
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
    say "starting munged"
    root install -d -o munge -g munge -m 0755 /run/munge
    root install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
    root runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1
    local i
    for ((i = 0; i < 50; i++)); do
        if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
            cat /run/munge/munged.pid > "$DIR/run/munged.pid"
            return
        fi
        sleep 0.1
    done
    die "munged does not answer (see /var/log/munge/munged.log)"
}

# Host names for the nodes, so `ping tf-node2` / MASTER_ADDR=tf-node1 work inside jobs.
add_hosts() {
    local node n
    for node in "${NODES[@]}"; do
        n="$(node_index "$node")"
        if ! grep -qE "^${NET}\.${n}[[:space:]]+${node}([[:space:]]|\$)" /etc/hosts; then
            say "adding '$NET.$n $node' to /etc/hosts"
            echo "$NET.$n $node" | root tee -a /etc/hosts >/dev/null
        fi
    done
}

# Writes slurm.conf and gres.conf to $1 (a directory).
write_config() {
    local out="$1" host node n
    host="$(hostname -s)"
    mkdir -p "$out"
    cat >"$out/slurm.conf" <<CONF
# Generated by scripts/slurm.sh; edits are overwritten on the next start.
ClusterName=trainfleet
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
SwitchType=switch/none

StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info

# No cgroups: processes are tracked through /proc and tasks are not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd, hence no sacct; finished jobs are appended to jobcomp.txt instead.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.txt

# Fast scheduling: try to start a job as soon as it is submitted (batch_sched_delay defaults to
# 3 s), run the full loop every few seconds, start the job step right away.
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=1,sched_min_interval=0,bf_interval=1,bf_resolution=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Failure detection: a node whose slurmd stops answering is DOWN after ~SlurmdTimeout, and
# comes back by itself when its slurmd registers again (ReturnToService=2).
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=5
TCPTimeout=2
BatchStartTimeout=10
KillWait=5
UnkillableStepTimeout=30
InactiveLimit=0
Waittime=0
ReturnToService=2
# Keep finished jobs visible to squeue/scontrol for 10 minutes.
MinJobAge=600
# Nodes may claim more CPUs/memory/GPUs than the machine has.
SlurmdParameters=config_overrides

GresTypes=gpu
CONF
    for node in "${NODES[@]}"; do
        n="$(node_index "$node")"
        echo "NodeName=$node NodeHostname=$host NodeAddr=$NET.$n Port=$((CTLD_PORT + n)) CPUs=4 RealMemory=4000 Gres=gpu:2 State=UNKNOWN" >>"$out/slurm.conf"
    done
    echo "PartitionName=trainfleet Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$out/slurm.conf"

    # Fake GPUs. slurmd drops a GPU without a File ("Removing file-less GPU") and ignores a File
    # that is not a device node, so each node gets two character devices with the NVIDIA major
    # number (195) in $DIR/dev/NODE. No driver answers them; nothing opens them.
    cat >"$out/gres.conf" <<CONF
# Generated by scripts/slurm.sh. Fake GPUs (see $DIR/dev).
AutoDetect=off
CONF
    local gpu
    for node in "${NODES[@]}"; do
        mkdir -p "$DIR/dev/$node"
        for gpu in 0 1; do
            if [ ! -c "$DIR/dev/$node/nvidia$gpu" ]; then
                rm -f "$DIR/dev/$node/nvidia$gpu"
                root mknod -m 0666 "$DIR/dev/$node/nvidia$gpu" c 195 "$gpu"
            fi
        done
        echo "NodeName=$node Name=gpu File=$DIR/dev/$node/nvidia[0-1]" >>"$out/gres.conf"
    done
}

# Writes the config; if it changed while daemons run, restarts them so they pick it up.
configure() {
    local tmp changed=0 f
    tmp="$(mktemp -d)"
    write_config "$tmp"
    for f in slurm.conf gres.conf; do
        if ! cmp -s "$tmp/$f" "$DIR/etc/$f"; then changed=1; cp "$tmp/$f" "$DIR/etc/$f"; fi
    done
    rm -rf "$tmp"
    if [ "$changed" = 1 ] && { ctld_pid >/dev/null || any_slurmd; }; then
        say "configuration changed, restarting the daemons"
        stop_daemons
    fi
}

any_slurmd() {
    local node
    for node in "${NODES[@]}"; do slurmd_pid "$node" >/dev/null && return 0; done
    return 1
}

# --- daemons --------------------------------------------------------------------------------

start_ctld() {
    if ctld_pid >/dev/null; then return; fi
    say "starting slurmctld"
    # Daemons get no stdout: the caller's $(...) would otherwise wait for them.
    slurmctld -f "$CONF" </dev/null >>"$DIR/log/slurmctld.out" 2>&1 \
        || die "slurmctld failed to start (see $DIR/log/slurmctld.log)"
    local i
    for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
        if sl scontrol ping 2>/dev/null | grep -q UP; then return; fi
        sleep 0.1
    done
    die "slurmctld does not answer (see $DIR/log/slurmctld.log)"
}

start_slurmd() {
    local node="$1"
    if slurmd_pid "$node" >/dev/null; then return; fi
    say "starting slurmd for $node"
    mkdir -p "$DIR/spool/$node"
    slurmd -f "$CONF" -N "$node" </dev/null >>"$DIR/log/slurmd-$node.out" 2>&1 \
        || die "slurmd $node failed to start (see $DIR/log/slurmd-$node.log)"
}

node_state() { sl sinfo -h -N -n "$1" -o %T 2>/dev/null | head -n1; }

# Waits until node $1 takes jobs (idle, or mixed/allocated when jobs were left running). A
# drain is lifted: it may be left over in the saved state from an earlier run (e.g. a config
# that was wrong then), and start / node-start mean "in service". DOWN needs nothing: with
# ReturnToService=2 the node comes back when its slurmd registers.
wait_node() {
    local node="$1" i state="" resumed=0
    for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
        state="$(node_state "$node")"
        case "$state" in
            idle | mixed | allocated | completing) return ;;
            drained | draining)
                if [ "$resumed" = 0 ]; then
                    say "resuming $node (was $state: $(sl sinfo -h -N -n "$node" -o %E))"
                    sl scontrol update nodename="$node" state=resume >&2 || true
                    resumed=1
                fi ;;
            # Registration rejected (config mismatch): give a stale state a few seconds.
            inval) [ "$i" -lt 50 ] || break ;;
        esac
        sleep 0.1
    done
    die "node $node is '$state': $(sl sinfo -h -N -n "$node" -o %E) (see $DIR/log/slurmd-$node.log)"
}

# kill -9 the slurmstepd processes of node $1 and their tasks, as a crashing node would.
kill_steps() {
    local stepd pids
    for stepd in $(stepd_pids "$1"); do
        # The task list first: once the stepd is gone its tasks are re-parented.
        pids="$stepd $(descendants "$stepd" | tr '\n' ' ')"
        say "killing job step processes of $1: $pids"
        # shellcheck disable=SC2086  # one argument per pid
        kill -KILL $pids 2>/dev/null || true
    done
}

stop_daemons() {
    local node pid
    for node in "${NODES[@]}"; do
        if pid="$(slurmd_pid "$node")"; then say "stopping slurmd for $node"; terminate TERM "$pid" 10; fi
        # Steps left behind (e.g. by a killed slurmd) would keep running without their slurmd.
        kill_steps "$node"
    done
    if pid="$(ctld_pid)"; then say "stopping slurmctld"; terminate TERM "$pid" 10; fi
}

# --- commands -------------------------------------------------------------------------------

start() {
    install_packages
    mkdir -p "$DIR"/{etc,state,spool,run,log}
    start_munge
    add_hosts
    configure
    start_ctld
    local node
    for node in "${NODES[@]}"; do start_slurmd "$node"; done
    for node in "${NODES[@]}"; do wait_node "$node"; done
    say "cluster up: $(sl sinfo -h -o '%D nodes %T' | paste -sd, -)"
    echo "$CONF"
}

stop() {
    if ctld_pid >/dev/null; then
        # Cancel everything first so no job is left to be resumed at the next start.
        local jobs i
        jobs="$(sl squeue -h -t PD,R,CF,S,RQ -o %A 2>/dev/null || true)"
        if [ -n "$jobs" ]; then
            say "cancelling jobs: $(echo "$jobs" | paste -sd' ' -)"
            # shellcheck disable=SC2086  # one argument per job id
            sl scancel $jobs 2>/dev/null || true
            for ((i = 0; i < 100; i++)); do
                [ -z "$(sl squeue -h -t PD,R,CG,CF,S,RQ -o %A 2>/dev/null)" ] && break
                sleep 0.1
            done
        fi
    fi
    stop_daemons
    local pid
    if pid="$(pid_of "$DIR/run/munged.pid" munged)"; then
        say "stopping munged"
        terminate TERM "$pid" 10
    fi
    rm -f "$DIR/run/munged.pid"
}

status() {
    [ -f "$CONF" ] || die "no cluster in $DIR (run: $0 start)"
    sl sinfo -N -o '%N %T %C %G %E' >&2 || true
    sl squeue >&2 || true
}

node_start() {
    local node="$1"
    node_index "$node" >/dev/null
    ctld_pid >/dev/null || die "slurmctld is not running (run: $0 start)"
    start_slurmd "$node"
    wait_node "$node"
    say "$node is $(node_state "$node")"
}

node_kill() {
    local node="$1" pid
    node_index "$node" >/dev/null
    if pid="$(slurmd_pid "$node")"; then
        say "killing slurmd for $node (pid $pid)"
        kill -KILL "$pid"
    fi
    kill_steps "$node"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    conf) echo "$CONF" ;;
    node-start) [ $# = 2 ] || die "usage: $0 node-start NODE"; node_start "$2" ;;
    node-kill) [ $# = 2 ] || die "usage: $0 node-kill NODE"; node_kill "$2" ;;
    *) echo "usage: $0 start|stop|status|conf|node-start NODE|node-kill NODE" >&2; exit 2 ;;
esac
