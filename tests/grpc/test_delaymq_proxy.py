"""delaymq-proxy (server/proxy/, `python -m server.proxy`) in front of TWO delaymq brokers registered with a
delaymq name server, driven by the official RocketMQ 5 Python client 5.1.2 (tests/interop/rmq5_agent.py):
routes name the proxy, sends spread over both brokers' queues, pop receive + ack through remoting
(POP_MESSAGE / ACK_MESSAGE), scheduled messages never early, and a kill -9 of one of two proxies the client
lists: it carries on through the other with nothing acknowledged lost (pop state lives in the brokers); the
same with two proxies sharing ONE port (--reuse-port, SO_REUSEPORT); the Node client 1.0.8 through it too."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from tests.grpc.conftest import uniq
from tests.grpc.raw import RawClient
from tests.grpc.test_apache_proxy import node_three_delayed_never_early, prepare
from tests.grpc.test_lite_and_dlq import settings_answer
from tests.helpers import wire
from tests.helpers.broker import REPO_ROOT, pick_port_pair
from tests.helpers.cluster import NamesrvProcess, route_brokers, wait_until

pytestmark = [pytest.mark.process, pytest.mark.interop]
GET_MAX_OFFSET = 30


@dataclass
class Endpoint:
    grpc_addr: str  # what the agents dial: one proxy, or several joined by ";"


@dataclass
class Cluster:
    namesrv: NamesrvProcess
    brokers: list


@pytest.fixture
def cluster(tmp_path, broker_factory, request):
    ns = NamesrvProcess(tmp_path / "namesrv").start()
    try:
        brokers = [broker_factory({"brokerName": name, "namesrvAddr": ns.addr}) for name in ("proxied-a", "proxied-b")]
        yield Cluster(ns, brokers)
    finally:
        for b in brokers if "brokers" in locals() else []:
            if b.running:
                b.stop()
        ns.stop()


def topic_on_both(c: Cluster, message_type: str = "NORMAL") -> tuple[str, str]:
    topic, group = uniq("DpT"), uniq("DpG")
    for b in c.brokers:
        asyncio.run(prepare(b.addr, topic, group, message_type))
    wait_until(lambda: route_brokers(c.namesrv.addr, topic) == {"proxied-a", "proxied-b"}, 15,
               "both brokers' queues of the topic in the name server's route", c.namesrv.diagnostics)
    return topic, group


def start_proxy(agents, c: Cluster, port: int | None = None, *extra: str, stack: str = "grpcio"):
    """`stack`: grpcServerStack (tests/grpc/conftest.py's proxy_stack)."""
    port = port or pick_port_pair()
    p = agents._start("delaymq-proxy", [sys.executable, "-m", "server.proxy", "--namesrv", c.namesrv.addr,
                                        "--grpc-port", str(port), "--host", "127.0.0.1",
                                        "--grpc-server-stack", stack, *extra])
    p.wait_for(lambda a: any("delaymq proxy ready on" in line for line in a.raw_lines), 30, "delaymq-proxy to start")
    return p, f"127.0.0.1:{port}"


def test_send_receive_ack_through_delaymq_proxy_over_two_brokers(cluster, agents, proxy_stack):
    topic, group = topic_on_both(cluster)
    _, addr = start_proxy(agents, cluster, stack=proxy_stack)
    proxy = Endpoint(addr)
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=8, tag="tagA", timeout=90)
    assert len(sent.of("sent")) == 8
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=8, tag="tagA", max_seconds=60,
                        timeout=90)
    got = c.of("received")
    assert sorted(e["body"] for e in got) == sorted(f"m{i}" for i in range(8))
    assert {e["id"] for e in got} == {e["id"] for e in sent.of("sent")}
    assert len(c.of("acked")) == 8
    # round robin over the route's queues: each broker stored half, each popped from its own broker
    for b in cluster.brokers:
        reply = wire.invoke(b.addr, GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
        assert reply.code == 0 and reply.ext["offset"] == "4", (b.addr, reply)
    again = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=1, max_seconds=5,
                            timeout=60, expect_code=3)
    assert again.of("received") == []


