# delaymq: `make run` starts the broker, `make test` runs the whole suite.
# The interpreter .venv is made from: PY if given, else the first of the distribution's python3 and
# python3 on PATH that is >= 3.11 and can make a venv. Distributions build their python3 with PGO + LTO;
# pyenv and plain source builds do not by default. On this project's machine the drain costs ~18% less
# CPU per message on Debian's 3.11 than on pyenv's (bench/RESULTS.md).
PY ?= $(shell for p in /usr/bin/python3 python3; do $$p -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# RocketMQ 5's official Python client (gRPC) lives in its own venv: it installs the top-level package
# `rocketmq`, as does the C++ client wheel `rocketmq` in .venv, so the two cannot share one. Tests
# drive it as a subprocess agent (tests/interop/rmq5_agent.py).
RMQ5_VENV := .venv-rmq5
RMQ5_STAMP := $(RMQ5_VENV)/.installed
RMQ5_CLIENT := rocketmq-python-client==5.1.2

.PHONY: setup run test check bench fuzz lint clean protos headers tools

setup: $(STAMP) $(NODE_STAMP) $(RMQ5_STAMP) tools

# Debian tools the tests use: promtool (package prometheus) lints the /metrics page, chromium renders the
# analytics report for its screenshot check. Installed only
# if absent and only if apt-get can (root); otherwise the test that needs it is skipped with a reason.
# apt-get install, with one apt-get update first if the package lists are missing or stale
APT_INSTALL = apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$$1" >/dev/null 2>&1 \
	|| { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$$1" >/dev/null 2>&1; }; }; apt_install

tools:
	@command -v promtool >/dev/null 2>&1 || { $(APT_INSTALL) prometheus \
		&& echo "installed promtool (Debian package prometheus)" \
		|| echo "promtool not installable here (apt-get install prometheus failed): tests/observability/test_promtool.py will skip"; }
	@command -v chromium >/dev/null 2>&1 || { $(APT_INSTALL) chromium \
		&& echo "installed chromium (the analytics report's screenshot test)" \
		|| echo "chromium not installable here: the report screenshot check in tests/analytics will skip"; }

$(RMQ5_STAMP): Makefile
	@test -n "$(PY)" || { echo "no python3 >= 3.11 with venv found; run make PY=/path/to/python3.11+"; exit 1; }
	test -x $(RMQ5_VENV)/bin/python || $(PY) -m venv $(RMQ5_VENV)
	$(RMQ5_VENV)/bin/python -m pip install -q '$(RMQ5_CLIENT)'
	touch $(RMQ5_STAMP)

# the Python code of the RocketMQ 5 protos and its typed stubs (grpcio-tools + mypy-protobuf, test extras:
# server/grpc/protos -> server/grpc/v2 *.py + *.pyi, committed; tests/grpc/test_codegen.py checks that this
# reproduces them)
protos: $(STAMP)
	$(VPY) -m server.grpc.codegen

# the hot paths' header parsers (server/header_parsers.py, committed), written from their declarations in
# server/headers.py; tests/server/test_header_codegen.py checks that this reproduces the committed file
headers: $(STAMP)
	$(VPY) -m server.header_codegen

$(STAMP): pyproject.toml
	@test -n "$(PY)" || { echo "no python3 >= 3.11 with venv found; run make PY=/path/to/python3.11+"; exit 1; }
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip setuptools wheel
	$(VPY) -m pip install -q -e '.[test]'
	touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $(NODE_STAMP)

run: $(STAMP)
	$(VENV)/bin/delaymq-broker --store ./store --port 9876 --metrics-port 5557

test: setup
	$(VPY) -m pytest -q -rfEs -p no:cacheprovider $(PYTEST_ARGS)

# the inner loop: lint, then every test that starts no process (no broker, name server, client agent, Java,
# Spark or CLI subprocess: tests/conftest.py refuses a subprocess to a test not marked so) and is not slow,
# four at a time (pytest-xdist)
CHECK_MARKS := not process and not java and not interop and not spark and not slow
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VPY) -m pytest -q -p no:cacheprovider -n 4 -m "$(CHECK_MARKS)" $(PYTEST_ARGS)

bench: setup
	$(VPY) -m bench.run_all

fuzz: setup
	$(VPY) -m tests.fuzz.run --seconds 600

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(RMQ5_VENV) node_modules store bench/results
