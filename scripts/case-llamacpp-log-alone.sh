#!/usr/bin/env bash
# The log a llama.cpp user has: one llama-server build of llama-cpp-python VERSION serving agent
# traffic as a user serves it (a replay only: no probe, no control), restarted once the way a user
# restarts a slow server, then serving on; `diag analyze` of its log alone at the end. The logs of
# these runs are the log-alone corpus (benchmarks/own_logs.json, docs/real-logs.md).
#
#   scripts/case-llamacpp-log-alone.sh VERSION [RUN_DIR]
#
# Needs the build and its model once: scripts/peer-engines.sh build VERSION && ... model VERSION.
# The scenario is the case studies' (scripts/case-llamacpp-shared-kv.sh): NP, CTX, TRACE,
# CONCURRENCY, MAX_CONTEXT and LLAMA_EXTRA override it (the defrag case: NP=4 CTX=2048
# TRACE=examples/llamacpp-kv-near-full.jsonl CONCURRENCY=6 MAX_CONTEXT=448). MINUTES (default 18)
# of serving, the restart after RESTART_AFTER minutes (default 12). NP=0 leaves -np out (the
# build's own default). Everything at nice 10; the run directory (default
# $CACHE/case-runs/VERSION-replay-<UTC time>) and the server's logs (RUN_DIR.logs/) stay outside
# the repository; the run's engine.log holds every life of the server's log.
set -euo pipefail

VERSION=${1:?VERSION}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${TOKDRIFT_PEERS:-$HOME/.cache/tokdrift/peers}
VENV=${VENV:-$ROOT/.venv}
export PYTHON=${PYTHON:-$VENV/bin/python}
PORT=${PORT:-8491}
RUN=${2:-$CACHE/case-runs/$VERSION-replay-$(date -u +%Y%m%dT%H%M%S)}
LOGS=$RUN.logs
PE=$HERE/peer-engines.sh
MINUTES=${MINUTES:-18}
RESTART_AFTER=${RESTART_AFTER:-12}
mkdir -p "$LOGS" "$(dirname "$RUN")"
ENV=("NP=${NP:-8}" "CTX=${CTX:-65536}" LIKE_FOR_LIKE=1 "PYTHON=$PYTHON")
TRACE=${TRACE:-$ROOT/examples/llamacpp-shared-kv.jsonl}

"$PE" stop llama "$PORT" || true
trap '"$PE" stop llama "$PORT" || true' EXIT
env "${ENV[@]}" LLAMA_LOG="$LOGS/target.log" nice -n 10 "$PE" start llama "$PORT" "$VERSION"
"$PE" wait llama "$PORT"
echo "# $VERSION replay only, $MINUTES min, restart after $RESTART_AFTER; $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" \
    | tee "$LOGS/README"

restart=$(printf 'env %s LLAMA_LOG=%s %q restart llama %s %s && %q wait llama %s' "${ENV[*]}" "$LOGS/target.log" "$PE" \
    "$PORT" "$VERSION" "$PE" "$PORT")
nice -n 10 "$VENV/bin/soak" run --trace "$TRACE" --no-probes --minutes "$MINUTES" \
    --restart-every "$((RESTART_AFTER * 60))" --restart-cmd "$restart" \
    --concurrency "${CONCURRENCY:-7}" --max-context "${MAX_CONTEXT:-7680}" --temperature 0 \
    --target "http://127.0.0.1:$PORT" --engine-log "$LOGS/target.log" --no-profiles --no-live -o "$RUN"

echo "# ended $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOGS/README"
"$VENV/bin/diag" analyze "$RUN/engine.log" --json > "$LOGS/log-alone.json" || true
"$VENV/bin/diag" analyze "$RUN/engine.log" | tee "$LOGS/log-alone.txt" || true
echo "run: $RUN"
