# FAR: `make run` sets up .venv and runs the main job; `make test` sets up .venv and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install run test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/far evaluate configs/evaluate.yaml

test: install
	$(BIN)/pytest

bench: install
	$(BIN)/python bench/bench_core.py

clean:
	rm -rf $(VENV) results bench/out .pytest_cache .hypothesis
