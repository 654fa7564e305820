"""Every port a broker opens, through real broker processes (issue 29 item 2): a port another process
holds, or two keys given one port, stops the start with one line naming the key and the port (exit
non-zero, no traceback, the store never opened); brokers given only their own `--port` derive distinct
gRPC / HA / VIP ports, so two of them run side by side on one host."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import wire
from tests.helpers.broker import (
    GRPC_PORT_OFFSET,
    HOST,
    REPO_ROOT,
    BrokerProcess,
    pick_port_pair,
    pick_port_with_grpc,
)
from tests.helpers.cluster import NamesrvProcess
from tests.server.test_start_safety import error_lines, run_broker

pytestmark = pytest.mark.process  # broker processes and the console entry points

@contextmanager
def held(port: int) -> Iterator[socket.socket]:
    """A listening socket of this test process on `port` (another program holding it)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((HOST, port))
    s.listen()
    try:
        yield s
    finally:
        s.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def assert_one_line(res: subprocess.CompletedProcess[str], key: str, port: int, store: Path) -> None:
    assert res.returncode != 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    errors = error_lines(res.stderr)
    assert len(errors) == 1, res.stderr
    assert key in errors[0] and str(port) in errors[0], errors[0]
    assert not (store / "commitlog").exists()  # refused before the store was opened


# (key, which port of a broker on P with metrics on M and gRPC on G another process holds)
TAKEN = [
    ("listenPort", lambda p, m, g: p),
    ("listenPort-2", lambda p, m, g: p - 2),
    ("haListenPort", lambda p, m, g: p + 1),
    ("grpcListenPort", lambda p, m, g: g),
    ("metricsPort", lambda p, m, g: m),
]


@pytest.mark.parametrize(("key", "which"), TAKEN, ids=[t[0] for t in TAKEN])
def test_a_taken_port_stops_the_start_naming_its_key(tmp_path, key, which):
    port, metrics, grpc = pick_port_pair(), free_port(), free_port()
    taken = which(port, metrics, grpc)
    store = tmp_path / "store"
    with held(taken):
        res = run_broker(["--store", str(store), "--port", str(port), "--metrics-port", str(metrics),
                          "--set", f"grpcListenPort={grpc}"])
    assert res.returncode == 1
    assert_one_line(res, key, taken, store)


ENVOY_TAKEN = [t for t in TAKEN if t[0] in ("listenPort", "haListenPort", "grpcListenPort")]


@pytest.mark.parametrize(("key", "which"), ENVOY_TAKEN, ids=[t[0] for t in ENVOY_TAKEN])
def test_a_taken_port_stops_the_envoy_hosted_broker_before_envoy_starts(tmp_path, key, which):
    port, grpc = pick_port_pair(), free_port()
    taken = which(port, 0, grpc)
    store = tmp_path / "store"
    with held(taken):
        res = run_broker(["--store", str(store), "--port", str(port), "--grpc-server-stack", "envoy",
                          "--set", f"grpcListenPort={grpc}"])
    assert res.returncode == 1
    assert_one_line(res, key, taken, store)
    assert "envoy" not in res.stderr.lower()  # refused by the launcher's probe: no Envoy ran


def test_the_derived_grpc_port_taken_names_grpc_listen_port(tmp_path):
    port = pick_port_with_grpc()
    store = tmp_path / "store"
    with held(port - GRPC_PORT_OFFSET):
        res = run_broker(["--store", str(store), "--port", str(port)])
    assert_one_line(res, "grpcListenPort", port - GRPC_PORT_OFFSET, store)


# two keys given one port: refused as a configuration error (exit 2) naming the later key and the port
SAME = [
    ("grpcListenPort", lambda p: {"grpcListenPort": p + 1}, "haListenPort"),  # the default HA port
    ("grpcListenPort", lambda p: {"grpcListenPort": p}, "listenPort"),
    ("haListenPort", lambda p: {"haListenPort": p - 2}, "listenPort-2"),
    ("metricsPort", lambda p: {"metricsPort": p + 1}, "haListenPort"),
]


@pytest.mark.parametrize(("key", "values", "other"), SAME, ids=[f"{s[0]}={s[2]}" for s in SAME])
def test_two_keys_on_one_port_stop_the_start(tmp_path, key, values, other):
    port = pick_port_pair()
    store = tmp_path / "store"
    given = values(port)
    res = run_broker(["--store", str(store), "--port", str(port), *(f"--set={k}={v}" for k, v in given.items())])
    assert res.returncode == 2
    assert_one_line(res, key, next(iter(given.values())), store)
    assert other in error_lines(res.stderr)[0]


def test_namesrv_taken_port_is_one_line(tmp_path):
    port = free_port()
    with held(port):
        res = subprocess.run([sys.executable, "-m", "server.cluster.namesrv", "--port", str(port)], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    errors = error_lines(res.stderr)
    assert len(errors) == 1 and "listenPort" in errors[0] and str(port) in errors[0], res.stderr


def test_two_brokers_given_only_their_ports_both_run(tmp_path):
    """The README's cluster recipe shape: a name server and two brokers, each given its own --port and
    nothing else; each derives its gRPC (port - 1795), HA (port + 1) and VIP (port - 2) ports."""
    ns = NamesrvProcess(tmp_path / "ns").start()
    brokers = [BrokerProcess(tmp_path / name, port=pick_port_with_grpc(),
                             config={"grpcListenPort": -1, "namesrvAddr": ns.addr, "brokerName": name})
               for name in ("broker-a", "broker-b")]
    try:
        for b in brokers:
            b.start()
        for b in brokers:
            for p in (b.port, b.port - 2, b.port + 1, b.port - GRPC_PORT_OFFSET):  # each one listening
                socket.create_connection((HOST, p), timeout=5).close()
            wire.create_topic(b.addr, "PortsT", 1)
    finally:
        for b in brokers:
            if b.running:
                b.stop()
        ns.stop()


def test_the_harness_knows_a_lost_port_race_from_a_broker_that_will_not_start(tmp_path):
    """tests/conftest.py's broker_factory starts a broker again on new ports only when the broker refused a port the
    harness picked (another process bound it first); any other failed start stays a failure."""
    raced = BrokerProcess(tmp_path / "raced", ready_timeout=20)
    with held(raced.port + 1), pytest.raises(AssertionError):
        raced.start()
    assert raced.lost_harness_port()
    ha_port = pick_port_pair()
    chosen = BrokerProcess(tmp_path / "chosen", config={"haListenPort": ha_port}, ready_timeout=20)
    with held(ha_port), pytest.raises(AssertionError):
        chosen.start()
    assert not chosen.lost_harness_port()  # the test chose that port: its refusal is the test's to judge
    broken = BrokerProcess(tmp_path / "broken", config={"messageDelayLevel": "nonsense"}, ready_timeout=20)
    with pytest.raises(AssertionError):
        broken.start()
    assert not broken.lost_harness_port()
