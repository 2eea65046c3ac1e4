#!/usr/bin/env bash
# Real third-party engines as soak targets: llama.cpp's llama-server and
# `transformers serve`, on a seeded random Qwen3 (or Qwen2) checkpoint made here.
#
#   scripts/peer-engines.sh build [VERSION]        # llama-server of llama-cpp-python VERSION, once (200-1000 s, -j2, 2 cores)
#   scripts/peer-engines.sh model [VERSION]        # HF checkpoint + GGUF (f32) that build reads, once
#   scripts/peer-engines.sh start llama PORT [VERSION]  # in the background; log $CACHE/llama-server-PORT.log
#   scripts/peer-engines.sh start transformers PORT
#   scripts/peer-engines.sh wait ENGINE PORT       # until /v1/models answers and /health is not 503
#   scripts/peer-engines.sh restart ENGINE PORT [VERSION]  # stop and start (a soak's --restart-cmd)
#   scripts/peer-engines.sh stop ENGINE PORT
#   scripts/peer-engines.sh versions               # the builds and models in the cache
#
# VERSION (an argument, or the VERSION environment variable) is a llama-cpp-python release whose
# sdist vendors llama.cpp: default 0.3.36. Each version has its own source
# ($CACHE/llama_cpp_python-V), build directory ($CACHE/build-V; 0.3.36 keeps $CACHE/build where
# it was built before) and build time (build-V/build-seconds). 0.3.36 runs the Qwen3 checkpoint;
# every other version a Qwen2 one of the same sizes (Qwen3 support arrived in 2025), converted by
# that version's own convert_hf_to_gguf.py ($CACHE/model/qwen2-tiny-f32-V.gguf). ARCH=qwen2|qwen3
# overrides the choice.
#
# llama-server: -np $NP -c $CTX (default 4, 32768; NP=0 leaves -np out) -t $THREADS (1) --metrics, log with
# --log-timestamps --log-prefix (the previous start's log is kept as .prev), $LLAMA_EXTRA
# appended; --log-colors off only where it takes a value; LIKE_FOR_LIKE=1 adds -fa off and
# --cache-ram 0 where that build has them (what the older builds do anyway). transformers serve:
# --device cpu, OMP_NUM_THREADS as set by the caller. docs/soak.md, "Against a real engine",
# has the soaks and what they showed.
#
# Everything lives in $TOKDRIFT_PEERS (default ~/.cache/tokdrift/peers),
# outside git. PYTHON defaults to the python on PATH; it needs transformers,
# tokenizers and numpy (the project's test extras).
set -euo pipefail

DEFAULT_VERSION=0.3.36              # llama-cpp-python sdist that vendors llama.cpp
CACHE=${TOKDRIFT_PEERS:-$HOME/.cache/tokdrift/peers}
PYTHON=${PYTHON:-python}
JOBS=${JOBS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)

set_version() {  # VERSION: the paths of that version's source, build, checkpoint and GGUF
    LLAMACPP_PY_VERSION=${1:-${VERSION:-$DEFAULT_VERSION}}
    SRC=$CACHE/llama_cpp_python-$LLAMACPP_PY_VERSION/vendor/llama.cpp
    BUILD=$CACHE/build-$LLAMACPP_PY_VERSION
    if [ "$LLAMACPP_PY_VERSION" = "$DEFAULT_VERSION" ] && [ ! -d "$BUILD" ] && [ -d "$CACHE/build" ]; then
        BUILD=$CACHE/build                  # where the default version was built before versions
    fi
    SERVER=$BUILD/bin/llama-server
    local default_arch=qwen2
    [ "$LLAMACPP_PY_VERSION" = "$DEFAULT_VERSION" ] && default_arch=qwen3
    MODEL_ARCH=${ARCH:-$default_arch}
    if [ "$MODEL_ARCH" = qwen3 ]; then
        HF=$CACHE/model/hf
        GGUF=$CACHE/model/qwen3-tiny-f32.gguf
        [ "$LLAMACPP_PY_VERSION" = "$DEFAULT_VERSION" ] || GGUF=$CACHE/model/qwen3-tiny-f32-$LLAMACPP_PY_VERSION.gguf
    else
        HF=$CACHE/model/hf-$MODEL_ARCH
        GGUF=$CACHE/model/$MODEL_ARCH-tiny-f32-$LLAMACPP_PY_VERSION.gguf
    fi
}
set_version

log() { echo "[peer-engines] $*" >&2; }

fetch_source() {
    [ -f "$SRC/convert_hf_to_gguf.py" ] && return
    mkdir -p "$CACHE"
    ( cd "$CACHE" &&
      "$PYTHON" -m pip download "llama-cpp-python==$LLAMACPP_PY_VERSION" \
          --no-deps --no-binary :all: -d . &&
      tar xzf "llama_cpp_python-$LLAMACPP_PY_VERSION.tar.gz" )
}

# The build's own flags: sources up to 0.3.2 (late 2024) keep the server in examples/server,
# built with the examples; later ones in tools/server. LLAMA_CURL (on by default from 2025 to
# 0.3.16, and no libcurl headers here), LLAMA_OPENSSL and the web-UI switches are turned off only
# where that source's CMakeLists.txt has them.
build_flags() {
    local flags=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON)
    if [ -d "$SRC/tools/server" ]; then
        flags+=(-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON)
    else
        flags+=(-DLLAMA_BUILD_EXAMPLES=ON)
    fi
    local opt
    for opt in LLAMA_CURL LLAMA_OPENSSL LLAMA_BUILD_UI LLAMA_USE_PREBUILT_UI; do
        grep -q "option($opt\b" "$SRC/CMakeLists.txt" && flags+=("-D$opt=OFF")
    done
    echo "${flags[@]}"
}

