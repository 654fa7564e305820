# delaymq: `make run` starts the broker, `make test` runs the whole suite.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: setup run test bench fuzz lint clean

setup: $(STAMP) $(NODE_STAMP)

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip setuptools wheel
	$(VPY) -m pip install -q -e '.[test]'
	touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $(NODE_STAMP)

run: $(STAMP)
	$(VENV)/bin/delaymq-broker --store ./store --port 9876

test: setup
	$(VPY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: setup
	$(VPY) -m bench.run_all

fuzz: setup
	$(VPY) -m tests.fuzz.run --seconds 600

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) node_modules store bench/results
