#!/usr/bin/env bash
# The GPU check: what trainfleet promises of GPUs, measured on this machine, in one table.
#
#   usage: scripts/gpu-check.sh [TABLE_FILE]        (as root, on a machine with an NVIDIA GPU)
#          scripts/gpu-check.sh --dry [TABLE_FILE]  (no GPU: every step on CPUs, fake GPU 0,
#                                                    the recorded fake of MPS; proves the script)
#
# Needs no network: trainfleet's dependencies that this Python lacks are installed from the
# wheels in .whl/ at the repository's root (scripts/gpu-wheels.sh downloads them, for
# CPython 3.12 on x86_64 Linux), with trainfleet itself from this tree, into a folder of
# this run (nothing is installed into the machine's Python); PyTorch must be there already.
# Steps, each under its own timeout, each one's failure printed and the next one run:
#   a. DDP throughput (benchmarks/gpu/ddp_gpu.py: bf16 MLP, NCCL, 1 GPU) under
#      `trainfleet run` beside bare torchrun, in turns; the ratio.
#   b. a job that needs more GPUs than exist: refused at once (exit code, message).
#   c. two `gpu: 0.5` tasks at once, one asking 60% of the GPU's memory, one 40%: with MPS
#      the first gets CUDA's out-of-memory error, the second its memory; each multiplies at
#      about half the rate of one alone.
#   d. two `trainfleet run` of `gpu: 1` at once on one GPU: never both at once.
#   e. the DDP job of (a) through a server (`trainfleet server`, `trainfleet submit`).
# The table goes to TABLE_FILE, else $OUT/gpu-check.txt when OUT is set, and to stdout.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
if [ "${1:-}" = "--dry" ]; then DRY=1; shift; fi
TABLE_FILE=${1:-}
if [ -z "$TABLE_FILE" ] && [ -n "${OUT:-}" ]; then TABLE_FILE=$OUT/gpu-check.txt; fi
PY=${PYTHON:-python3}
PY=$(command -v "$PY" || echo "$PY")
WORK=$(mktemp -d /tmp/gpuchk.XXXXXX)  # short: MPS's sockets live under the data directory
export PATH=$PATH:/usr/local/nvidia/bin
export TRAINFLEET_STARTER=off TRAINFLEET_USAGE_INTERVAL=1
export TRAINFLEET_DATA_DIR=$WORK/data
unset TRAINFLEET_SERVER TRAINFLEET_TOKEN TRAINFLEET_GPU_SHARING
ROWS=()
STARTED=$(date +%s)

say() { echo "[gpu-check +$(($(date +%s) - STARTED))s] $*" >&2; }
row() { ROWS+=("$(printf '| %-34s | %-6s | %s |' "$1" "$2" "$3")"); say "$1: $2 $3"; }
mkdir -p "$WORK/bin"  # `tf`: trainfleet from this tree, as a program (timeout runs it)
printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s -m trainfleet "$@"\n' \
    "$ROOT/src:$WORK/site" "$PY" > "$WORK/bin/tf"
chmod +x "$WORK/bin/tf"
export PATH=$WORK/bin:$PATH
number() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
ratio() { "$PY" -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.3f}' if b else '-')" "$@"; }

say "work folder $WORK (kept: logs and data)"
if [ "$DRY" = 1 ]; then
    export TRAINFLEET_GPUS=0  # a fake GPU: tasks see the index only
    export PATH=$ROOT/tests/programs/fake_mps:$PATH  # the recorded fake of MPS's control
    GPUS=1
else
    if [ "$(id -u)" != 0 ]; then say "run me as root (MPS daemons, other accounts)"; fi
    GPUS=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    say "nvidia-smi: $GPUS GPU(s); $(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv,noheader 2>&1 | head -1)"
fi
say "MPS control: $(command -v nvidia-cuda-mps-control || echo missing)"

# --- 0. trainfleet's dependencies, from the wheels carried here ------------------------
install() {
    if "$PY" -c "import importlib.metadata as m, pydantic, fastapi, uvicorn, sqlalchemy, psutil; m.version('trainfleet')" 2>/dev/null; then
        say "dependencies: already importable"
        return 0
    fi
    local pip
    pip=$(ls "$ROOT"/.whl/pip-*.whl 2>/dev/null | head -1)
    if [ -z "$pip" ]; then say "no .whl/pip-*.whl: run scripts/gpu-wheels.sh where there is network"; return 1; fi
    "$PY" - "$ROOT/pyproject.toml" > "$WORK/requirements.txt" <<'EOF' || return 1
import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))
EOF
    timeout 240 "$PY" "$pip/pip" install --quiet --disable-pip-version-check --root-user-action=ignore --no-index \
        --find-links "$ROOT/.whl" --target "$WORK/site" -r "$WORK/requirements.txt" "$ROOT"
}
if install && tf --version >/dev/null 2>&1; then
    row "0 dependencies" ok "$(tf --version 2>&1 | tail -1), torch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
