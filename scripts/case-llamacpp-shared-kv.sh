#!/usr/bin/env bash
# Case study: llama.cpp's KV cells held by idle slots (docs/case-studies/llamacpp-shared-kv.md).
# Soaks one llama-server build of llama-cpp-python VERSION with a fresh control of the same build
# beside it, then analyses, reports and bundles the run.
#
#   scripts/case-llamacpp-shared-kv.sh VERSION [RUN_DIR]     # 0.3.14: the slowdown; 0.3.17: fixed
#
# Needs the build and its model once: scripts/peer-engines.sh build VERSION && ... model VERSION
# (`make case-llamacpp-shared-kv` does both for both builds, then both soaks).
# Both servers: -np 8 -c 65536 (8 slots of 8,192 tokens) -t 1 --metrics, LIKE_FOR_LIKE (-fa off
# --cache-ram 0 where the build has them), the soaked one on $PORT (8491), the control on
# $PORT+2. The soak (`soak run`, options below): examples/llamacpp-shared-kv.jsonl, 7 sessions at
# once, greedy calls trimmed to 7,680 tokens (room for the chat template in a slot of 8,192), a baseline of 8 probe cycles on the fresh engine before any traffic,
# a cycle every 20 s, stopping once decided (at most $MAX_HOURS, 0.75), then the restart control.
# NP, CTX, TRACE, CONCURRENCY and MAX_CONTEXT override the scenario (the KV-defragmentation soak of
# docs/case-studies/llamacpp-defrag.md: NP=4 CTX=2048 TRACE=examples/llamacpp-kv-near-full.jsonl
# CONCURRENCY=6 MAX_CONTEXT=448). Everything at nice 10; the run directory (default $CACHE/case-runs/VERSION-<UTC time>) and
# the servers' logs (RUN_DIR.logs/) stay outside the repository.
set -euo pipefail

VERSION=${1:?VERSION}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${TOKDRIFT_PEERS:-$HOME/.cache/tokdrift/peers}
VENV=${VENV:-$ROOT/.venv}
export PYTHON=${PYTHON:-$VENV/bin/python}
PORT=${PORT:-8491}
CPORT=$((PORT + 2))
RUN=${2:-$CACHE/case-runs/$VERSION-$(date -u +%Y%m%dT%H%M%S)}
LOGS=$RUN.logs
PE=$HERE/peer-engines.sh
mkdir -p "$LOGS" "$(dirname "$RUN")"
ENV=("NP=${NP:-8}" "CTX=${CTX:-65536}" LIKE_FOR_LIKE=1 "PYTHON=$PYTHON")
TRACE=${TRACE:-$ROOT/examples/llamacpp-shared-kv.jsonl}

restart_cmd() {  # ROLE PORT: the command line soak run restarts that server with
    printf 'env %s LLAMA_LOG=%s %q restart llama %s %s && %q wait llama %s' "${ENV[*]}" "$LOGS/$1.log" "$PE" "$2" \
        "$VERSION" "$PE" "$2"
}

"$PE" stop llama "$PORT" || true
"$PE" stop llama "$CPORT" || true
trap '"$PE" stop llama "$PORT" || true; "$PE" stop llama "$CPORT" || true' EXIT
env "${ENV[@]}" LLAMA_LOG="$LOGS/control.log" nice -n 10 "$PE" start llama "$CPORT" "$VERSION"
env "${ENV[@]}" LLAMA_LOG="$LOGS/target.log" nice -n 10 "$PE" start llama "$PORT" "$VERSION"
"$PE" wait llama "$CPORT"
"$PE" wait llama "$PORT"
echo "# $VERSION $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$LOGS/README"

nice -n 10 "$VENV/bin/soak" run --trace "$TRACE" \
    --until-decided --max-hours "${MAX_HOURS:-0.75}" --baseline 8 --probe-every 20 --probe-wait 180 \
    --concurrency "${CONCURRENCY:-7}" --max-context "${MAX_CONTEXT:-7680}" --temperature 0 \
    --target "http://127.0.0.1:$PORT" --engine-log "$LOGS/target.log" \
    --restart-cmd "$(restart_cmd target "$PORT")" \
    --control-target "http://127.0.0.1:$CPORT" --control-restart-cmd "$(restart_cmd control "$CPORT")" \
    --no-live -o "$RUN"

echo "# ended $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOGS/README"
"$VENV/bin/diag" analyze "$RUN" --json > "$LOGS/analyze.json"
"$VENV/bin/diag" analyze "$RUN" | tee "$LOGS/analyze.txt"
"$VENV/bin/diag" report "$RUN"
"$VENV/bin/diag" bundle "$RUN" -o "$RUN-bundle.tar.gz"
echo "run: $RUN"