def test_node_client_sends_and_receives_through_delaymq_proxy_over_two_brokers(cluster, agents, proxy_stack):
    """Apache's RocketMQ 5 Node client 1.0.8 (tests/interop/node/rmq5.js) through the proxy: its Telemetry
    settings, send round robin over both brokers, a SimpleConsumer's receive + ack (body digests checked), and
    scheduled messages delivered not early."""
    topic, group = topic_on_both(cluster)
    _, addr = start_proxy(agents, cluster, stack=proxy_stack)
    proxy = Endpoint(addr)
    sent = agents.run_node5("produce", proxy, topic=topic, count=6, tag="tagA", body_prefix="n", timeout=90)
    assert [e["i"] for e in sent.of("sent")] == list(range(6))
    c = agents.run_node5("simple", proxy, group=group, topic=topic, until_count=6, tag="tagA", max_seconds=60,
                         timeout=90)
    got = c.of("received")
    assert sorted(e["body"] for e in got) == [f"n{i}" for i in range(6)]
    assert {e["id"] for e in got} == {e["id"] for e in sent.of("sent")}
    assert all(e["attempt"] == 1 and e["tag"] == "tagA" and e["corrupted"] is False for e in got), got
    assert len(c.of("acked")) == 6
    for b in cluster.brokers:  # each broker stored its half
        reply = wire.invoke(b.addr, GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
        assert reply.code == 0 and reply.ext["offset"] == "3", (b.addr, reply)
    again = agents.run_node5("simple", proxy, group=group, topic=topic, until_count=1, max_seconds=4,
                             timeout=60, expect_code=3)
    assert again.of("received") == []
    # scheduled messages over both brokers' timers, never early
    delayed, dgroup = topic_on_both(cluster, "DELAY")
    node_three_delayed_never_early(agents, proxy, delayed, dgroup)


def test_scheduled_messages_through_delaymq_proxy_never_arrive_early(cluster, agents, proxy_stack):
    topic, group = topic_on_both(cluster, "DELAY")
    _, addr = start_proxy(agents, cluster, stack=proxy_stack)
    proxy = Endpoint(addr)
    c = agents.rmq5("simple", proxy, group=group, topic=topic, until_count=4, max_seconds=60)
    c.wait_event("started", 60)
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=4, deliver_in=2, timeout=90)
    assert len(sent.of("sent")) == 4
    assert c.wait_exit(90) == 0, c.diagnostics()
    due = {e["id"]: e["deliver_s"] * 1000 for e in sent.of("sent")}
    got = c.of("received")
    assert sorted(e["body"] for e in got) == ["m0", "m1", "m2", "m3"]
    for e in got:  # never before its delivery time (the client sends whole seconds)
        assert e["t"] >= due[e["id"]], (e, due[e["id"]])


def test_kill_9_of_one_of_two_proxies_the_client_continues_through_the_other(cluster, agents, proxy_stack):
    topic, group = topic_on_both(cluster)
    (p1, a1), (p2, a2) = (start_proxy(agents, cluster, stack=proxy_stack),
                          start_proxy(agents, cluster, stack=proxy_stack))
    both = Endpoint(f"{a1};{a2}")
    c = agents.rmq5("simple", both, group=group, topic=topic, until_count=10, invisible=3, await_s=1,
                    retry_errors=True, max_seconds=90)
    c.wait_event("started", 60)
    first = agents.run_rmq5("produce", both, topic=topic, count=5, timeout=90)
    c.wait_for(lambda a: len({e["id"] for e in a.of("acked")}) >= 5, 60, "the first five acknowledged")
    # the client's channel uses the lowest of the addresses it lists (gRPC pick_first over the sorted list)
    victim = p1 if a1 < a2 else p2
    victim.kill()
    second = agents.run_rmq5("produce", both, topic=topic, count=5, body_prefix="n", timeout=90)
    assert c.wait_exit(120) == 0, c.diagnostics()
    sent = {e["id"] for e in first.of("sent")} | {e["id"] for e in second.of("sent")}
    assert len(sent) == 10
    assert {e["id"] for e in c.of("acked")} == sent  # every message acknowledged, none lost


def serving_pid(proxy) -> int:
    """The process that holds the proxy's connections: the proxy's own, or on the envoy stack the Envoy child its
    ready line names."""
    for line in proxy.raw_lines:
        m = re.search(r"delaymq proxy ready on .*\(envoy pid (\d+)\)", line)
        if m:
            return int(m.group(1))
    return int(proxy.proc.pid)


def test_envoy_killed_ends_the_proxy_launcher_with_exit_1(cluster, agents):
    """grpcServerStack=envoy: the launcher must not stay up serving nothing when its Envoy dies; it exits 1 (not
    the 0 of a requested stop) so that a supervisor restarts it."""
    p, _ = start_proxy(agents, cluster, stack="envoy")
    envoy = serving_pid(p)
    assert envoy != p.proc.pid
    os.kill(envoy, signal.SIGKILL)
    assert p.wait_exit(30) == 1, p.diagnostics()