cmd_build() {
    fetch_source
    if [ -x "$SERVER" ]; then log "already built: $SERVER"; return; fi
    local t0=$(date +%s)
    # shellcheck disable=SC2046
    cmake -S "$SRC" -B "$BUILD" -G Ninja $(build_flags)
    cmake --build "$BUILD" --target llama-server -j "$JOBS"
    local t1=$(date +%s)
    log "built $SERVER ($LLAMACPP_PY_VERSION) in $((t1 - t0)) s with -j$JOBS"
    echo "$((t1 - t0))" > "$BUILD/build-seconds"
}

cmd_model() {
    fetch_source
    if [ ! -f "$HF/config.json" ]; then
        "$PYTHON" "$HERE/peer_checkpoint.py" "$HF" --arch "$MODEL_ARCH"
    fi
    if [ ! -f "$GGUF" ]; then
        "$PYTHON" "$HERE/peer_gguf.py" "$SRC" "$HF" --outtype f32 --outfile "$GGUF"
    fi
    # accelerate is for transformers serve, which runs the Qwen3 checkpoint.
    if [ "$MODEL_ARCH" = qwen3 ] && [ ! -d "$CACHE/pylib/accelerate" ]; then
        "$PYTHON" -m pip install --no-deps --target "$CACHE/pylib" accelerate
    fi
    ls -la "$GGUF" "$HF"
}

llama_cmd() {  # PORT LOGFILE
    local args="" arg=$SRC/common/arg.cpp
    # --log-colors takes on|off|auto from late 2025 (0.3.17); before, it is a switch that turns
    # colours on (off by default), so it is left out.
    grep -q '"--log-colors"}, "' "$arg" && args="--log-colors off"
    if [ -n "${LIKE_FOR_LIKE:-}" ]; then
        # The same attention path and no host-memory prompt cache on every build: -fa takes
        # on|off|auto (default auto) from 0.3.17 and is a switch (default off) before; --cache-ram
        # exists from 0.3.17.
        grep -q '"-fa", "--flash-attn" }, "\[on|off|auto\]"' "$arg" && args="$args -fa off"
        grep -q '"--cache-ram"}' "$arg" && args="$args --cache-ram 0"
    fi
    # NP=0 leaves -np out: the build's own default (0.3.17's is 4 slots in one unified KV buffer).
    [ "${NP:-4}" = 0 ] || args="$args -np ${NP:-4}"
    echo "$SERVER" -m "$GGUF" --host 127.0.0.1 --port "$1" \
        --metrics -c "${CTX:-32768}" -t "${THREADS:-1}" --alias "$MODEL_ARCH-tiny" \
        --log-file "$2" --log-timestamps --log-prefix $args ${LLAMA_EXTRA:-}
}

transformers_cmd() {  # PORT
    # transformers serve always loads with a device_map, which needs accelerate (not in the test
    # extras); it is installed apart, into $CACHE/pylib, for this process only.
    echo env "PYTHONPATH=$CACHE/pylib" "$PYTHON" -m transformers.cli.transformers serve --host 127.0.0.1 --port "$1" \
        --device cpu ${TRANSFORMERS_EXTRA:-} "$HF"
}

check_ready() {
    [ -x "$SERVER" ] || { log "run '$0 build $LLAMACPP_PY_VERSION' first"; exit 2; }
    [ -f "$GGUF" ] || { log "run '$0 model $LLAMACPP_PY_VERSION' first"; exit 2; }
}

cmd_versions() {
    local d v
    for d in "$CACHE"/llama_cpp_python-*/; do
        [ -d "$d" ] || continue
        v=${d%/}; v=${v##*/llama_cpp_python-}
        set_version "$v"
        printf '%-8s server %-4s (%s s)  gguf %s\n' "$v" "$([ -x "$SERVER" ] && echo yes || echo no)" \
            "$(cat "$BUILD/build-seconds" 2>/dev/null || echo -)" "$([ -f "$GGUF" ] && echo "$GGUF" || echo none)"
    done
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

# wait ENGINE PORT: until /v1/models answers and /health is not 503 (a restart command may return before that; the
# soak waits for /v1/models itself).
cmd_wait() {
    local pidfile="$CACHE/$1-$2.pid"
    for _ in $(seq 600); do
        # llama-server of mid-2025 (0.3.14) answers /v1/models while the model is still loading;
        # its /health says 503 until it is ready. transformers serve has no /health (404).
        if curl -sf "http://127.0.0.1:$2/v1/models" >/dev/null; then
            case $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$2/health") in
                200|404) return 0 ;;
            esac
        fi
        if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            log "$1 on port $2 exited; last lines of $CACHE/$1-$2.out:"; tail -20 "$CACHE/$1-$2.out" >&2; exit 1
        fi
        sleep 0.5
    done
    log "$1 on port $2 did not answer /v1/models in 300 s"; exit 1
}

case "${1:-}" in
    build) set_version "${2:-}"; cmd_build ;;
    model) set_version "${2:-}"; cmd_model ;;
    start) set_version "${4:-}"; cmd_start "$2" "$3" ;;
    stop) cmd_stop "$2" "$3" ;;
    restart) set_version "${4:-}"; cmd_stop "$2" "$3"; cmd_start "$2" "$3" ;;
    wait) cmd_wait "$2" "$3" ;;
    versions) cmd_versions ;;
    *) sed -n 2,31p "$0"; exit 2 ;;
esac
