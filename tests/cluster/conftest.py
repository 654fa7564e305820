"""Fixtures: delaymq name servers (`namesrv_factory`), brokers registered with them (`cluster_broker`), the
client agents (`agents`: C++, and the stock Java client, also as `java_client`), and the in-process broker
fixtures of tests/server (HA tests)."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest

from tests.conftest import register_diagnostics
from tests.helpers.cluster import NamesrvProcess
from tests.helpers.java import java_available
from tests.interop.conftest import Agents
from tests.server.conftest import broker_ctl, client, make_broker  # noqa: F401


@pytest.fixture
def namesrv_factory(tmp_path, request):
    made: list[NamesrvProcess] = []
    counter = itertools.count()

    def make(config=None) -> NamesrvProcess:
        ns = NamesrvProcess(tmp_path / f"namesrv{next(counter)}", config)
        register_diagnostics(request, f"namesrv {ns.addr}", ns.diagnostics)
        made.append(ns)
        return ns.start()

    yield make
    for ns in made:
        if ns.running:
            ns.stop()


@pytest.fixture
def cluster_broker(broker_factory):
    """`make(name, *namesrvs, **config)`: a delaymq broker named `name` registered with the name servers."""

    def make(name: str, *namesrvs: NamesrvProcess, **config):
        conf = {"brokerName": name, "namesrvAddr": ";".join(ns.addr for ns in namesrvs), **config}
        return broker_factory(conf)

    return make


class JavaClient:
    """The stock Java 4.9.7 client for the cluster tests: tests/java/agent/JavaAgent.java, the program
    tests/interop drives, started through `agents` (pass a NamesrvProcess, or anything with `.namesrv`, where
    it takes a broker). A producer retries a failed send twice with a 10 s timeout (the client's defaults
    but the timeout): the cluster tests send through brokers that come and go."""

    def __init__(self, agents: Agents) -> None:
        self.agents = agents

    def produce(self, ns, topic: str, count: int, prefix: str, delay_level: int = 0,
                timer_delay_sec: int | None = None, timeout: float = 90.0) -> list[dict]:
        """Send `count` messages (bodies `<prefix>-<run>-<i>`); their "sent" events, every one SEND_OK."""
        agent = self.agents.run_java(
            "produce", ns, timeout=timeout, topic=topic, count=count, body_prefix=f"{prefix}-", tag="TagA",
            group=f"PID_cluster_{uuid.uuid4().hex[:10]}", retries=2, send_timeout_ms=10000,
            delay_level=delay_level or None,
            property=[f"TIMER_DELAY_SEC={timer_delay_sec}"] if timer_delay_sec is not None else None)
        sent = agent.of("sent")
        assert len(sent) == count and all(e["status"] == "SEND_OK" for e in sent), agent.diagnostics()
        return sent

    def consumer(self, ns, topic: str, group: str, count: int, timeout: int, stop_file: Path | None = None):
        """A push consumer (from the first offset) running until `count` distinct bodies were acknowledged,
        `stop_file` exists (exit 0) or `timeout` seconds passed (exit 2): its AgentProcess."""
        return self.agents.java("consume", ns, topic=topic, group=group, until_count=count, timeout=timeout,
                                stop_file=stop_file)

    def consume(self, ns, topic: str, group: str, count: int, timeout: int) -> list[dict]:
        """`consumer` run to completion (exit 0 required): its "received" events."""
        agent = self.consumer(ns, topic, group, count, timeout)
        code = agent.wait_exit(timeout + 60)
        assert code == 0, f"java consume exited {code}\n{agent.diagnostics()}"
        return agent.of("received")


@pytest.fixture
def java_client(agents):
    """`JavaClient`: the stock Java client (tests/java/agent/JavaAgent.java) with produce / consume / consumer."""
    if not java_available():
        pytest.skip("no Apache RocketMQ 4.9.7 jars (../shared absent) or no java")
    return JavaClient(agents)


@pytest.fixture
def agents(tmp_path, request, monkeypatch):
    """The C++ client agents of tests/interop (pass a NamesrvProcess where they take a broker)."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    a = Agents(tmp_path, request)
    yield a
    a.close()
