# Every target that needs Python creates .venv and installs the package with its
# dev extra first, so `make test` or `make demo` works as the first command on a
# fresh machine. Override the interpreter with `make PYTHON=python3.12 test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.saltedtable-installed
# Apache Beam pins protobuf<7, so saltedtable[beam] gets a venv of its own and the
# core suite keeps running on the newest protobuf.
BEAM_VENV  := .venv-beam
BEAM_BIN   := $(BEAM_VENV)/bin
BEAM_STAMP := $(BEAM_VENV)/.saltedtable-installed

.PHONY: install install-beam test test-beam unit lint demo emulator bench bench-beam clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

$(BEAM_STAMP): pyproject.toml
	test -x $(BEAM_BIN)/python || $(PYTHON) -m venv $(BEAM_VENV)
	$(BEAM_BIN)/python -m pip install --quiet --upgrade pip
	$(BEAM_BIN)/python -m pip install --quiet -e ".[beam]" "pytest>=8" "pytest-asyncio>=0.24" \
		"pytest-timeout>=2.3" "hypothesis>=6.100" "mypy>=2.4,<3"
	touch $(BEAM_STAMP)

install-beam: $(BEAM_STAMP)

## make test: lint, then the whole suite (starts and stops the official emulator),
## then the Apache Beam pipelines in their own venv
test: lint test-beam
	$(BIN)/python -m pytest

## make test-beam: mypy --strict over saltedtable.beam and tests/beam, in .venv-beam
test-beam: $(BEAM_STAMP)
	$(BEAM_BIN)/mypy --strict --follow-imports=silent saltedtable/beam/*.py
	$(BEAM_BIN)/python -m pytest -o addopts="" tests/beam

## make unit: only the tests that need no emulator
unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

## make lint: ruff and mypy --strict over the package
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## make demo: start the emulator, create the table, run the quickstart, stop the emulator
demo: $(STAMP)
	$(BIN)/python -m saltedtable.testing --table quickstart:cf -- $(BIN)/python examples/quickstart.py

## make emulator: run the emulator in the foreground on 127.0.0.1 (Ctrl-C stops it)
emulator: $(STAMP)
	$(BIN)/python -m saltedtable.testing --port $${PORT:-8086} --table quickstart:cf

## make bench: saltedtable vs the raw client on the emulator, alternating A/B
## (ARGS=--quick for a ~30 s run; results also written as JSON under bench-results/)
bench: $(STAMP)
	$(BIN)/python examples/benchmark.py $(ARGS)

## make bench-beam: ReadSaltedRows with 1, 2 and 4 local workers vs the async scan
bench-beam: $(BEAM_STAMP)
	$(BEAM_BIN)/python examples/beam_bench.py $(ARGS)

clean:
	rm -rf $(VENV) $(BEAM_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
