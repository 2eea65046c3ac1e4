#!/usr/bin/env bash
# Real third-party engines as soak targets: llama.cpp's llama-server and
# `transformers serve`, on a seeded random Qwen3 checkpoint made here.
#
#   scripts/peer-engines.sh build                  # llama-server from the pinned source, once (689 s, -j2, 2 cores)
#   scripts/peer-engines.sh model                  # HF checkpoint + GGUF (f32), once
#   scripts/peer-engines.sh start llama PORT       # in the background; log $CACHE/llama-server-PORT.log
#   scripts/peer-engines.sh start transformers PORT
#   scripts/peer-engines.sh wait ENGINE PORT       # until /v1/models answers
#   scripts/peer-engines.sh restart ENGINE PORT    # stop and start (a soak's --restart-cmd)
#   scripts/peer-engines.sh stop ENGINE PORT
#
# llama-server: -np 4 -c 32768 -t 1 --metrics, log with --log-timestamps --log-prefix (the
# previous start's log is kept as .prev); transformers serve: --device cpu, OMP_NUM_THREADS as
# set by the caller. docs/soak.md, "Against a real engine", has the soaks and what they showed.
#
# Everything lives in $TOKDRIFT_PEERS (default ~/.cache/tokdrift/peers),
# outside git. PYTHON defaults to the python on PATH; it needs transformers,
# tokenizers and numpy (the project's test extras).
set -euo pipefail

LLAMACPP_PY_VERSION=0.3.36          # llama-cpp-python sdist that vendors llama.cpp
CACHE=${TOKDRIFT_PEERS:-$HOME/.cache/tokdrift/peers}
PYTHON=${PYTHON:-python}
JOBS=${JOBS:-2}
SRC=$CACHE/llama_cpp_python-$LLAMACPP_PY_VERSION/vendor/llama.cpp
BUILD=$CACHE/build
SERVER=$BUILD/bin/llama-server
HF=$CACHE/model/hf
GGUF=$CACHE/model/qwen3-tiny-f32.gguf
HERE=$(cd "$(dirname "$0")" && pwd)

log() { echo "[peer-engines] $*" >&2; }

fetch_source() {
    [ -f "$SRC/convert_hf_to_gguf.py" ] && return
    mkdir -p "$CACHE"
    ( cd "$CACHE" &&
      "$PYTHON" -m pip download "llama-cpp-python==$LLAMACPP_PY_VERSION" \
          --no-deps --no-binary :all: -d . &&
      tar xzf "llama_cpp_python-$LLAMACPP_PY_VERSION.tar.gz" )
}

cmd_build() {
    fetch_source
    if [ -x "$SERVER" ]; then log "already built: $SERVER"; return; fi
    local t0=$(date +%s)
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
    cmake --build "$BUILD" --target llama-server -j "$JOBS"
    local t1=$(date +%s)
    log "built $SERVER in $((t1 - t0)) s with -j$JOBS"
    echo "$((t1 - t0))" > "$BUILD/build-seconds"
}

cmd_model() {
    fetch_source
    if [ ! -f "$HF/config.json" ]; then
        "$PYTHON" "$HERE/peer_checkpoint.py" "$HF"
    fi
    if [ ! -f "$GGUF" ]; then
        "$PYTHON" "$HERE/peer_gguf.py" "$SRC" "$HF" --outtype f32 --outfile "$GGUF"
    fi
    if [ ! -d "$CACHE/pylib/accelerate" ]; then
        "$PYTHON" -m pip install --no-deps --target "$CACHE/pylib" accelerate
    fi
    ls -la "$GGUF" "$HF"
}

llama_cmd() {  # PORT LOGFILE
    echo "$SERVER" -m "$GGUF" --host 127.0.0.1 --port "$1" \
        --metrics -np 4 -c 32768 -t "${THREADS:-1}" --alias qwen3-tiny \
        --log-file "$2" --log-timestamps --log-prefix --log-colors off ${LLAMA_EXTRA:-}
}

transformers_cmd() {  # PORT
    # transformers serve always loads with a device_map, which needs accelerate (not in the test
    # extras); it is installed apart, into $CACHE/pylib, for this process only.
    echo env "PYTHONPATH=$CACHE/pylib" "$PYTHON" -m transformers.cli.transformers serve --host 127.0.0.1 --port "$1" \
        --device cpu ${TRANSFORMERS_EXTRA:-} "$HF"
}

check_ready() {
    [ -x "$SERVER" ] || { log "run '$0 build' first"; exit 2; }
    [ -f "$GGUF" ] || { log "run '$0 model' first"; exit 2; }
}

# start ENGINE PORT: in the background, in its own session; pid in $CACHE/ENGINE-PORT.pid,
# output in $CACHE/ENGINE-PORT.out (llama-server also writes its log to $LLAMA_LOG).
cmd_start() {
    local engine=$1 port=$2 cmd
    [ "$engine" = transformers ] && [ -f "$HF/config.json" ] || check_ready
    case $engine in
        llama)
            local logfile=${LLAMA_LOG:-$CACHE/llama-server-$port.log}
            # llama-server's --log-file starts the file over: keep the previous life's log beside it.
            [ -f "$logfile" ] && mv "$logfile" "$logfile.prev"
            cmd=$(llama_cmd "$port" "$logfile") ;;
        transformers) cmd=$(transformers_cmd "$port") ;;
        *) log "engine: llama or transformers, not '$engine'"; exit 2 ;;
    esac
    log "$engine on 127.0.0.1:$port: $cmd"
    setsid nohup $cmd </dev/null >>"$CACHE/$engine-$port.out" 2>&1 &
    echo $! > "$CACHE/$engine-$port.pid"
}

cmd_stop() {
    local engine=$1 port=$2 pidfile="$CACHE/$1-$2.pid" pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

# wait ENGINE PORT: until /v1/models answers (a restart command may return before that; the
# soak waits for /v1/models itself).
cmd_wait() {
    local pidfile="$CACHE/$1-$2.pid"
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$2/v1/models" >/dev/null && return 0
        if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            log "$1 on port $2 exited; last lines of $CACHE/$1-$2.out:"; tail -20 "$CACHE/$1-$2.out" >&2; exit 1
        fi
        sleep 0.5
    done
    log "$1 on port $2 did not answer /v1/models in 300 s"; exit 1
}

case "${1:-}" in
    build) cmd_build ;;
    model) cmd_model ;;
    start) cmd_start "$2" "$3" ;;
    stop) cmd_stop "$2" "$3" ;;
    restart) cmd_stop "$2" "$3"; cmd_start "$2" "$3" ;;
    wait) cmd_wait "$2" "$3" ;;
    *) sed -n 2,20p "$0"; exit 2 ;;
esac
