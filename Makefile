# One command sets up and runs the main job, one sets up and runs the tests (see README).
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned and installed first: a plain requirement may pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: setup demo test test-slow

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[engine,test]"
	touch $@

demo: setup
	$(PY) -m engine.demo

test: setup
	$(PY) -m pytest -q

test-slow: setup
	$(PY) -m pytest -q -m slow
