# The two commands of the README: `make demo` runs the product on its embedded default (SQLite,
# in-memory channel layer, the demo agent); `make test` runs the whole suite. Both create .venv first.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-from-pyproject

.PHONY: demo test lint venv clean bench

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) manage.py run_demo

# pytest exits 5 when it collected no test: make fails then, as for any failure.
test: $(STAMP)
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports  # the layer contracts of pyproject.toml [tool.importlinter]
	$(PY) -m pytest $(PYTEST_ARGS)

# Benchmarks (not tests): bench/run.py runs every bench/r<N>_*.py and prints one table of ratios against
# bare baselines measured in the same run (JSON in test-output/bench.json). Needs PostgreSQL
# (BENCH_POSTGRES, default postgres://postgres@127.0.0.1:5432; scratch databases named *bench*).
bench: $(STAMP)
	$(PY) bench/run.py $(BENCH)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf $(VENV) test-output .pytest_cache
