# The two commands of the README:
#   make demo   set up (virtualenv, dependencies, database) and run the main job:
#               run_eval on the demo dataset with the embedded defaults
#               (SQLite, in-process jobs, the local GGUF model)
#   make test   set up, lint (ruff, mypy, import-linter), then run the whole test
#               suite (PostgreSQL, then the event-log and run_eval tests again on SQLite)
#
# LOCAL=0 skips the `local` extra (no llama-cpp-python build) and the tests marked
# local_model: a developer's shortcut; .ci/run always runs them.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/agentlab
STAMP := $(VENV)/.installed
LOCAL ?= 1
ifeq ($(LOCAL),0)
EXTRAS := dev
PYTEST_MARK := -m "not local_model"
else
EXTRAS := local,local-server,dev
PYTEST_MARK :=
endif

.PHONY: setup demo test test-postgres test-sqlite lint docs lock bench migrate clean

# The example plugin package: its entry points are what the plugin tests load.
EXAMPLE_PLUGIN := examples/agentlab_example_plugin

# Versions come from requirements.lock (pip constraints), so every install resolves alike.
$(STAMP): pyproject.toml requirements.lock $(EXAMPLE_PLUGIN)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@echo "Installing AgentLab [$(EXTRAS)] (building llama-cpp-python takes about 10 minutes on 2 cores the first time)..."
	$(PY) -m pip install --quiet -c requirements.lock -e ".[$(EXTRAS)]"
	$(PY) -m pip install --quiet --no-deps -e $(EXAMPLE_PLUGIN)
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(PY) manage.py migrate --noinput

demo: migrate
	$(PY) manage.py run_eval demo --concurrency 1

test: lint test-postgres test-sqlite

# ruff (rules in pyproject.toml), the formatter's check, mypy with the django-stubs
# plugin over the whole tree, and the import-linter contracts (layers, no circles).
lint: setup docs
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The documentation site (mkdocs.yml) built with --strict: a broken link or
# anchor fails. The site must fetch nothing from another host, and the
# README stays a front page (at most 15,000 bytes).
docs: setup
	$(VENV)/bin/mkdocs build --strict --quiet
	@! grep -rElq '<(script|link|img)[^>]+(src|href)="(https?:)?//' var/site --include='*.html' \
	    || { echo "docs: the site loads an asset from another host"; exit 1; }
	@test "$$(wc -c < README.md)" -le 15000 || { echo "docs: README.md is over 15,000 bytes"; exit 1; }

test-postgres: setup
	DATABASE_URL=$${DATABASE_URL:-$(PG_URL)} $(PY) -m pytest -q -rs $(PYTEST_MARK)

test-sqlite: setup
	env -u DATABASE_URL $(PY) -m pytest -q -rs $(PYTEST_MARK) tests/turns/test_events.py tests/turns/test_driver.py tests/evaluation/run/test_run_eval.py \
	    tests/turns/test_driver_records.py tests/evaluation/run/test_text_safety.py tests/evaluation/datasets/test_gold_answers.py \
	    tests/evaluation/annotation/test_annotation_admin.py tests/turns/test_attempts.py tests/turns/test_attempt_migration.py \
	    tests/common/test_sql.py tests/turns/test_history.py tests/turns/test_writer.py tests/evaluation/replay

# Resolve pyproject.toml's ranges afresh into requirements.lock (uv only resolves: nothing is built).
lock: setup
	$(VENV)/bin/uv pip compile pyproject.toml --extra local --extra local-server --extra dev --python-version 3.11 \
	    --quiet --no-annotate --no-header -o requirements.lock.new
	( printf '%s\n' "# Locked versions of every dependency (direct and transitive) for Python 3.11, used as pip" \
	    "# constraints by 'make setup'. Regenerate after changing pyproject.toml: make lock"; \
	  cat requirements.lock.new ) > requirements.lock && rm requirements.lock.new

bench: setup
	$(PY) bench/eval_throughput.py

clean:
	rm -rf $(VENV) var
