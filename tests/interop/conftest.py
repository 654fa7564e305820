"""Fixtures for driving third-party clients (C++ via cpp_agent.py, Node via ali-ons) as subprocesses."""

from __future__ import annotations

import itertools
import shutil
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tests.conftest import register_diagnostics
from tests.helpers.agents import AgentProcess
from tests.helpers.broker import REPO_ROOT
from tests.helpers.java import ROCKETMQ_JAVA, java_agent_classes, java_available, java_command

CPP_AGENT = Path(__file__).with_name("cpp_agent.py")
NODE_DIR = Path(__file__).with_name("node")


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _argv_opts(opts: dict) -> list[str]:
    out: list[str] = []
    for key, val in opts.items():
        flag = "--" + key.replace("_", "-")
        if val is None or val is False:
            continue
        if val is True:
            out.append(flag)
        elif isinstance(val, list | tuple):
            for v in val:
                out += [flag, str(v)]
        else:
            out += [flag, str(val)]
    return out


class Agents:
    """Starts agents, gives each its own HOME (C++ logs and local offsets land there), reaps them."""

    def __init__(self, tmp_path: Path, request):
        self.tmp_path = tmp_path
        self.request = request
        self.started: list[AgentProcess] = []
        self._n = itertools.count()
        self.cond = threading.Condition()  # shared: waits may span several agents

    def _start(self, name: str, argv: list[str]) -> AgentProcess:
        work = self.tmp_path / "agents" / f"{next(self._n):02d}-{name}"
        agent = AgentProcess(name, argv, work, env={"HOME": str(work)}, cond=self.cond)
        register_diagnostics(self.request, f"agent {name}", agent.diagnostics)
        self.started.append(agent)
        return agent.start()

    def cpp(self, cmd: str, broker, name: str | None = None, **opts) -> AgentProcess:
        """Start `cpp_agent.py <cmd> --namesrv <broker> ...opts` (opts use python names: until_count=5)."""
        argv = [sys.executable, str(CPP_AGENT), cmd, "--namesrv", broker.namesrv, *_argv_opts(opts)]
        return self._start(name or f"cpp-{cmd}", argv)

    def run_cpp(self, cmd: str, broker, timeout: float = 60.0, expect_code: int = 0, **opts) -> AgentProcess:
        agent = self.cpp(cmd, broker, **opts)
        code = agent.wait_exit(timeout)
        assert code == expect_code, f"cpp {cmd} exited {code}, expected {expect_code}\n{agent.diagnostics()}"
        return agent

    def node(self, script: str, broker, name: str | None = None, **opts) -> AgentProcess:
        node = shutil.which("node")
        if node is None:
            pytest.fail("`node` is not on PATH (the Node interop tests need Node.js >= 14)")
        if not (REPO_ROOT / "node_modules" / "ali-ons").is_dir():
            pytest.fail("node_modules/ali-ons is missing: run `make setup` (npm ci)")
        argv = [node, str(NODE_DIR / script), "--namesrv", broker.namesrv, *_argv_opts(opts)]
        return self._start(name or f"node-{Path(script).stem}", argv)

    def java(self, cmd: str, broker, name: str | None = None, **opts) -> AgentProcess:
        """Start `JavaAgent <cmd> --namesrv <broker> ...opts`: the stock Apache 4.9.7 Java client."""
        if not java_available():
            pytest.skip(f"no Apache RocketMQ 4.9.7 jars at {ROCKETMQ_JAVA} (../shared absent) or no java on PATH")
        argv = java_command("JavaAgent", java_agent_classes(), cmd, "--namesrv", broker.namesrv, *_argv_opts(opts))
        return self._start(name or f"java-{cmd}", argv)

    def run_java(self, cmd: str, broker, timeout: float = 90.0, expect_code: int = 0, **opts) -> AgentProcess:
        agent = self.java(cmd, broker, **opts)
        code = agent.wait_exit(timeout)
        assert code == expect_code, f"java {cmd} exited {code}, expected {expect_code}\n{agent.diagnostics()}"
        return agent

    def close(self) -> None:
        for agent in self.started:
            agent.kill()


@pytest.fixture
def agents(tmp_path, request):
    a = Agents(tmp_path, request)
    yield a
    a.close()


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch):
    # Clients must reach 127.0.0.1 directly whatever the environment says.
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
