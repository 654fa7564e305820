"""SQL92 FilterExpressions over gRPC: Apache's RocketMQ 5 Python client 5.1.2 (tests/interop/rmq5_agent.py)
receives only the messages whose properties match, a scheduled message filtered on delivery like any other,
and a bad expression or a broker without enablePropertyFilter answers ILLEGAL_FILTER_EXPRESSION."""

from __future__ import annotations

import json

import pytest

from codec.codes import RequestCode
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from tests.grpc.conftest import grpc_broker, uniq
from tests.grpc.raw import RawClient
from tests.server.helpers import send as send_remoting
from tests.server.raw import RawClient as RemotingClient

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


async def test_receive_with_the_bitmap_pre_filter_skips_units_without_the_commitlog(broker_factory):
    """enableCalcFilterBitMap=true: a gRPC ReceiveMessage with a SQL92 expression (registered by its first
    receive) gets exactly the matching messages; the units the group's bits rule out are counted as skipped and
    only the matching records are read (GET_BROKER_RUNTIME_INFO's filterBitmapSkipped, popCommitLogBytesRead)."""
    b = grpc_broker(broker_factory, {"enablePropertyFilter": "true", "enableCalcFilterBitMap": "true"})
    topic, group, expression = uniq("T5B"), uniq("G5B"), "region = 'eu'"
    await _send(b.grpc_addr, topic)  # creates the topic (auto-create); does not match
    c = RawClient(b.grpc_addr)
    raw = await RemotingClient.connect(b.addr)
    try:
        async def receive() -> tuple[int, list[pb.Message]]:
            req = spb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=16,
                                            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
                                            filter_expression=pb.FilterExpression(type=pb.SQL, expression=expression))
            req.invisible_duration.seconds = 30
            req.long_polling_timeout.FromMilliseconds(100)
            code, msgs = -1, []
            async for r in c.stub.ReceiveMessage(req, timeout=10):
                if r.HasField("status"):
                    code = r.status.code
                elif r.HasField("message"):
                    msgs.append(r.message)
            return code, msgs

        assert (await receive())[0] == pb.MESSAGE_NOT_FOUND  # registers the expression
        for i in range(200):
            r = await send_remoting(raw, topic, f"m{i}".encode(), region="eu" if i % 100 == 7 else "us")
            assert r.code == 0, r.remark
        got: list[bytes] = []
        while (answer := await receive())[1]:
            got += [m.body for m in answer[1]]
        assert sorted(got) == [b"m107", b"m7"]
        info = await raw.invoke(RequestCode.GET_BROKER_RUNTIME_INFO, {})
        table = json.loads(info.body)["table"]
        assert int(table["filterBitmapSkipped"]) == 198  # the first receive evaluated the topic-creating send
        assert 0 < int(table["popCommitLogBytesRead"]) < 4 * 400  # the two matching records only
    finally:
        await c.close()
        await raw.close()
