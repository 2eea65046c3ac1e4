#!/usr/bin/env bash
# The checks that need a GPU, for a machine that has one (docs/benchmarks.md, "On a GPU"):
#   scripts/gpu-check.sh checks   the CUDA tests, and what expert-thrash and kv-scatter cost a decode
#                                 step on the device (benchmarks/bench_*.py --device cuda); ~3 min
#   scripts/gpu-check.sh soak     the fault matrix's expert-thrash row on the device (soak validate
#                                 --no-control); ~7 min
# It runs under the machine's own python3 (torch and triton there); packages that python lacks can
# come as wheels in .whl/ (installed into /tmp/site). Output goes to $OUT (default /tmp/gpu-check).
set -u
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKDRIFT_NO_BROWSER=1
export PYTHONPATH=$PWD
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
case "${1:-checks}" in
checks)
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" \
        | tee -a "$out/gpu.txt"
    timeout 170 python3 -m pytest -q -p no:cacheprovider -rs -o addopts="" tests/engine/test_cuda.py 2>&1 | tee "$out/pytest.txt"
    timeout 150 python3 benchmarks/bench_expert_thrash.py --device cuda --requests 100 2>&1 | tee "$out/expert_thrash.txt"
    for backend in torch triton; do
        timeout 80 python3 benchmarks/bench_kv_scatter.py --device cuda --attention-backend $backend --tokens 32 --reps 5 2>&1 \
            | tee "$out/kv_scatter_$backend.txt"
    done
    ;;
soak)
    timeout 500 python3 -m tokdrift.cli.soak validate --fault expert-thrash --no-control --out /tmp/matrix-gpu 2>&1 \
        | tee "$out/soak.txt"
    tar czf "$out/matrix-gpu.tgz" -C /tmp matrix-gpu
    ;;
*)
    echo "usage: scripts/gpu-check.sh checks|soak" >&2
    exit 2
    ;;
esac
