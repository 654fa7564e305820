"""Fixtures for the gRPC (RocketMQ 5) tests: a broker with its gRPC port on, the 5.x Python client agent."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import register_diagnostics
from tests.helpers.agents import AgentProcess
from tests.helpers.broker import REPO_ROOT, pick_port_pair
from tests.interop.conftest import Agents, _argv_opts, uniq  # noqa: F401  (uniq re-exported)

RMQ5_PYTHON = REPO_ROOT / ".venv-rmq5" / "bin" / "python"
RMQ5_AGENT = REPO_ROOT / "tests" / "interop" / "rmq5_agent.py"
NODE5_AGENT = REPO_ROOT / "tests" / "interop" / "node" / "rmq5.js"


def grpc_broker(broker_factory, config: dict | None = None, stack: str = "grpcio"):
    """A broker whose gRPC endpoint listens on a free port (`b.grpc_addr`), served by `stack` (grpcServerStack:
    grpc.aio in the broker, or Envoy with the whole broker embedded)."""
    port = pick_port_pair()
    b = broker_factory({"grpcListenPort": port, **({"grpcServerStack": stack} if stack != "grpcio" else {}),
                        **(config or {})})
    b.grpc_port = port
    b.grpc_addr = f"127.0.0.1:{port}"
    return b


class Rmq5Agents(Agents):
    def _start(self, name: str, argv: list[str], env: dict | None = None) -> AgentProcess:
        work = self.tmp_path / "agents" / f"{next(self._n):02d}-{name}"
        agent = AgentProcess(name, argv, work, env={"HOME": str(work), **(env or {})}, cond=self.cond)
        register_diagnostics(self.request, f"agent {name}", agent.diagnostics)
        self.started.append(agent)
        return agent.start()

    def rmq5(self, cmd: str, broker, name: str | None = None, env: dict | None = None, **opts) -> AgentProcess:
        if not RMQ5_PYTHON.exists():
            pytest.fail(".venv-rmq5 is missing: run `make setup` (it installs rocketmq-python-client 5.1.2 there)")
        argv = [str(RMQ5_PYTHON), str(RMQ5_AGENT), cmd, "--endpoint", broker.grpc_addr, *_argv_opts(opts)]
        return self._start(name or f"rmq5-{cmd}", argv, env)

    def run_rmq5(self, cmd: str, broker, timeout: float = 60.0, expect_code: int = 0, **opts) -> AgentProcess:
        agent = self.rmq5(cmd, broker, **opts)
        code = agent.wait_exit(timeout)
        assert code == expect_code, f"rmq5 {cmd} exited {code}, expected {expect_code}\n{agent.diagnostics()}"
        return agent

    def node5(self, cmd: str, broker, name: str | None = None, **opts) -> AgentProcess:
        """Apache's RocketMQ 5 Node client (npm rocketmq-client-nodejs) via tests/interop/node/rmq5.js."""
        node = shutil.which("node")
        if node is None:
            pytest.fail("`node` is not on PATH (the RocketMQ 5 Node client tests need Node.js >= 16.19)")
        if not (REPO_ROOT / "node_modules" / "rocketmq-client-nodejs").is_dir():
            pytest.fail("node_modules/rocketmq-client-nodejs is missing: run `make setup` (npm ci)")
        argv = [node, str(NODE5_AGENT), cmd, "--endpoint", broker.grpc_addr, *_argv_opts(opts)]
        return self._start(name or f"node5-{cmd}", argv)

    def run_node5(self, cmd: str, broker, timeout: float = 60.0, expect_code: int = 0, **opts) -> AgentProcess:
        agent = self.node5(cmd, broker, **opts)
        code = agent.wait_exit(timeout)
        assert code == expect_code, f"node5 {cmd} exited {code}, expected {expect_code}\n{agent.diagnostics()}"
        return agent


@pytest.fixture
def agents(tmp_path, request):
    a = Rmq5Agents(tmp_path, request)
    yield a
    a.close()


@pytest.fixture
def gbroker(broker_factory, request):
    b = grpc_broker(broker_factory)
    register_diagnostics(request, "grpc port", lambda: b.grpc_addr)
    return b


__all__ = ["grpc_broker", "uniq", "Path", "sys"]


# delaymq-proxy's gRPC server stacks (grpcServerStack): the proxy tests run on each
PROXY_STACKS = ["grpcio", "envoy"]


@pytest.fixture(params=PROXY_STACKS)
def proxy_stack(request) -> str:
    return str(request.param)


# the broker's own gRPC server stacks (grpcServerStack): a representative set of in-broker gRPC tests runs on each
BROKER_STACKS = ["grpcio", "envoy"]


@pytest.fixture(params=BROKER_STACKS)
def broker_stack(request) -> str:
    return str(request.param)


@pytest.fixture
def sbroker(broker_factory, broker_stack, request):
    """`gbroker` on each of the broker's gRPC server stacks."""
    b = grpc_broker(broker_factory, stack=broker_stack)
    register_diagnostics(request, "grpc port", lambda: f"{b.grpc_addr} ({broker_stack})")
    return b
