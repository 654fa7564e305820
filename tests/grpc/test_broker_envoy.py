"""The broker on Envoy (grpcServerStack=envoy, server/envoy_broker.py): one serving process, Envoy, with the whole
broker embedded; the process started (the launcher) prints the ready line naming Envoy's pid, passes SIGTERM on as a
graceful broker stop inside Envoy, and takes Envoy with it when killed. What the stacks share (send, receive, FIFO,
scheduled, transactions, TLS, kill -9 of pop state) runs on both in test_python_client / test_pop_durability /
test_node_client / test_security; this file holds what only the Envoy stack has."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from client import Message, Producer, PushConsumer
from tests.client.conftest import Collector
from tests.grpc.conftest import grpc_broker, uniq
from tests.helpers import wire
from tests.helpers.broker import wait_pid_gone
from tests.server.test_start_safety import error_lines, run_broker

pytestmark = [pytest.mark.interop]


def envoy_broker(broker_factory, config: dict | None = None):
    b = grpc_broker(broker_factory, config, stack="envoy")
    assert b.serving_pid is not None and b.serving_pid != b.proc.pid, b.ready_line
    assert "envoy" in os.path.basename(os.readlink(f"/proc/{b.serving_pid}/exe"))
    return b


async def send_4x(b, topic: str, count: int, prefix: str) -> None:
    async with Producer(uniq("PG"), b.namesrv) as p:
        for i in range(count):
            r = await p.send(Message(topic, f"{prefix}{i}".encode()))
            assert r.status.name == "SEND_OK", r


async def test_4x_and_5x_clients_then_sigterm_stops_the_broker_inside_envoy_gracefully(broker_factory, agents):
    b = envoy_broker(broker_factory)
    topic, group4, group5 = uniq("TE"), uniq("GE4"), uniq("GE5")
    b.create_topic(topic, queues=2)
    await send_4x(b, topic, 6, "r")  # 4.x remoting sends to the broker inside Envoy
    col = Collector()
    c = PushConsumer(group4, b.namesrv, listener=col, consume_from="first")
    c.subscribe(topic)
    async with c:
        await col.wait_for(6)
    assert sorted(col.bodies) == [f"r{i}".encode() for i in range(6)]
    got = agents.run_rmq5("simple", b, group=group5, topic=topic, until_count=6)  # 5.x over Envoy's gRPC port
    assert sorted(e["body"] for e in got.of("received")) == [f"r{i}" for i in range(6)]
    envoy = b.serving_pid
    b.stop()  # SIGTERM to the launcher: exit 0 asserted
    assert envoy is not None and wait_pid_gone(envoy, 0)
    assert not (b.store / "abort").exists()  # the store was shut down, not abandoned
    stderr = b.stderr_path.read_text()
    # the broker's own logs, written inside Envoy, reach the launcher's stderr
    assert '"broker.stopped"' in stderr and '"store.closed"' in stderr
    b.start()
    for q in range(2):  # the 4.x consumer's offsets were committed by the stop
        assert wire.consumer_offset(b.addr, group4, topic, q) == wire.max_offset(b.addr, topic, q)


async def test_kill_9_of_the_launcher_takes_envoy_and_nothing_is_lost(broker_factory, agents):
    b = envoy_broker(broker_factory)
    topic, group = uniq("TK"), uniq("GK")
    b.create_topic(topic, queues=2)
    await send_4x(b, topic, 20, "k")
    envoy = b.serving_pid
    b.kill()  # waits for Envoy too: PR_SET_PDEATHSIG (an orphan would hold the ports and the store)
    assert envoy is not None and wait_pid_gone(envoy, 0)
    assert (b.store / "abort").exists()
    b.start()
    got = agents.run_rmq5("simple", b, group=group, topic=topic, until_count=20)
    assert sorted(e["body"] for e in got.of("received")) == sorted(f"k{i}" for i in range(20))


def test_a_start_that_fails_inside_envoy_is_one_line_and_its_exit_code(broker_factory):
    b = envoy_broker(broker_factory)
    res = run_broker(["--store", str(b.store), "--port", str(b.port + 10), "--grpc-server-stack", "envoy",
                      "--set", f"grpcListenPort={b.grpc_port + 10}"])
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    errors = error_lines(res.stderr)
    assert len(errors) == 1 and "broker.store_locked" in errors[0], res.stderr
    assert "ready on" not in res.stdout
    assert Path(b.store, "lock").exists() and b.running  # the first broker still holds its store


def test_envoy_killed_ends_the_launcher_with_exit_1(broker_factory):
    b = envoy_broker(broker_factory)
    assert b.serving_pid is not None and b.proc is not None
    os.kill(b.serving_pid, signal.SIGKILL)  # the serving process dies; the launcher must not stay up serving nothing
    assert b.proc.wait(30) == 1
    assert '"envoy.exited"' in b.stderr_path.read_text()
