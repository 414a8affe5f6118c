# Two commands on a fresh machine:  `make demo` (the main job)  and  `make test` (the test suite).
# Both create or reuse .venv, install torch first (TORCH_SPEC; the CPU wheel torch==2.13.0 by
# default — set e.g. TORCH_SPEC="torch==2.13.0 --index-url <your CUDA index>" on GPU machines),
# then normgrow with its dev extra.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.normgrow-installed

.PHONY: setup demo test test-slow bench clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job. Until `normgrow study` lands it runs what exists end to end: the default corpus
# prepared into token shards (cached), then both default students built and described.
demo: setup
	$(BIN)/normgrow prepare default
	$(BIN)/normgrow model default model.norm=pre
	$(BIN)/normgrow model default model.norm=post

test: setup
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

bench: setup
	$(BIN)/python benchmarks/bench_model.py

clean-venv:
	rm -rf $(VENV)
