# The two commands of the README: `make demo` runs the product on its embedded default (SQLite,
# in-memory channel layer, the demo agent); `make test` runs the whole suite. Both create .venv first.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-from-pyproject

.PHONY: demo test lint venv clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# make demo PORT=8100 AGENT_PORT=8101 runs it on other ports.
PORT ?= 8000
AGENT_PORT ?= 8001

demo: $(STAMP)
	$(PY) manage.py run_demo --port $(PORT) --agent-port $(AGENT_PORT)

# pytest exits 5 when it collected no test: make fails then, as for any failure.
test: $(STAMP)
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports  # the layer contracts of pyproject.toml [tool.importlinter]
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf $(VENV) test-output .pytest_cache
