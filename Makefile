# Every target builds what it needs, so each works from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test lint type bench check demo docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check jobctl tests bench
	$(BIN)/ruff format --check jobctl tests bench

type: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/startup_bench.py
	$(BIN)/python bench/worker_bench.py
	$(BIN)/python bench/scale_bench.py

docs: $(STAMP)
	$(BIN)/python -m jobctl.cli.docgen

demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" sh examples/demo.sh

check: lint type test

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