def established_on(pid: int, port: int) -> int:
    """How many ESTABLISHED TCP connections process `pid` holds with local port `port` (Linux /proc: the
    socket inodes of its fds, looked up in /proc/net/tcp{,6})."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed between listing and reading
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port and f[9] in inodes:
                n += 1
    return n


def test_two_proxies_share_one_port_with_reuse_port_and_a_kill_9_loses_nothing(cluster, agents, proxy_stack):
    """--reuse-port (reusePort, SO_REUSEPORT): two proxies listen on ONE port; the client lists that one
    address. The proxy holding the consumer's connection is killed -9: the client reconnects to the same
    address, the kernel hands the connection to the survivor, and every message is acknowledged."""
    topic, group = topic_on_both(cluster)
    port = pick_port_pair()
    (p1, a1), (p2, _) = start_proxy(agents, cluster, port, "--reuse-port", stack=proxy_stack), \
        start_proxy(agents, cluster, port, "--reuse-port", stack=proxy_stack)
    one = Endpoint(a1)
    c = agents.rmq5("simple", one, group=group, topic=topic, until_count=10, invisible=3, await_s=1,
                    retry_errors=True, max_seconds=90)
    c.wait_event("started", 60)
    first = agents.run_rmq5("produce", one, topic=topic, count=5, timeout=90)
    c.wait_for(lambda a: len({e["id"] for e in a.of("acked")}) >= 5, 60, "the first five acknowledged")
    holders = [p for p in (p1, p2) if established_on(serving_pid(p), port)]
    assert holders, "neither proxy holds the consumer's connection"
    victim = holders[0]
    survivor = p2 if victim is p1 else p1
    victim.kill()
    second = agents.run_rmq5("produce", one, topic=topic, count=5, body_prefix="n", timeout=90)
    assert c.wait_exit(120) == 0, c.diagnostics()
    sent = {e["id"] for e in first.of("sent")} | {e["id"] for e in second.of("sent")}
    assert len(sent) == 10
    assert {e["id"] for e in c.of("acked")} == sent  # every message acknowledged, none lost
    assert survivor.proc.poll() is None


def test_reuse_port_still_refuses_a_port_held_without_it(proxy_stack):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        taken = subprocess.run([sys.executable, "-m", "server.proxy", "--namesrv", "127.0.0.1:9", "--grpc-port",
                                str(port), "--host", "127.0.0.1", "--reuse-port", "--grpc-server-stack",
                                proxy_stack], cwd=REPO_ROOT,
                               capture_output=True, timeout=60, text=True)
    assert taken.returncode == 1, taken.stderr
    [line] = taken.stderr.strip().splitlines()
    assert "grpcServerPort" in line and "Traceback" not in taken.stderr


def test_routes_name_the_proxy_and_bad_requests_answer_with_their_codes(cluster, agents, proxy_stack):
    topic, group = topic_on_both(cluster)
    _, addr = start_proxy(agents, cluster, stack=proxy_stack)
    host, port = addr.rsplit(":", 1)

    async def probe() -> None:
        c = RawClient(addr)
        try:
            r = await c.stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=10)
            assert r.status.code == pb.OK, r.status
            assert {q.broker.name for q in r.message_queues} == {"proxied-a", "proxied-b"}
            assert {(a.host, a.port) for q in r.message_queues for a in q.broker.endpoints.addresses} \
                == {(host, int(port))}
            missing = await c.stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=uniq("None"))), timeout=10)
            assert missing.status.code == pb.TOPIC_NOT_FOUND, missing.status
            end = await c.stub.EndTransaction(spb.EndTransactionRequest(
                topic=pb.Resource(name=topic), transaction_id="not-one", resolution=pb.COMMIT), timeout=10)
            assert end.status.code == pb.INVALID_TRANSACTION_ID, end.status
            off = await c.stub.QueryOffset(spb.QueryOffsetRequest(), timeout=10)
            assert off.status.code == pb.ILLEGAL_TOPIC, off.status
            ack = await c.stub.AckMessage(spb.AckMessageRequest(
                topic=pb.Resource(name=topic), group=pb.Resource(name=group),
                entries=[spb.AckMessageEntry(message_id="x", receipt_handle="not a receipt")]), timeout=10)
            assert ack.status.code == pb.INVALID_RECEIPT_HANDLE, ack.status
        finally:
            await c.close()
    asyncio.run(probe())


def test_a_taken_port_or_a_missing_name_server_stops_the_proxy_with_one_line_naming_the_key(tmp_path, proxy_stack):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        taken = subprocess.run([sys.executable, "-m", "server.proxy", "--namesrv", "127.0.0.1:9", "--grpc-port",
                                str(port), "--host", "127.0.0.1", "--grpc-server-stack", proxy_stack],
                               cwd=REPO_ROOT, capture_output=True, timeout=60, text=True)
    assert taken.returncode == 1, taken.stderr
    [line] = taken.stderr.strip().splitlines()
    assert "grpcServerPort" in line and "Traceback" not in taken.stderr
    bad = subprocess.run([sys.executable, "-m", "server.proxy", "--grpc-port", "0"], cwd=REPO_ROOT,
                         capture_output=True, timeout=60, text=True)
    assert bad.returncode == 2, bad.stderr
    [line] = bad.stderr.strip().splitlines()
    assert "namesrvAddr" in line


async def route_types(addr: str, topic: str) -> list[list[int]]:
    """The distinct accepted message types (sorted) of the topic's route's queues."""
    c = RawClient(addr)
    try:
        r = await c.stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=10)
        assert r.status.code == pb.OK, r.status
        return sorted(list(t) for t in {tuple(sorted(q.accept_message_types)) for q in r.message_queues})
    finally:
        await c.close()


async def consumer_settings(addr: str, group: str, topic: str) -> pb.Settings:
    """The Settings a Telemetry session of a simple consumer of `group` subscribing `topic` is answered with."""
    c = RawClient(addr)
    try:
        return await settings_answer(c, group, topic)
    finally:
        await c.close()


def test_proxy_routes_accept_the_topics_message_type_and_fifo_groups_get_fifo_settings_as_the_broker_does(
        tmp_path, broker_factory, agents, proxy_stack):
    """Issue 24: through the proxy a topic's route accepts only its message.type attribute's type (read from a
    broker with GET_TOPIC_CONFIG), and an orderly group's consumer Settings say fifo (its consumeMessageOrderly,
    GET_SUBSCRIPTIONGROUP_CONFIG); each answer is the one the broker's own gRPC endpoint gives."""
    ns = NamesrvProcess(tmp_path / "namesrv").start()
    grpc_ports = [pick_port_pair(), pick_port_pair()]
    brokers = [broker_factory({"brokerName": name, "namesrvAddr": ns.addr, "grpcListenPort": port})
               for name, port in zip(("proxied-a", "proxied-b"), grpc_ports, strict=True)]
    try:
        c = Cluster(ns, brokers)
        topics = {t: topic_on_both(c, t) for t in ("DELAY", "FIFO", "TRANSACTION", "NORMAL", "UNSPECIFIED")}
        ordered, _ = topics["FIFO"]
        fifo_group = uniq("DpFifoG")
        for b in brokers:
            asyncio.run(prepare(b.addr, ordered, fifo_group, "FIFO", orderly=True))
        _, addr = start_proxy(agents, c, stack=proxy_stack)
        broker_endpoint = f"127.0.0.1:{grpc_ports[0]}"
        every = sorted([pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION])
        expected = {"DELAY": [[pb.DELAY]], "FIFO": [[pb.FIFO]], "TRANSACTION": [[pb.TRANSACTION]],
                    "NORMAL": [[pb.NORMAL]], "UNSPECIFIED": [every]}
        for message_type, (topic, _) in topics.items():
            through_proxy = asyncio.run(route_types(addr, topic))
            assert through_proxy == expected[message_type], (message_type, through_proxy)
            assert through_proxy == asyncio.run(route_types(broker_endpoint, topic)), message_type
        for group, topic, fifo in ((fifo_group, ordered, True), (topics["NORMAL"][1], topics["NORMAL"][0], False)):
            for endpoint in (addr, broker_endpoint):
                settings = asyncio.run(consumer_settings(endpoint, group, topic))
                assert settings.subscription.fifo is fifo, (endpoint, group, settings)
                assert settings.backoff_policy.max_attempts == 17, (endpoint, settings)  # retryMaxTimes 16 + 1
    finally:
        for b in brokers:
            if b.running:
                b.stop()
        ns.stop()


