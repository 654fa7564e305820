"""GET_TOPIC_CONFIG (351) / GET_SUBSCRIPTIONGROUP_CONFIG (352), and the topics named after the broker's cluster
and the broker, as Apache's 5.x proxy reads them from a broker process."""

from __future__ import annotations

import json

import pytest

from codec.codes import RequestCode, ResponseCode
from tests.server.raw import RawClient

pytestmark = pytest.mark.process

ROUTE = 105


async def test_one_topic_and_one_group_config(broker_factory):
    b = broker_factory({"brokerClusterName": "CfgCluster", "brokerName": "cfg-broker"})
    c = await RawClient.connect(b.addr)
    try:
        r = await c.invoke(RequestCode.GET_TOPIC_CONFIG, {"topic": "TBW102"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        d = json.loads(r.body)
        assert d["topicName"] == "TBW102" and d["readQueueNums"] >= 1 and "perm" in d
        r = await c.invoke(RequestCode.GET_TOPIC_CONFIG, {"topic": "NoSuchTopic"})
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in (r.remark or "")
        r = await c.invoke(RequestCode.GET_TOPIC_CONFIG, {})
        assert r.code == ResponseCode.SYSTEM_ERROR and "topic" in (r.remark or "")

        body = json.dumps({"groupName": "CfgG", "consumeMessageOrderly": True, "retryMaxTimes": 3}).encode()
        assert (await c.invoke(200, {}, body)).code == ResponseCode.SUCCESS
        r = await c.invoke(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "CfgG"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        d = json.loads(r.body)
        assert (d["groupName"], d["consumeMessageOrderly"], d["retryMaxTimes"]) == ("CfgG", True, 3)
        r = await c.invoke(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "NoSuchGroup"})
        assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "NoSuchGroup" in (r.remark or "")

        # a route lookup of the cluster's name (how Apache's proxy finds the brokers to create its topics on)
        for topic in ("CfgCluster", "cfg-broker"):
            r = await c.invoke(ROUTE, {"topic": topic})
            assert r.code == ResponseCode.SUCCESS, (topic, r.remark)
            assert "cfg-broker" in r.body.decode()
    finally:
        await c.close()


def _create(topic: str, attributes: str | None) -> dict[str, str]:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
           "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
    if attributes is not None:
        ext["attributes"] = attributes
    return ext


async def _attributes(c: RawClient, topic: str) -> dict[str, str]:
    r = await c.invoke(RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
    assert r.code == ResponseCode.SUCCESS, r.remark
    attributes: dict[str, str] = json.loads(r.body).get("attributes", {})
    return attributes


async def test_message_type_attribute_is_set_changed_removed_and_survives_kill_9(broker_factory):
    b = broker_factory()
    c = await RawClient.connect(b.addr)
    try:
        assert (await c.invoke(17, _create("AttrT", "+message.type=DELAY"))).code == ResponseCode.SUCCESS
        assert await _attributes(c, "AttrT") == {"message.type": "DELAY"}
        for bad, words in (("+message.type=BOGUS", "BOGUS"), ("+queue.type=BatchCQ", "queue.type"),
                           ("message.type=FIFO", "format"), ("+message.type=FIFO,+message.type=DELAY", "duplication")):
            r = await c.invoke(17, _create("AttrT", bad))
            assert r.code == ResponseCode.SYSTEM_ERROR and words in (r.remark or ""), (bad, r.remark)
        assert await _attributes(c, "AttrT") == {"message.type": "DELAY"}  # a refused change changes nothing
        assert (await c.invoke(17, _create("AttrT", "+message.type=FIFO"))).code == ResponseCode.SUCCESS
        assert (await c.invoke(17, _create("AttrN", None))).code == ResponseCode.SUCCESS
        assert await _attributes(c, "AttrN") == {}
    finally:
        await c.close()
    b.kill()
    b.start()
    c = await RawClient.connect(b.addr)
    try:
        assert await _attributes(c, "AttrT") == {"message.type": "FIFO"}
        assert (await c.invoke(17, _create("AttrT", "-message.type"))).code == ResponseCode.SUCCESS
        assert await _attributes(c, "AttrT") == {}
    finally:
        await c.close()


async def test_in_broker_grpc_route_accepts_only_the_topics_message_type(broker_factory):
    from server.grpc.v2 import definition_pb2 as pb
    from server.grpc.v2 import service_pb2 as spb
    from tests.grpc.raw import RawClient as GrpcClient
    from tests.helpers.broker import pick_port_pair

    port = pick_port_pair()
    b = broker_factory({"grpcListenPort": port})
    c = await RawClient.connect(b.addr)
    g = GrpcClient(f"127.0.0.1:{port}")
    try:
        assert (await c.invoke(17, _create("RouteD", "+message.type=DELAY"))).code == ResponseCode.SUCCESS
        assert (await c.invoke(17, _create("RouteN", None))).code == ResponseCode.SUCCESS
        for topic, types in (("RouteD", [pb.DELAY]), ("RouteN", [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION])):
            r = await g.stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)))
            assert r.status.code == pb.OK, r.status.message
            assert [list(q.accept_message_types) for q in r.message_queues] == [types], topic
    finally:
        await g.close()
        await c.close()