else
    row "0 dependencies" FAIL "trainfleet does not start: $(tf --version 2>&1 | tail -1)"
fi

mkdir -p "$WORK/job"
cp "$ROOT"/benchmarks/gpu/*.py "$WORK/job/"
cd "$WORK/job" || exit 1
cat > ddp.yaml <<EOF
name: ddp
framework: pytorch
roles:
  worker: {replicas: 1, command: $PY -m torch.distributed.run ddp_gpu.py, resources: {gpu: 1}}
EOF

# --- a. DDP under trainfleet run beside bare torchrun, in turns ------------------------
BARE=() UNDER=()
for turn in 1 2; do
    out=$(CUDA_VISIBLE_DEVICES=0 timeout 180 "$PY" -m torch.distributed.run --standalone \
        --nproc-per-node 1 ddp_gpu.py 2>&1); rc=$?
    steps=$(echo "$out" | number steps_per_s)
    [ $rc = 0 ] && [ -n "$steps" ] && BARE+=("$steps") || say "bare torchrun failed ($rc): $(echo "$out" | tail -3)"
    out=$(timeout 180 tf run ddp.yaml 2>&1); rc=$?
    steps=$(echo "$out" | number steps_per_s)
    [ $rc = 0 ] && [ -n "$steps" ] && UNDER+=("$steps") || say "trainfleet run failed ($rc): $(echo "$out" | tail -5)"
    say "turn $turn: bare ${BARE[*]:-} / trainfleet ${UNDER[*]:-} steps/s"
done
mean() { "$PY" -c "import sys; v = [float(x) for x in sys.argv[1:]]; print(f'{sum(v) / len(v):.2f}' if v else '')" "$@"; }
bare=$(mean "${BARE[@]}") under=$(mean "${UNDER[@]}")
if [ -n "$bare" ] && [ -n "$under" ]; then
    r=$(ratio "$under" "$bare")
    verdict=$("$PY" -c "print('ok' if $r >= 0.98 else 'LOW')")
    row "a DDP: trainfleet run / torchrun" "$verdict" "$under / $bare steps/s = $r (turns: bare ${BARE[*]}, run ${UNDER[*]})"
else
    row "a DDP: trainfleet run / torchrun" FAIL "no figures (bare: ${BARE[*]:-none}, run: ${UNDER[*]:-none})"
fi

# --- b. more GPUs than exist ------------------------------------------------------------
cat > toomany.yaml <<EOF
name: toomany
roles:
  worker: {command: 'true', resources: {gpu: $((GPUS + 1))}}
EOF
t0=$(date +%s.%N)
out=$(timeout 60 tf run toomany.yaml 2>&1); rc=$?
t1=$(date +%s.%N)
took=$("$PY" -c "print(f'{$t1 - $t0:.2f}')")
[ $rc = 2 ] && verdict=ok || verdict=FAIL
row "b $((GPUS + 1)) GPUs asked, $GPUS here" "$verdict" "exit $rc in ${took}s: $(echo "$out" | grep -v '^$' | tail -1 | cut -c1-150)"

# --- c. two halves of one GPU -----------------------------------------------------------
SECS=10
alone=$(CUDA_VISIBLE_DEVICES=0 timeout 120 "$PY" gpu_share.py 0.1 $SECS 2>&1 | number matmul_tflops)
cat > halves.yaml <<EOF
name: halves
framework: generic
roles:
  over: {command: $PY gpu_share.py 0.6 $SECS over.txt, resources: {gpu: 0.5}}
  within: {command: $PY gpu_share.py 0.4 $SECS within.txt, resources: {gpu: 0.5}}
EOF
rm -f over.txt within.txt
out=$(timeout 180 tf run halves.yaml 2>&1); rc=$?
say "halves: exit $rc; $(echo "$out" | grep -E 'memory=|matmul|sharing=' | tr '\n' ';')"
over=$(cat over.txt 2>/dev/null) within=$(cat within.txt 2>/dev/null)
over_memory=$(echo "$over" | sed -n 's/.*memory=\([a-z]*\).*/\1/p')
within_memory=$(echo "$within" | sed -n 's/.*memory=\([a-z]*\).*/\1/p')
over_rate=$(echo "$over" | number matmul_tflops) within_rate=$(echo "$within" | number matmul_tflops)
mode=$(echo "$over" | sed -n 's/.*sharing=\([a-z-]*\).*/\1/p')
clients=$(cat "$WORK"/data/mps/gpu*/log/control.log 2>/dev/null | grep -c "NEW CLIENT")
[ "$over_memory" = oom ] && [ "$within_memory" = ok ] && verdict=ok || verdict=FAIL
[ "$DRY" = 1 ] && verdict="dry"
row "c 0.5+0.5: memory 60% / 40%" "$verdict" "sharing ${mode:-?}: 60% -> ${over_memory:-?}, 40% -> ${within_memory:-?} ($(echo "$over" | sed -n 's/.*limit=\([^ ]*\).*/limit \1/p'); MPS clients logged: $clients)"
if [ -n "$alone" ] && [ -n "$over_rate" ] && [ -n "$within_rate" ]; then
    a=$(ratio "$over_rate" "$alone") b=$(ratio "$within_rate" "$alone")
    verdict=$("$PY" -c "print('ok' if 0.35 <= $a <= 0.65 and 0.35 <= $b <= 0.65 else 'CHECK')")
    [ "$DRY" = 1 ] && verdict="dry"
    row "c 0.5+0.5: matmul rate of each" "$verdict" "$over_rate and $within_rate TFLOP/s at once vs $alone alone: $a, $b"
