# rlexp: `make run` trains the default experiment, `make test` runs the test suite.
# Both set up .venv on first use (idempotent: re-running `make install` does nothing new).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install lock run test test-fast lint format bench bench-mpi bench-update bench-backends bench-learning clean

install: $(STAMP)

# torch first, pinned, when none is importable: an unpinned torch pulls a multi-GB CUDA build. The rest
# at the versions of constraints.txt, the set the suite last passed with: a fixed-seed learning test's
# numbers move with a new release of numpy, TensorFlow or MPI, so an update is a change of its own.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# Rewrite constraints.txt from .venv (after `pip install -U ...` there and a passing `make test`).
lock: install
	{ sed -n '1,/^$$/p' constraints.txt; $(BIN)/pip freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.txt.tmp
	mv constraints.txt.tmp constraints.txt

run: install
	$(BIN)/python -m rlexp $(ARGS)

# The suite on TEST_WORKERS pytest-xdist workers, a test file per worker at a time; 0 = none.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(ARGS)

test-fast: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# rlexp vs Stable-Baselines3 side by side (installs SB3 if missing), torch vs TF, PPO on 1/2/4 ranks.
bench: install
	$(BIN)/python benchmarks/bench_sb3.py $(ARGS)

bench-mpi: install
	$(BIN)/python benchmarks/bench_core.py $(ARGS)

bench-update: install
	$(BIN)/python benchmarks/bench_update.py $(ARGS)

bench-backends: install
	$(BIN)/python benchmarks/bench_backends.py $(ARGS)

# PPO with the tuned presets (tuned=ppo) on HalfCheetah/Hopper/Walker2d-v4, 1M steps, 3 seeds (about an hour
# per env here); ARGS="--sb3" adds SB3 with the zoo presets side by side, ARGS="--defaults" Spinning Up's PPO.
bench-learning: install
	$(BIN)/python benchmarks/bench_learning.py $(ARGS)