def test_unknown_methods_and_call_deadlines_answer_alike_on_both_stacks(cluster, agents, proxy_stack):
    """What the gRPC server stack itself answers (grpcio's, or server.grpc.asgi_endpoint's on Envoy): an unknown
    method UNIMPLEMENTED; a ReceiveMessage whose long polling (20 s) outlasts the call's deadline (3 s) answers
    its status before the deadline (the handler reads the deadline from its context), not DEADLINE_EXCEEDED."""
    topic, group = topic_on_both(cluster)
    _, addr = start_proxy(agents, cluster, stack=proxy_stack)

    async def probe() -> None:
        c = RawClient(addr)
        try:
            unknown: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = c.channel.unary_unary(
                "/apache.rocketmq.v2.MessagingService/NoSuchMethod")
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await unknown(b"", timeout=10)
            assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
            req = spb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=4,
                                            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1))
            req.invisible_duration.seconds = 30
            req.long_polling_timeout.seconds = 20
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            answers = [r async for r in c.stub.ReceiveMessage(req, timeout=3)]
            took = loop.time() - t0
            assert [r.status.code for r in answers if r.HasField("status")] == [pb.MESSAGE_NOT_FOUND], answers
            assert took < 3.0, took
        finally:
            await c.close()
    asyncio.run(probe())
