# stretto: `make run` runs the walkthrough on the embedded default; `make test` runs the tests.
# Each sets up what it needs first: a virtual environment with pinned dependencies, and the
# official filesystem MCP server from npm in node/ (never fetched at test time).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node/node_modules/.installed
export STRETTO_HOME ?= $(HOME)/.stretto

.PHONY: setup run test test-slow lint bench clean

setup: $(PY_STAMP) $(NODE_STAMP)

$(PY_STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11) and "stretto needs Python 3.11 (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# hatchling installs in place with a plain .pth entry (no import hook to slow the proxy's start)
	$(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	$(BIN)/python scripts/dagster_home.py
	touch $@

$(NODE_STAMP): node/package.json node/package-lock.json
	cd node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

run: setup
	$(BIN)/python scripts/walkthrough.py

# The quick suite on two workers (a file's tests stay together, so its fixtures are built
# once); the slow tests (marked `slow`) one at a time: several start processes and race them.
test: setup
	$(BIN)/pytest -m "not slow" -n 2 --dist loadfile

test-slow: setup
	$(BIN)/pytest -m slow

# ruff; mypy over the packages ([tool.mypy]); the layers as import contracts ([tool.importlinter]);
# no import cycles between our modules, lazy imports included (scripts/import_cycles.py); no
# module using another's private names (scripts/private_names.py); no import inside a function
# without its reason (scripts/lazy_imports.py).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/import_cycles.py
	$(BIN)/python scripts/private_names.py
	$(BIN)/python scripts/lazy_imports.py

bench: setup
	$(BIN)/python bench/proxy_overhead.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/learn.py
	$(BIN)/python bench/decide.py
	$(BIN)/python bench/replay.py
	$(BIN)/python bench/live.py

clean:
	rm -rf $(VENV) node/node_modules *.egg-info
