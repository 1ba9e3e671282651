# pgferry developer entry points.  Both targets build .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m pgferry.demo

test: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
