# Every target installs what it needs into .venv first, so a fresh machine with only
# Python 3.11 needs no manual step. The stamp is rebuilt whenever pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench fuzz soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,bench,pipeline]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/purgatory-proxy run $(ARGS)

test: $(STAMP)
	bash scripts/install-system-deps.sh
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check wire proxy pipeline bench tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.wire
	$(BIN)/python -m bench.purgatory
	$(BIN)/python -m bench.fairness
	$(BIN)/python -m bench.throughput

fuzz: $(STAMP)
	FUZZ_EXAMPLES=1000000 $(BIN)/python -m pytest tests/unit/wire/test_fuzz.py -q

soak: $(STAMP)
	$(BIN)/python -m pytest -m soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
