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
from tests.interop.conftest import Agents
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
def java_classes(tmp_path_factory):
    if not java_available():
        pytest.skip("no Apache RocketMQ 4.9.7 jars (../shared absent) or no java")
    return compile_java([CLUSTER_CLIENT], tmp_path_factory.mktemp("cluster-java"))


@pytest.fixture(scope="session")
def java_client(java_classes):
    """`run(*args, timeout=60) -> [[word, ...], ...]`: tests/java/programs/ClusterClient.java (the stock Java
    client) run to completion; its SENT / RECV lines split into words. Exit code 0 required."""

    def run(*args: str, timeout: float = 60.0) -> list[list[str]]:
        p = subprocess.run(java_command("ClusterClient", java_classes, *args), capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, (f"ClusterClient {args} exited {p.returncode}\n{p.stdout[-3000:]}\n"
                                   f"{p.stderr[-3000:]}")
        return [line.split() for line in p.stdout.splitlines() if line.startswith(("SENT", "RECV"))]

    return run


class JavaConsumer:
    """A ClusterClient consumer running in the background; its stdout goes to a file read on demand."""

    def __init__(self, classes: Path, work: Path, *args: str) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.out, self.stop_file = work / "stdout", work / "stop"
        with open(self.out, "wb") as f:
            self.proc = subprocess.Popen(java_command("ClusterClient", classes, *args, str(self.stop_file)),
                                         stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def lines(self, prefix: str) -> list[list[str]]:
        text = self.out.read_text(errors="replace") if self.out.exists() else ""
        return [line.split() for line in text.splitlines() if line.startswith(prefix)]

    def stop(self, timeout: float = 30.0) -> int:
        self.stop_file.touch()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"java consumer ignored its stop file\n{self.out.read_text()[-3000:]}") from None


@pytest.fixture
def java_consumers(java_classes, tmp_path):
    """`start(*consume_args) -> JavaConsumer` (ClusterClient consume ... with a stop file); killed at teardown."""
    made: list[JavaConsumer] = []
    counter = itertools.count()

    def start(*args: str) -> JavaConsumer:
        c = JavaConsumer(java_classes, tmp_path / f"java-consumer{next(counter)}", *args)
        made.append(c)
        return c

    yield start
    for c in made:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(10)


@pytest.fixture
def agents(tmp_path, request, monkeypatch):
    """The C++ client agents of tests/interop (pass a NamesrvProcess where they take a broker)."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    a = Agents(tmp_path, request)
    yield a
    a.close()
