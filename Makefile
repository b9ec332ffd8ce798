# `make run` and `make test` each create/refresh .venv themselves (fresh machine: Python 3.11 + pip).
PYTHON ?= python3
# pytest-xdist workers for `make test`, each given whole test files (a file's shared Flower
# deployment or Ray simulations stay in one worker), the longest first (tests/conftest.py),
# and cores / workers torch threads
TEST_WORKERS ?= 2
VENV   := .venv
BIN    := $(VENV)/bin
# the main job needs only the core dependencies (a fresh venv in about half the time);
# the tests need every extra (transformers, Flower, pyarrow, pytest, ruff)
CORE   := $(VENV)/.installed-core
STAMP  := $(VENV)/.installed

.PHONY: run test lint setup clean

# wheels are unpacked without pip's one-by-one byte-compiling, then compiled on every core
# with the packages' own tests/ left out (never imported): a fresh core venv in ~27 s instead
# of ~34 s. A file written for a newer Python does not compile here (pip skips such files
# silently too), hence the `|| true`.
PIP_INSTALL := $(BIN)/python -m pip install --quiet --no-compile
COMPILE     := $(BIN)/python -m compileall -qq -j 0 -x '/tests?/' $(VENV)/lib || true

$(CORE): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e .
	$(COMPILE)
	touch $(CORE)

$(STAMP): $(CORE)
	$(PIP_INSTALL) -e '.[dev,hf,flower,data]'
	$(COMPILE)
	touch $(STAMP)

setup: $(STAMP)

# methods train side by side, one process per free core (regionfed run --jobs)
run: $(CORE)
	$(BIN)/regionfed run --config configs/default.yaml --report

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks experiments
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks experiments

clean:
	rm -rf $(VENV) runs .pytest_cache
