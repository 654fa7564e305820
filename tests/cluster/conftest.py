"""Fixtures: delaymq name servers (`namesrv_factory`), brokers registered with them (`cluster_broker`), the
stock Java client (`java_client`), and the in-process broker fixtures of tests/server (HA tests)."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

from tests.conftest import register_diagnostics
from tests.helpers.cluster import NamesrvProcess
from tests.helpers.java import compile_java, java_available, java_command
from tests.server.conftest import broker_ctl, client, make_broker  # noqa: F401

CLUSTER_CLIENT = Path(__file__).resolve().parents[1] / "java" / "programs" / "ClusterClient.java"


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


@pytest.fixture(scope="session")
def java_client(tmp_path_factory):
    """`run(*args, timeout=60) -> [[word, ...], ...]`: tests/java/programs/ClusterClient.java (the stock Java
    client) run to completion; its SENT / RECV lines split into words. Exit code 0 required."""
    if not java_available():
        pytest.skip("no Apache RocketMQ 4.9.7 jars (../shared absent) or no java")
    classes = compile_java([CLUSTER_CLIENT], tmp_path_factory.mktemp("cluster-java"))

    def run(*args: str, timeout: float = 60.0) -> list[list[str]]:
        p = subprocess.run(java_command("ClusterClient", classes, *args), capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, (f"ClusterClient {args} exited {p.returncode}\n{p.stdout[-3000:]}\n"
                                   f"{p.stderr[-3000:]}")
        return [line.split() for line in p.stdout.splitlines() if line.startswith(("SENT", "RECV"))]

    return run
