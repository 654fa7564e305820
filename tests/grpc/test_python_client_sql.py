"""SQL92 FilterExpressions over gRPC: Apache's RocketMQ 5 Python client 5.1.2 (tests/interop/rmq5_agent.py)
receives only the messages whose properties match, a scheduled message filtered on delivery like any other,
and a bad expression or a broker without enablePropertyFilter answers ILLEGAL_FILTER_EXPRESSION."""

from __future__ import annotations

import pytest

from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from tests.grpc.conftest import grpc_broker, uniq
from tests.grpc.raw import RawClient

pytestmark = [pytest.mark.interop]


@pytest.fixture
def sql_broker(broker_factory):
    return grpc_broker(broker_factory, {"enablePropertyFilter": "true"})


def test_simple_consumer_with_sql92_receives_only_matching(sql_broker, agents):
    topic, group = uniq("T5S"), uniq("G5S")
    agents.run_rmq5("produce", sql_broker, topic=topic, count=2, body_prefix="eu-big", tag="o",
                    prop=["region=eu", "amount=500"])
    agents.run_rmq5("produce", sql_broker, topic=topic, count=2, body_prefix="eu-small", tag="o",
                    prop=["region=eu", "amount=5"])
    agents.run_rmq5("produce", sql_broker, topic=topic, count=2, body_prefix="us-big", tag="o",
                    prop=["region=us", "amount=900"])
    # a timer message (delivery in 2 s) that matches: delivered to the topic, then filtered like any other
    agents.run_rmq5("produce", sql_broker, topic=topic, count=1, body_prefix="eu-late", tag="o",
                    prop=["region=eu", "amount=700"], deliver_in=2)
    c = agents.run_rmq5("simple", sql_broker, group=group, topic=topic, until_count=3, max_seconds=30,
                        sql="region = 'eu' AND amount > 100")
    assert sorted(e["body"] for e in c.of("received")) == ["eu-big0", "eu-big1", "eu-late0"]
    assert all(e["properties"]["region"] == "eu" for e in c.of("received"))


async def _receive_status(addr: str, group: str, topic: str, expression: str) -> int:
    c = RawClient(addr)
    try:
        req = spb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=1,
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
                                        filter_expression=pb.FilterExpression(type=pb.SQL, expression=expression))
        req.invisible_duration.seconds = 30
        req.long_polling_timeout.FromMilliseconds(200)
        code = -1
        async for r in c.stub.ReceiveMessage(req, timeout=10):
            if r.HasField("status"):
                code = r.status.code
        return code
    finally:
        await c.close()


async def _send(addr: str, topic: str) -> None:
    c = RawClient(addr)
    try:
        assert (await c.send(topic, b"x")).status.code == pb.OK
    finally:
        await c.close()


async def test_bad_sql_or_filter_off_is_illegal_filter_expression(sql_broker, gbroker):
    topic, group = uniq("T5S"), uniq("G5S")
    await _send(sql_broker.grpc_addr, topic)
    assert await _receive_status(sql_broker.grpc_addr, group, topic, "a >") == pb.ILLEGAL_FILTER_EXPRESSION
    assert await _receive_status(sql_broker.grpc_addr, group, topic, "a > 1") == pb.MESSAGE_NOT_FOUND
    await _send(gbroker.grpc_addr, topic)
    assert await _receive_status(gbroker.grpc_addr, group, topic, "a > 1") == pb.ILLEGAL_FILTER_EXPRESSION
