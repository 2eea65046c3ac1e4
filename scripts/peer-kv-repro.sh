#!/usr/bin/env bash
# Issue 25, mechanism 1, measured by hand: a fixed probe on a fresh llama-server, after its
# other slots hold long conversations, and after a restart.
#
#   scripts/peer-kv-repro.sh VERSION [PORT]      # default port 8191; the control on PORT+100
#
# Starts llama-server of llama-cpp-python VERSION (scripts/peer-engines.sh build VERSION and
# model VERSION first) with -np $NP (8) -c $CTX (65536: 8 slots of 8,192) -t 1, LIKE_FOR_LIKE
# (-fa off and --cache-ram 0 where the build has them), then:
#   fresh      the probe (scripts/peer_kv_probe.py: 256-token prompt, 128 tokens, temperature 0)
#              $REPEAT times (default 5)
#   fill       $SESSIONS (7) different $TOKENS-token (4000) conversations, one per slot, one at a
#              time ($PARALLEL=7: all at once, for 0.3.1, whose slot choice is always slot 0 otherwise)
#   filled     the probe again, $REPEAT times
#   restarted  restart, the probe again, $REPEAT times
# Every probe is paired with the same probe on a control: a second server of the same build on
# PORT+100, started fresh and never sent anything but probes (CONTROL=0: none).
# Output: $CACHE/repro/VERSION-<UTC time>/ (probe.jsonl, the server's log of each life), and a
# summary line per phase. Everything at nice 19.
set -euo pipefail

VERSION=${1:?VERSION}
PORT=${2:-8191}
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${TOKDRIFT_PEERS:-$HOME/.cache/tokdrift/peers}
PYTHON=${PYTHON:-$HERE/../.venv/bin/python}
export PYTHON NP=${NP:-8} CTX=${CTX:-65536} THREADS=${THREADS:-1} LIKE_FOR_LIKE=1
REPEAT=${REPEAT:-5}
OUT=$CACHE/repro/$VERSION-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"
LOG=$OUT/llama-server.log
export LLAMA_LOG=$LOG
URL=http://127.0.0.1:$PORT
CPORT=$((PORT + 100))
CONTROL_ARGS=()
[ "${CONTROL:-1}" = 0 ] || CONTROL_ARGS=(--control-url "http://127.0.0.1:$CPORT")
probe() { nice -n 19 "$PYTHON" "$HERE/peer_kv_probe.py" probe --url "$URL" --repeat "$REPEAT" --label "$1" \
              "${CONTROL_ARGS[@]}" | tee -a "$OUT/probe.jsonl"; }

echo "# $VERSION port $PORT NP=$NP CTX=$CTX THREADS=$THREADS $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/README"
"$HERE/peer-engines.sh" stop llama "$PORT"
if [ "${CONTROL:-1}" != 0 ]; then
    "$HERE/peer-engines.sh" stop llama "$CPORT"
    LLAMA_LOG=$OUT/control-server.log nice -n 19 "$HERE/peer-engines.sh" start llama "$CPORT" "$VERSION"
    "$HERE/peer-engines.sh" wait llama "$CPORT"
fi
nice -n 19 "$HERE/peer-engines.sh" start llama "$PORT" "$VERSION"
"$HERE/peer-engines.sh" wait llama "$PORT"
probe fresh
nice -n 19 "$PYTHON" "$HERE/peer_kv_probe.py" fill --url "$URL" --sessions "${SESSIONS:-7}" --tokens "${TOKENS:-4000}" \
    --parallel "${PARALLEL:-1}" \
    | tee -a "$OUT/probe.jsonl"
probe filled
echo "# restart $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/README"
nice -n 19 "$HERE/peer-engines.sh" restart llama "$PORT" "$VERSION"
"$HERE/peer-engines.sh" wait llama "$PORT"
probe restarted
"$HERE/peer-engines.sh" stop llama "$PORT"
[ "${CONTROL:-1}" = 0 ] || "$HERE/peer-engines.sh" stop llama "$CPORT"
echo "# end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/README"
grep median "$OUT/probe.jsonl" | sed 's/, "metrics".*//' 
