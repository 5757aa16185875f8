# Every target that needs Python creates .venv and installs the package with its
# development tools (the `dev` dependency group in pyproject.toml) first, so `make test`
# or `make demo` works as the first command on a fresh machine. Override the
# interpreter with `make PYTHON=python3.12 test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.saltedtable-installed
# Apache Beam pins protobuf<7, so saltedtable[beam] gets a venv of its own and the
# core suite keeps running on the newest protobuf.
BEAM_VENV  := .venv-beam
BEAM_BIN   := $(BEAM_VENV)/bin
BEAM_STAMP := $(BEAM_VENV)/.saltedtable-installed

.PHONY: install install-beam test test-beam unit lint generate docs docs-serve dist wheel-check demo emulator bench bench-beam clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# --group (PEP 735 dependency groups) needs pip 25.1 or later.
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e . --group dev
	touch $(STAMP)

$(BEAM_STAMP): pyproject.toml
	test -x $(BEAM_BIN)/python || $(PYTHON) -m venv $(BEAM_VENV)
	$(BEAM_BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BEAM_BIN)/python -m pip install --quiet -e ".[beam]" --group test "mypy>=2.4,<3"
	touch $(BEAM_STAMP)

install-beam: $(BEAM_STAMP)

## make test: lint, the docs build, the whole suite (on two workers, each starting and
## stopping its own official emulator; a file's tests share one worker), then the
## Apache Beam pipelines in their own venv
test: lint docs test-beam
	$(BIN)/python -m pytest -n 2 --dist loadfile

## make test-beam: in .venv-beam (protobuf 6): mypy --strict over saltedtable.beam, its
## tests and examples; the Beam tests; and the planner's unit tests, so the core is
## proven on the protobuf Beam pins as well as on the newest
# --allow-untyped-calls: much of Beam's API carries no annotations (the package's own
# override in pyproject.toml says the same).
test-beam: $(BEAM_STAMP)
	$(BEAM_BIN)/mypy --strict --follow-imports=silent --explicit-package-bases \
		--allow-untyped-calls saltedtable/beam/*.py tests/beam/*.py examples/beam_*.py examples/tools/beam_bench.py
	$(BEAM_BIN)/python -m pytest -o addopts="" tests/beam
	$(BEAM_BIN)/python -m pytest tests/unit/_read/test_plan.py tests/unit/_read/test_split.py \
		tests/unit/_guard/test_migration.py tests/unit/_cli/test_cli_migrate.py

## make unit: only the tests that need no emulator
unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

## make lint: the generated sync twins are current, ruff, and mypy --strict over the package
lint: $(STAMP)
	$(BIN)/python .ci/unasync.py --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## make generate: write the sync twins from their async sources (see docs/development.md)
generate: $(STAMP)
	$(BIN)/python .ci/unasync.py

## make docs: build the documentation site into site/, failing on any warning (works offline)
# NO_MKDOCS_2_WARNING: Material's end-of-life banner, printed on every build, says nothing
# about this site (docs/development.md notes the successor).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## make docs-serve: preview the documentation site on http://127.0.0.1:8000
docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

## make dist: build the wheel and the sdist into dist/ (what a Dataflow worker or another
## machine installs until saltedtable is published: see docs/scaling-out.md)
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

## make wheel-check: install the built wheel in clean venvs, away from the sources, and run
## the console script, an emulator round trip and `import saltedtable.beam` (a few minutes)
wheel-check: dist
	PYTHON=$(PYTHON) .ci/wheel_check

## make demo: start the emulator, create the table, run both quickstarts, stop the emulator
demo: $(STAMP)
	$(BIN)/saltedtable emulator --table quickstart:cf -- \
		sh -c '$(BIN)/python examples/quickstart.py && $(BIN)/python examples/quickstart_sync.py'

## make emulator: run the emulator in the foreground on 127.0.0.1 (Ctrl-C stops it)
emulator: $(STAMP)
	$(BIN)/saltedtable emulator --port $${PORT:-8086} --table quickstart:cf

## make bench: saltedtable vs the raw client on the emulator, alternating A/B
## (ARGS=--quick for a ~30 s run; results also written as JSON under bench-results/)
bench: $(STAMP)
	$(BIN)/python examples/tools/benchmark.py $(ARGS)

## make bench-beam: ReadSaltedRows with 1, 2 and 4 local workers vs the async scan
bench-beam: $(BEAM_STAMP)
	$(BEAM_BIN)/python examples/tools/beam_bench.py $(ARGS)

clean:
	rm -rf $(VENV) $(BEAM_VENV) dist site .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
