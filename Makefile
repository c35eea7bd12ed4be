# Loupe — `make run` brings the system up, `make test` runs the tests.
# Both install what they need first (a venv in .venv, Java for Spark).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
DATA_DIR ?= data
SQL_PORT ?= 6875
PYTEST_ARGS ?=
# The sqllogictest corpus `make slt` runs, and the runner's arguments.
SLT_DIR  ?= $(abspath ../shared/sqllogictest)
SLT_ARGS ?= --postgres --max-records 1000
CHAOS_ARGS ?=
# `make soak`'s arguments (python -m loupe.testing.soak --help).
SOAK_ARGS ?= --minutes 30
# bench/compute.py's Pathway baseline lives in a venv of the benchmark's own,
# never in Loupe's dependencies.
PATHWAY_VENV    ?= bench/.venv-pathway
PATHWAY_VERSION ?= 0.33.0

export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.DEFAULT_GOAL := help

.PHONY: help install run test test-fast lint format typecheck protos check-protos bench bench-pathway slt chaos soak clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo ""
	@echo "  Variables: DATA_DIR=$(DATA_DIR) SQL_PORT=$(SQL_PORT) PYTEST_ARGS='...'"
	@echo "             SLT_DIR=$(SLT_DIR) SLT_ARGS='$(SLT_ARGS)' (see python -m loupe.slt --help)"
	@echo "             CHAOS_ARGS='$(CHAOS_ARGS)' (python -m loupe.testing.chaos --help)"
	@echo "             SOAK_ARGS='$(SOAK_ARGS)' (python -m loupe.testing.soak --help)"

install: $(STAMP) ## create .venv and install Loupe with its dev tools (idempotent)

$(STAMP): pyproject.toml setup.py scripts/ensure_system_deps.sh
	@scripts/ensure_system_deps.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# pip's wheel cache keeps the PySpark build (a 456 MB sdist) across venvs.
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

run: install ## start Loupe on its embedded defaults, print the SQL ports and the console URL (Ctrl-C stops)
	$(BIN)/loupe up --data-dir $(DATA_DIR) --sql-port $(SQL_PORT)

test: install check-protos lint typecheck ## checks, then the whole test suite in two lanes (unit/service | end-to-end)
	scripts/test_lanes.sh $(BIN)/pytest $(PYTEST_ARGS)

test-fast: install ## run the tests without the end-to-end ones
	$(BIN)/pytest -m "not e2e" $(PYTEST_ARGS)

lint: install ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install ## apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: install ## mypy over the handwritten code
	@# Not incremental: a cache left by mypy run on one directory (mypy services/coordinator)
	@# made a later whole run report modules missing that exist. A whole run takes ~10 s.
	$(BIN)/mypy --no-incremental libs services

protos: install ## regenerate libs/loupe/proto from protos/
	$(PY) scripts/gen_protos.py

check-protos: install ## fail when the generated code is stale
	$(PY) scripts/gen_protos.py --check

bench: install ## run the benchmarks and print their numbers (creates the Pathway baseline's venv when missing)
	@# Without it (offline, say) bench/compute.py says the Pathway baseline was skipped and why.
	-@$(MAKE) --no-print-directory bench-pathway
	$(PY) bench/run.py

bench-pathway: $(PATHWAY_VENV)/.installed ## the venv of bench/compute.py's Pathway baseline (bench/.venv-pathway)

$(PATHWAY_VENV)/.installed:
	@echo "creating $(PATHWAY_VENV) with pathway==$(PATHWAY_VERSION) (log: $(PATHWAY_VENV).log)"
	@rm -rf $(PATHWAY_VENV)
	@{ $(PYTHON) -m venv $(PATHWAY_VENV) \
	   && $(PATHWAY_VENV)/bin/python -m pip install --quiet --retries 1 --timeout 30 pathway==$(PATHWAY_VERSION) \
	   && $(PATHWAY_VENV)/bin/python -c "import pathway"; } > $(PATHWAY_VENV).log 2>&1 \
	 || { echo "failed: see $(PATHWAY_VENV).log"; rm -rf $(PATHWAY_VENV); \
	      echo "creating $(PATHWAY_VENV) failed (pip install pathway==$(PATHWAY_VERSION))" >> $(PATHWAY_VENV).log; \
	      exit 1; }
	@touch $@

slt: install ## run sqllogictest scripts on a fresh Loupe (and PostgreSQL): pass rate per file
	$(PY) -m loupe.slt --dir $(SLT_DIR) $(SLT_ARGS)

chaos: install ## long chaos test: 30 kills/pauses of every process under load, then strict serializability
	$(PY) -m loupe.testing.chaos $(CHAOS_ARGS)

soak: install ## 30 min of steady mixed load; memory and disk per process over time (bench/results/soak)
	$(PY) -m loupe.testing.soak $(SOAK_ARGS)

clean: ## remove caches and the default data directory (not .venv)
	rm -rf $(DATA_DIR) .pytest_cache .ruff_cache .mypy_cache build
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
