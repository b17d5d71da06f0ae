# The two commands of the README: `make demo` runs the product on its embedded default (SQLite,
# in-memory channel layer, the demo agent); `make test` runs the whole suite. Both create .venv first.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-from-pyproject

SDK := sdk/python
SDK_BUILD := build/sdk
# The extras whose adapters sdk/python/tests exercise.
SDK_EXTRAS := test,a2a,mcp,langgraph,openai-agents,agent-framework,adk,crewai,proxy
JS_SDK := sdk/js
JS_EXAMPLES := examples/js
JS_EXAMPLES_STAMP := $(JS_EXAMPLES)/node_modules/.installed-from-lockfile

.PHONY: demo test check pytest lint venv clean sdk-test js-test js-examples bench load

$(STAMP): pyproject.toml $(SDK)/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# reviewer-gate (a dependency of the project) comes from this repository's sdk/python, editable.
	$(PY) -m pip install --quiet -e '$(SDK)[a2a,mcp,langgraph,openai-agents,agent-framework,adk,crewai]' -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# make demo PORT=8100 AGENT_PORT=8101 runs it on other ports.
PORT ?= 8000
AGENT_PORT ?= 8001

demo: $(STAMP)
	$(PY) manage.py run_demo --port $(PORT) --agent-port $(AGENT_PORT)

# `make test` = the checks that need no database (once) + the suites (`make pytest`). CI (.ci/run) runs
# `make test` on PostgreSQL and then only `make pytest` on SQLite. pytest exits 5 when it collected no
# test: make fails then, as for any failure.
test: check pytest

check: $(STAMP)
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports  # the layer contracts of pyproject.toml [tool.importlinter]
	$(PY) -m mypy  # the product with django-stubs, pyproject.toml [tool.mypy]; the strict list strictly
	$(PY) -m mypy tests  # the tests, at the product's default level (the same [tool.mypy])
	cd $(SDK) && ../../$(PY) -m mypy  # strict, sdk/python/pyproject.toml [tool.mypy]
	$(MAKE) sdk-test
	$(MAKE) js-test

# PYTEST_ARGS="-m 'not browser'" and the like select tests. pytest-xdist runs the suite on
# PYTEST_WORKERS processes (each with its own test database and channel-layer prefix), a test module
# per process at a time (--dist loadfile: a module's shared servers start once), handed out in the
# order tests/conftest.py sorts them, longest first (--no-loadscope-reorder keeps that order: xdist's
# own, most tests first, would start the one-test fault loop last); PYTEST_WORKERS=0 runs it in this
# process alone.
PYTEST_WORKERS ?= 2
pytest: $(STAMP) $(JS_EXAMPLES_STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The reviewer-gate wheel as users get it: built, installed into a fresh virtualenv (pip's cache makes
# the dependencies quick), and its own tests run there from outside the source tree, so a module or
# py.typed missing from the wheel fails here.
sdk-test: $(STAMP)
	rm -rf $(SDK_BUILD)
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir $(SDK_BUILD) $(SDK)
	$(PYTHON) -m venv $(SDK_BUILD)/venv
	$(SDK_BUILD)/venv/bin/python -m pip install --quiet "$$(ls $(SDK_BUILD)/reviewer_gate-*.whl)[$(SDK_EXTRAS)]"
	cd $(SDK) && ../../$(SDK_BUILD)/venv/bin/python -m pytest -q -p no:cacheprovider tests

# @reviewer/gate (sdk/js), the TypeScript twin of reviewer-gate, as `sdk-test` checks the wheel: a clean
# install from its package-lock.json, the build (tsc), then node's own test runner, whose summary ends the
# output: the shared vectors of sdk/vectors (which sdk/python/tests/test_vectors.py checks too), the
# gate and the client against a fake Reviewer, and the packed tarball installed into a fresh folder and
# imported (and type-checked) from there. Needs Node 20 or newer and the npm registry (or npm's cache).
js-test:
	cd $(JS_SDK) && npm ci --no-audit --no-fund && npm run build && node --test test/*.test.js

# examples/js as tests/e2e/test_js_examples.py runs them against a live Reviewer: the frameworks from
# examples/js/package-lock.json (`npm ci`, what `npm run setup` there does) and @reviewer/gate built
# from sdk/js and installed as a packed copy (examples/js/.npmrc: install-links), not a link into the
# source tree. Again only when a lockfile or sdk/js's sources changed. Without npm it installs nothing,
# says so, and those tests skip.
$(JS_EXAMPLES_STAMP): $(JS_EXAMPLES)/package-lock.json $(JS_SDK)/package-lock.json $(shell find $(JS_SDK)/src -name '*.ts')
	@if command -v npm >/dev/null 2>&1; then \
	  set -e; \
	  (cd $(JS_SDK) && npm ci --no-audit --no-fund && npm run build); \
	  (cd $(JS_EXAMPLES) && npm ci --no-audit --no-fund); \
	  touch $(JS_EXAMPLES_STAMP); \
	else \
	  echo "npm not found: examples/js not installed, tests/e2e/test_js_examples.py will skip (Node 20 or newer)"; \
	fi

js-examples: $(JS_EXAMPLES_STAMP)

# Benchmarks (not tests): bench/run.py runs every bench/r<N>_*.py and prints one table of ratios against
# bare baselines measured in the same run (JSON in test-output/bench.json). Needs PostgreSQL
# (BENCH_POSTGRES, default postgres://postgres@127.0.0.1:5432; scratch databases named *bench*).
bench: $(STAMP)
	$(PY) bench/run.py $(BENCH)

# The load test of Reviewer itself (not part of `make test`): REST pull agents at stepped rates,
# reviewers through the pages, sockets open, on one and then two Daphnes (PostgreSQL + Redis;
# bench/load/run.py; LOAD_DATABASE_URL, LOAD_REDIS_URL, LOAD_BASE_PORT). It installs the `bench`
# extra (locust) into .venv first, and fails when a step sent less than 90% of what it offered.
# Report in bench/load/results/<name>/. The default takes at most about 13 minutes (8 steps of 25 s,
# each ~17 s of locust start and finish on top, for 1 and 2 processes, then the 4x step; it stops
# after the first step past the knee); run it on a quiet machine.
BENCH_STAMP := $(VENV)/.installed-bench-extra
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	@touch $(BENCH_STAMP)

LOAD_ARGS ?= --processes 1,2 --rates 0.5,1,2,4,8,12,16,24 --step-seconds 25
load: $(BENCH_STAMP)
	$(PY) bench/load/run.py $(LOAD_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf $(VENV) test-output .pytest_cache $(SDK_BUILD) $(JS_SDK)/node_modules $(JS_SDK)/dist $(JS_EXAMPLES)/node_modules
