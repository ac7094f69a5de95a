# Every target builds what it needs, so each works from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: install test test-fast lint type bench check demo docs dist matrix clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The bench-only extra (procrastinate, for bench/pg_bench.py), on top of dev.
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

# The inner loop (a few minutes): one module at a time, the contract's vectors, the properties.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit tests/contract tests/property

lint: $(STAMP)
	$(BIN)/ruff check jobctl tests bench
	$(BIN)/ruff format --check jobctl tests bench

type: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP) $(BENCH_STAMP)
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/startup_bench.py
	$(BIN)/python bench/worker_bench.py
	$(BIN)/python bench/pg_bench.py
	$(BIN)/python bench/scale_bench.py

docs: $(STAMP)
	$(BIN)/python -m jobctl.cli.docgen

demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" sh examples/demo.sh

check: lint type test

# sdist and wheel in dist/, built as pip and pipx build them (PEP 517, isolated).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# make check on 3.11, and on 3.10, 3.12 and 3.13 the typed library and the
# unit, contract, CLI and worker tests, each in its .venv-X.Y (see .ci/matrix).
matrix:
	bash .ci/matrix

clean:
	rm -rf $(VENV) .venv-3.* build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
