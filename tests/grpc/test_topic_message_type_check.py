"""enableTopicMessageTypeCheck (Apache 5.1.3's proxy key, default true; DefaultTopicMessageTypeValidator): a 5.x send
whose message type (from its properties: TRANSACTION, then DELAY, then FIFO, else NORMAL) is not its topic's
`message.type` is refused with MESSAGE_PROPERTY_CONFLICT_WITH_TYPE and Apache's message, by both endpoints of the
one MessagingService: the broker's own gRPC port and delaymq-proxy in front of the broker. Producers are told
the setting as publishing.validate_message_type, as Apache's proxy tells them. Raw stubs (tests/grpc/raw.py) and the
official Python client 5.1.2."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from tests.grpc.conftest import PROXY_STACKS, grpc_broker, uniq
from tests.grpc.raw import RawClient
from tests.grpc.test_apache_proxy import prepare
from tests.grpc.test_delaymq_proxy import Cluster, start_proxy
from tests.helpers.cluster import NamesrvProcess, route_brokers, wait_until

pytestmark = [pytest.mark.process, pytest.mark.interop]


@dataclass
class Endpoint:
    grpc_addr: str
    broker_addr: str  # the broker's remoting address (topics are made there)
    namesrv: str


@pytest.fixture(params=["broker", *(f"proxy-{stack}" for stack in PROXY_STACKS)])
def endpoint(request, tmp_path, broker_factory, agents) -> Iterator[Endpoint]:
    """The broker's own gRPC port, or delaymq-proxy (each grpcServerStack) in front of that broker (the same
    MessagingService)."""
    ns = NamesrvProcess(tmp_path / "namesrv").start()
    try:
        b = grpc_broker(broker_factory, {"brokerName": "typed", "namesrvAddr": ns.addr})
        if request.param == "broker":
            yield Endpoint(b.grpc_addr, b.addr, ns.addr)
        else:
            _, addr = start_proxy(agents, Cluster(ns, [b]), stack=request.param.removeprefix("proxy-"))
            yield Endpoint(addr, b.addr, ns.addr)
    finally:
        ns.stop()


def typed_topic(ep: Endpoint, message_type: str) -> str:
    topic = uniq(f"Ty{message_type[:3]}")
    asyncio.run(prepare(ep.broker_addr, topic, uniq("TyG"), message_type))
    wait_until(lambda: route_brokers(ep.namesrv, topic) == {"typed"}, 15, "the topic's route in the name server")
    return topic


def later() -> dict[str, object]:
    return {"delivery_timestamp": datetime.fromtimestamp(time.time() + 60, UTC)}


async def sends(addr: str, topic: str) -> dict[str, pb.Status]:
    """One send of each message type to `topic`: its status by type."""
    c = RawClient(addr)
    try:
        out = {}
        for name, props in (("NORMAL", {}), ("FIFO", {"message_type": pb.FIFO, "message_group": "g1"}),
                            ("DELAY", {"message_type": pb.DELAY, **later()})):
            out[name] = (await c.send(topic, name.encode(), **props)).status
        return out
    finally:
        await c.close()


async def publishing(addr: str, topic: str) -> pb.Publishing:
    """A producer's Telemetry settings answer: its publishing settings."""
    c = RawClient(addr)
    try:
        s = pb.Settings(client_type=pb.PRODUCER)
        s.publishing.topics.add(name=topic)
        call = c.stub.Telemetry(metadata=(("x-mq-client-id", uniq("raw-producer")),), timeout=10)
        await call.write(spb.TelemetryCommand(settings=s))
        reply = await call.read()
        await call.done_writing()
        call.cancel()
        assert isinstance(reply, spb.TelemetryCommand) and reply.status.code == pb.OK, reply
        return reply.settings.publishing
    finally:
        await c.close()


def test_a_send_whose_type_is_not_the_topics_is_refused_with_apaches_code_and_message(endpoint, agents):
    normal, delay = typed_topic(endpoint, "NORMAL"), typed_topic(endpoint, "DELAY")
    got = asyncio.run(sends(endpoint.grpc_addr, normal))
    assert got["NORMAL"].code == pb.OK, got
    for name in ("FIFO", "DELAY"):
        assert got[name].code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, got
        assert got[name].message == f"TopicMessageType validate failed, topic type is NORMAL, message type is {name}"
    got = asyncio.run(sends(endpoint.grpc_addr, delay))
    assert got["DELAY"].code == pb.OK, got
    assert (got["NORMAL"].code, got["NORMAL"].message) == (
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "TopicMessageType validate failed, topic type is DELAY, message "
                                                "type is NORMAL"), got
    assert got["FIFO"].code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, got

    # producers are told to check the route's accepted types themselves (publishing.validate_message_type, as
    # Apache's proxy tells them enableTopicMessageTypeCheck)
    assert asyncio.run(publishing(endpoint.grpc_addr, normal)).validate_message_type is True
    # the official Python client: a scheduled message to the NORMAL topic is refused, by the client itself (the
    # route it has says NORMAL) or, when it sends, by the endpoint; a plain one goes
    bad = agents.run_rmq5("produce", endpoint, topic=normal, count=1, deliver_in=30, keep_going=True, timeout=90)
    (err,) = bad.of("send_error")
    assert ("current message type not match with queue accept message types" in err["error"]
            or "TopicMessageType validate failed, topic type is NORMAL, message type is DELAY" in err["error"]), err
    assert bad.of("sent") == []
    ok = agents.run_rmq5("produce", endpoint, topic=normal, count=1, timeout=90)
    assert len(ok.of("sent")) == 1
    ok = agents.run_rmq5("produce", endpoint, topic=delay, count=1, deliver_in=30, timeout=90)
    assert len(ok.of("sent")) == 1


def test_enable_topic_message_type_check_false_lets_any_type_through(tmp_path, broker_factory, agents):
    ns = NamesrvProcess(tmp_path / "namesrv").start()
    try:
        b = grpc_broker(broker_factory, {"brokerName": "typed", "namesrvAddr": ns.addr,
                                         "enableTopicMessageTypeCheck": "false"})
        conf = tmp_path / "proxy.conf"
        conf.write_text("enableTopicMessageTypeCheck=false\n")
        _, addr = start_proxy(agents, Cluster(ns, [b]), None, "--config", str(conf))
        topic = typed_topic(Endpoint(b.grpc_addr, b.addr, ns.addr), "NORMAL")
        for grpc_addr in (b.grpc_addr, addr):
            got = asyncio.run(sends(grpc_addr, topic))
            assert {k: s.code for k, s in got.items()} == {"NORMAL": pb.OK, "FIFO": pb.OK, "DELAY": pb.OK}, got
            assert asyncio.run(publishing(grpc_addr, topic)).validate_message_type is False
    finally:
        ns.stop()
