# `make test` works from a clean clone: it creates .venv, builds the wheel and
# installs it (not editable), so the tests import pgcheckpoint from site-packages
# exactly as users get it, with the migrations and SQL the wheel carries.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
PIP := $(BIN)/python -m pip --disable-pip-version-check
# what the wheel is built from: `make demo` rebuilds it only when one changed
WHEEL_SOURCES := pyproject.toml README.md $(shell find src sql migrations -type f \
	-not -path '*/__pycache__/*' -not -name '*.pyc' 2>/dev/null)

.PHONY: venv install test official-tests lint bench demo docs sync-twin schema-sql retention-sql

venv: $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: venv
	rm -f dist/pgcheckpoint-*.whl
	$(PIP) wheel --no-deps -w dist .
	$(PIP) uninstall --yes --quiet pgcheckpoint
	$(PIP) install "$$(ls dist/pgcheckpoint-*.whl)[test,lint,server]"
	$(BIN)/python -c 'import sys, pgcheckpoint.contrib.embedded as m; \
	sys.exit(None if "site-packages" in m.__file__ else f"pgcheckpoint imports from {m.__file__}")'

# pytest's exit code stands, so a run that collects no test (5) fails too; loadgroup keeps
# the tests of one xdist_group (tests/agent_server, whose servers each module starts once)
# on one worker
test: install
	$(BIN)/pytest -n 2 --dist loadgroup $(PYTEST_ARGS) tests

# the official saver's and store's own tests (langgraph-checkpoint-postgres 3.2.0) against
# pgcheckpoint: tests/official fetches them with pip once, into $XDG_CACHE_HOME/pgcheckpoint,
# and skips without a network; the store's run on the vector tests' server (pgvector 0.7+);
# docs/moving.md lists the cases that differ
official-tests: install
	$(BIN)/pytest $(PYTEST_ARGS) tests/official

lint: install
	$(BIN)/ruff check src tests migrations tools bench examples
	$(BIN)/mypy src/pgcheckpoint tools

# sql/schema.sql is rendered from the Alembic revisions (on the server of
# $PGCHECKPOINT_TEST_DSN, else local); CI fails when it is stale
schema-sql: install
	$(BIN)/python tools/render_schema.py

# the statements the pg_cron procedure of sql/retention.sql shares with the Python
# code are rendered into it from sql/queries/; CI fails when it is stale
retention-sql: install
	$(BIN)/python tools/render_retention.py

bench: install
	$(BIN)/python bench/run.py

# Only what the demo needs (the demo extra), quietly, and the wheel rebuilt only
# when a file it is built from changed since the last `make demo`.
$(VENV)/.demo-installed: $(WHEEL_SOURCES) | venv
	@echo "installing pgcheckpoint and what the demo needs into $(VENV)"
	@rm -f dist/pgcheckpoint-*.whl
	@$(PIP) wheel --quiet --no-deps -w dist .
	@$(PIP) uninstall --yes --quiet --quiet pgcheckpoint
	@$(PIP) install --quiet "$$(ls dist/pgcheckpoint-*.whl)[demo]"
	@touch $@

demo: $(VENV)/.demo-installed
	@$(BIN)/python -m pgcheckpoint.contrib.demo

# The site, into site/; --strict fails on a broken link or reference. The API
# reference is read from the docstrings in src/ (the package is not imported).
$(VENV)/.docs-installed: pyproject.toml | venv
	$(PIP) install --quiet ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# the sync drivers (runner.py, saver.py, locks.py in src/pgcheckpoint/drivers) are generated
# from their async sources; the tool formats its output with ruff, hence the lint extra
sync-twin: install
	$(BIN)/python tools/async_to_sync.py
