# jobyard — every entry point a developer or CI needs. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
BIN := $(VENV)/bin
# Peer benchmarks (benchmarks/peers/README.md): venvs, servers and results, all git-ignored.
PEERS := .jobyard/peers
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: help install browser promtool test test-workflows-slow test-slow check lint typecheck imports demo up bench bench-peers bench-peers-pgqueuer bench-peers-procrastinate bench-peers-celery bench-ceiling bench-steady bench-pressure bench-burndown explain db-reset db-dump clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(VENV)/.installed: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --compile-bytecode --python $(PYTHON)
	@# Byte-compile at install time: with PYTHONDONTWRITEBYTECODE set (as on CI) every process
	@# would otherwise recompile every module it imports, ~2 s for a worker to start.
	$(BIN)/python -m compileall -q src
	@touch $@

install: $(VENV)/.installed ## create .venv from uv.lock (idempotent)

browser: ## install Debian's chromium for the dashboard tests (needs root; no-op when present)
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

promtool: ## install Debian's prometheus package for `promtool check metrics` (no-op when present)
	@command -v promtool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }

test: install browser promtool ## run the whole test suite (embedded PostgreSQL unless JOBYARD_TEST_DATABASE_URL is set)
	$(BIN)/python -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

test-workflows-slow: install ## the workflow tests with the 1,000-job batch repeated 20 times
	JOBYARD_BATCH_REPEATS=20 $(BIN)/python -m pytest tests/workflows -q $(PYTEST_ARGS)

test-slow: install ## the soak runs: schemathesis with every check, 2,000+ cases as owner and as viewer
	$(BIN)/python -m pytest -m soak -p no:cacheprovider -s $(PYTEST_ARGS) tests/api/test_schemathesis.py

lint: install ## ruff check + format check
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: install ## mypy --strict
	$(BIN)/mypy --strict

imports: install ## enforce the one-way import direction
	$(BIN)/lint-imports

check: lint typecheck imports test ## every gate CI runs

demo: install ## set everything up and run the whole system on embedded PostgreSQL
	$(BIN)/jobyard demo

up: install ## run api + worker + scheduler against the configured database
	$(BIN)/jobyard up

# Each peer (and the pgbench ceiling) runs once just before each of jobyard's rounds.
PEER_COMMANDS := \
	--peer-command "benchmarks/peers/pgqueuer/run.sh --runs 1" \
	--peer-command "benchmarks/peers/procrastinate/run.sh --runs 1" \
	--peer-command "benchmarks/peers/celery/run.sh --runs 1" \
	--peer-command "$(BIN)/python benchmarks/ceiling/ceiling.py --runs 1"
BENCH_RUNS ?= 3

bench: install ## every peer, the pgbench ceiling and jobyard in turns (3 rounds); rewrite docs/BENCHMARKS.md
	UV=$(UV) PYTHON=$(PYTHON) $(BIN)/jobyard bench --runs $(BENCH_RUNS) $(PEER_COMMANDS)

bench-peers: bench-peers-pgqueuer bench-peers-procrastinate bench-peers-celery ## measure every peer alone into .jobyard/peers/<peer>.json

bench-peers-pgqueuer: install ## measure PgQueuer 1.6.0 on this machine into .jobyard/peers/pgqueuer.json
	UV=$(UV) PYTHON=$(PYTHON) benchmarks/peers/pgqueuer/run.sh --output $(PEERS)/pgqueuer.json $(PEER_ARGS)

bench-peers-procrastinate: install ## measure Procrastinate 3.10.0 into .jobyard/peers/procrastinate.json
	UV=$(UV) PYTHON=$(PYTHON) benchmarks/peers/procrastinate/run.sh --output $(PEERS)/procrastinate.json $(PEER_ARGS)

bench-peers-celery: install ## measure Celery 5.7.0 + Redis into .jobyard/peers/celery.json
	UV=$(UV) PYTHON=$(PYTHON) benchmarks/peers/celery/run.sh --output $(PEERS)/celery.json $(PEER_ARGS)

bench-ceiling: install ## pgbench of the bare claim+complete SQL into .jobyard/peers/ceiling.json
	$(BIN)/python benchmarks/ceiling/ceiling.py --output $(PEERS)/ceiling.json $(PEER_ARGS)

# The scenarios over time (docs/BENCHMARKS.md, "Scenarios over time"); SCENARIO_ARGS adds flags,
# e.g. make bench-pressure SCENARIO_ARGS="--hold-s 300 --readers 4".
bench-steady: install ## 800 jobs/s offered for 2 min, sampled: block, PNG and JSON under docs/
	$(BIN)/jobyard bench --scenario steady $(SCENARIO_ARGS)

bench-pressure: install ## 800 jobs/s: baseline 2 min, an xid held 10 min, release, recovery 2 min
	$(BIN)/jobyard bench --scenario pressure $(SCENARIO_ARGS)

bench-burndown: install ## 1,000,000 pre-inserted no-op jobs drained by 2 processes, per quarter
	$(BIN)/jobyard bench --scenario burndown $(SCENARIO_ARGS)

explain: install ## regenerate docs/EXPLAIN.md from the EXPLAIN harness
	$(BIN)/jobyard db explain

db-reset: install ## drop and re-create the schema on the configured database
	$(BIN)/jobyard db reset --yes

db-dump: install ## rewrite src/jobyard/db/schema.sql from the migrated schema
	$(BIN)/jobyard db dump

clean: ## remove the virtualenvs and the embedded database
	$(BIN)/jobyard db stop 2>/dev/null || true
	rm -rf $(VENV) $(TOOLS) .jobyard
