#!/usr/bin/env bash
# Issue 25, mechanism 2 (KV defragmentation off by default in llama-server before late 2024),
# measured side by side: two llama-servers under the same churn of agent-like sessions at once,
# one without KV defragmentation and one with it (docs/case-studies/llamacpp-shared-kv.md,
# "Mechanism 2").
#
#   scripts/peer-frag-ab.sh [A_VERSION] [B_VERSION]     # default 0.3.1 and 0.3.1 with --defrag-thold 0.1
#
# A: llama-server of llama-cpp-python A_VERSION (0.3.1: defrag_thold -1, off) with $A_EXTRA; B: of
# B_VERSION with $B_EXTRA (default `--defrag-thold 0.1` when both versions are the same; 0.3.2's
# default is 0.1 already). Both -np $NP (4) -c $CTX (2048) -t 1, on ports $PORT (8591) and
# $PORT+2. Then scripts/peer_kv_probe.py churn on each at once, $CHURN its options (default: 6
# workers, 10 phases of 30 s, sessions of 300-449 tokens with one append, 32 tokens a call, a
# 64-token probe generating 32): per phase the probe's decode rate, the calls that failed, the KV
# gauges and the count of "failed to find free space" lines. Needs both builds and models
# (scripts/peer-engines.sh build VERSION && ... model VERSION). Output:
# $CACHE/frag/<UTC time>/{a,b}.jsonl and the servers' logs, and a summary line per side.
set -euo pipefail

A_VERSION=${1:-0.3.1}
B_VERSION=${2:-$A_VERSION}
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${TOKDRIFT_PEERS:-$HOME/.cache/tokdrift/peers}
export PYTHON=${PYTHON:-$HERE/../.venv/bin/python}
export NP=${NP:-4} CTX=${CTX:-2048} THREADS=${THREADS:-1}
PORT=${PORT:-8591}
A_EXTRA=${A_EXTRA:-}
if [ "$A_VERSION" = "$B_VERSION" ]; then B_EXTRA=${B_EXTRA:---defrag-thold 0.1}; else B_EXTRA=${B_EXTRA:-}; fi
CHURN=${CHURN:---parallel 6 --cycles 10 --phase 30 --tokens 300 --turns 1 --append 20 --fill-max-tokens 32 --probe-tokens 64 --max-tokens 32}
OUT=$CACHE/frag/$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"
PE=$HERE/peer-engines.sh

# llama-server's HTTP library binds with SO_REUSEPORT: a server left on a port would silently take
# half the calls. Refuse to start beside one.
for p in "$PORT" "$((PORT + 2))"; do
    if curl -s -o /dev/null "http://127.0.0.1:$p/health"; then
        echo "port $p already answers: stop what runs there first" >&2; exit 1
    fi
done
trap '"$PE" stop llama "$PORT" || true; "$PE" stop llama "$((PORT + 2))" || true' EXIT
LLAMA_LOG=$OUT/a.log LLAMA_EXTRA=$A_EXTRA nice -n 5 "$PE" start llama "$PORT" "$A_VERSION"
LLAMA_LOG=$OUT/b.log LLAMA_EXTRA=$B_EXTRA nice -n 5 "$PE" start llama "$((PORT + 2))" "$B_VERSION"
"$PE" wait llama "$PORT"
"$PE" wait llama "$((PORT + 2))"
echo "# A $A_VERSION $A_EXTRA | B $B_VERSION $B_EXTRA | NP=$NP CTX=$CTX | $CHURN | $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/README"
# shellcheck disable=SC2086
nice -n 5 "$PYTHON" "$HERE/peer_kv_probe.py" churn --url "http://127.0.0.1:$PORT" $CHURN --log "$OUT/a.log" > "$OUT/a.jsonl" &
# shellcheck disable=SC2086
nice -n 5 "$PYTHON" "$HERE/peer_kv_probe.py" churn --url "http://127.0.0.1:$((PORT + 2))" $CHURN --log "$OUT/b.log" > "$OUT/b.jsonl" &
wait
echo "# end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/README"
for side in a b; do
    "$PYTHON" - "$OUT/$side.jsonl" "$side" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
after = rows[1:]
probe = [r["probe_tok_s"] for r in after]
print(f"{sys.argv[2]}: {len(after)} phases, {sum(r['calls'] for r in rows)} calls, {sum(r['errors'] for r in rows)} failed, "
      f"{rows[-1]['free_space_lines']} 'failed to find free space' lines; KV usage "
      f"{min(r['kv_usage'] for r in after):.2f}-{max(r['kv_usage'] for r in after):.2f}; probe {rows[0]['probe_tok_s']} tok/s "
      f"fresh, then median {statistics.median(probe):.1f} ({min(probe):.1f}-{max(probe):.1f})")
EOF
done