else
    row "c 0.5+0.5: matmul rate of each" FAIL "no figures (alone: ${alone:-none}, over: ${over_rate:-none}, within: ${within_rate:-none})"
fi

# --- d. two runs of gpu: 1 at once, one GPU ---------------------------------------------
for name in one two; do
    cat > "turn-$name.yaml" <<EOF
name: turn-$name
framework: generic
roles:
  worker: {command: $PY turn.py $name, resources: {gpu: 1}}
EOF
done
rm -f turn-one.txt turn-two.txt
TRAINFLEET_GPUS=0 timeout 120 tf run turn-one.yaml > turn-one.out 2>&1 &
first=$!
TRAINFLEET_GPUS=0 timeout 120 tf run turn-two.yaml > turn-two.out 2>&1 &
second=$!
wait $first; rc1=$?
wait $second; rc2=$?
verdict=$("$PY" - <<'EOF' 2>&1
from pathlib import Path
try:
    (s1, e1, g1), (s2, e2, g2) = (Path(f"turn-{n}.txt").read_text().split() for n in ("one", "two"))
except Exception as error:
    print(f"FAIL|no timestamps ({error})")
else:
    s1, e1, s2, e2 = map(float, (s1, e1, s2, e2))
    overlap = min(e1, e2) - max(s1, s2)
    ok = g1 != g2 or overlap <= 0
    print(f"{'ok' if ok else 'FAIL'}|GPU {g1}: {s1 % 1000:.1f}-{e1 % 1000:.1f}, GPU {g2}: "
          f"{s2 % 1000:.1f}-{e2 % 1000:.1f} (overlap {max(overlap, 0):.1f}s)")
EOF
)
row "d two runs of gpu: 1, one GPU" "${verdict%%|*}" "exits $rc1, $rc2; ${verdict#*|}"

# --- e. the DDP job through a server ----------------------------------------------------
PORT=$((20000 + RANDOM % 20000))
TOKEN=$("$PY" -c "import secrets; print(secrets.token_urlsafe(32))")
TRAINFLEET_ADMIN_TOKEN=$TOKEN TRAINFLEET_DATA_DIR=$WORK/server \
    timeout 300 tf server \
    --port "$PORT" --task-python "$PY" > "$WORK/server.log" 2>&1 &
server=$!
up=0
for _ in $(seq 60); do
    "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=2)" 2>/dev/null && { up=1; break; }
    sleep 0.5
done
if [ $up = 1 ]; then
    export TRAINFLEET_SERVER=http://127.0.0.1:$PORT TRAINFLEET_TOKEN=$TOKEN
    job=$(timeout 60 tf submit ddp.yaml 2>&1 | tail -1)
    out=$(timeout 180 tf logs -f "$job" 2>&1)
    state=$(timeout 30 tf describe -o json "$job" 2>/dev/null | "$PY" -c "import json, sys; print(json.load(sys.stdin)['job']['state'])" 2>/dev/null)
    steps=$(echo "$out" | number steps_per_s)
    unset TRAINFLEET_SERVER TRAINFLEET_TOKEN
    if [ -n "$steps" ] && [ -n "$bare" ]; then
        row "e DDP through a server" ok "job $job $state: $steps steps/s = $(ratio "$steps" "$bare") of bare torchrun"
    else
        row "e DDP through a server" FAIL "job $job ${state:-?}: $(echo "$out" | tail -2 | tr '\n' ' ')"
    fi
else
    row "e DDP through a server" FAIL "the server did not answer: $(tail -3 "$WORK/server.log" | tr '\n' ' ')"
fi
kill "$server" 2>/dev/null; wait "$server" 2>/dev/null

# --- the table --------------------------------------------------------------------------
{
    echo "trainfleet GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $(hostname), $([ "$DRY" = 1 ] && echo 'DRY RUN (no GPU)' || timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
    echo
    printf '| %-34s | %-6s | %s |\n' check result figures
    printf '|%s|%s|%s|\n' "------------------------------------" "--------" "------------------------------------------------------------"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "took $(($(date +%s) - STARTED))s; logs and data in $WORK"
} | tee ${TABLE_FILE:+"$TABLE_FILE"}
