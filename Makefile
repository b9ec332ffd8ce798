# `make run` and `make test` each create/refresh .venv themselves (fresh machine: Python 3.11 + pip).
PYTHON ?= python3
# pytest-xdist workers for `make test`, each given whole test files (a file's shared Flower
# deployment or Ray simulations stay in one worker), the longest first (tests/conftest.py),
# and cores / workers torch threads
TEST_WORKERS ?= 2
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint setup clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,hf,flower,data]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/regionfed run --config configs/default.yaml --report

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks experiments
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks experiments

clean:
	rm -rf $(VENV) runs .pytest_cache
