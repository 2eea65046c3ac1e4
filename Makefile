# One command sets up and runs the main job, one sets up and runs the tests (see README).
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned and installed first: a plain requirement may pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: setup demo test check test-slow browser case-llamacpp-shared-kv case-llamacpp-defrag

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[engine,test]"
	touch $@

# A three-minute soak of the example agent trace on the built-in engine (a fresh twin probed beside it
# every cycle), then the report.
DEMO_SOAK = --trace examples/opencode.jsonl --minutes 3 --scale 0.1 --speed 4 --concurrency 1 \
	--probe-every 8 --probe-tokens 32 --probe-output 96 --engine-arg=--kv-tokens=2048

demo: setup
	@run=runs/demo-$$(date +%Y%m%d-%H%M%S) && \
	$(VENV)/bin/soak run $(DEMO_SOAK) -o $$run && \
	$(VENV)/bin/diag report $$run && \
	$(VENV)/bin/diag summary $$run | head -20 && \
	echo "report: $$run/report.html"

test: setup browser check
	$(PY) -m pytest -q

# ruff (lint and format) and mypy, configured in pyproject.toml; `make test` runs them first.
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Debian's chromium for the report's headless-browser test (installed as root, e.g. in CI;
# elsewhere that one test is skipped with a note).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium is not installed and cannot be here: tests/reports/test_chromium.py will be skipped"

test-slow: setup
	$(PY) -m pytest -q -m slow

# Case study (docs/case-studies/llamacpp-shared-kv.md): llama.cpp's KV cells held by idle slots, on
# the build that has it (llama-cpp-python 0.3.14) and the one that fixed it (0.3.17), each soaked
# with a fresh control beside it. Not part of `make test`: the builds take 4-7 minutes each on two
# cores, the soaks up to 45 minutes each. Runs under ~/.cache/tokdrift/peers/case-runs/.
CASE_BUILDS ?= 0.3.14 0.3.17
case-llamacpp-shared-kv: setup
	@for v in $(CASE_BUILDS); do \
		PYTHON=$(abspath $(PY)) scripts/peer-engines.sh build $$v && \
		PYTHON=$(abspath $(PY)) scripts/peer-engines.sh model $$v || exit 1; \
	done
	@for v in $(CASE_BUILDS); do VENV=$(abspath $(VENV)) scripts/case-llamacpp-shared-kv.sh $$v || exit 1; done

# Case study (docs/case-studies/llamacpp-defrag.md): llama.cpp without KV defragmentation (0.3.1)
# and with it (0.3.2): the side-by-side churn of both builds, then each soaked with a fresh control
# beside it in the near-full scenario (4 slots of 512 cells); DEFRAG_EXTRA="--defrag-thold 0.1"
# with DEFRAG_BUILDS=0.3.1 soaks 0.3.1 with defragmentation on. Builds about 90 s each here; the
# churn 6 minutes, the soaks up to 15 minutes each.
DEFRAG_BUILDS ?= 0.3.1 0.3.2
DEFRAG_SCENARIO = NP=4 CTX=2048 TRACE=$(abspath examples/llamacpp-kv-near-full.jsonl) CONCURRENCY=6 MAX_CONTEXT=448 MAX_HOURS=0.25
case-llamacpp-defrag: setup
	@for v in $(DEFRAG_BUILDS); do \
		PYTHON=$(abspath $(PY)) scripts/peer-engines.sh build $$v && \
		PYTHON=$(abspath $(PY)) scripts/peer-engines.sh model $$v || exit 1; \
	done
	PYTHON=$(abspath $(PY)) scripts/peer-frag-ab.sh $(DEFRAG_BUILDS)
	@for v in $(DEFRAG_BUILDS); do $(DEFRAG_SCENARIO) LLAMA_EXTRA="$(DEFRAG_EXTRA)" VENV=$(abspath $(VENV)) \
		scripts/case-llamacpp-shared-kv.sh $$v || exit 1; done
