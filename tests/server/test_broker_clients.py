"""Heartbeats, consumer lists, notify, offsets rules and queue locks over real sockets."""

import asyncio
import json

from server.broker import BrokerController
from tests.server.helpers import pull, send
from tests.server.raw import RawClient

HEART_BEAT, UNREGISTER, CONSUMER_LIST, LOCK, UNLOCK = 34, 35, 38, 41, 42
QUERY_OFFSET, UPDATE_OFFSET, MAX_OFFSET, MIN_OFFSET, SEARCH_OFFSET, EARLIEST = 14, 15, 30, 31, 29, 32


def heartbeat(client_id: str, group: str, topic: str, sub: str = "*", version: int = 1, cpp: bool = False):
    if cpp:  # C++ style: ordinals, string subVersion, absent empty arrays
        sd: dict[str, object] = {"topic": topic, "subString": sub, "subVersion": str(version)}
        if sub != "*":
            sd["tagsSet"] = [t.strip() for t in sub.split("||")]
        cd = {"groupName": group, "consumeType": 1, "messageModel": 1, "consumeFromWhere": 0,
              "subscriptionDataSet": [sd]}
        return json.dumps({"clientID": client_id, "consumerDataSet": [cd]}).encode()
    return json.dumps({"clientID": client_id, "consumerDataSet": [{
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_PASSIVELY", "groupName": group,
        "messageModel": "CLUSTERING", "unitMode": False, "subscriptionDataSet": [
            {"classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": sub,
             "subVersion": version, "tagsSet": [] if sub == "*" else sub.split("||"), "topic": topic}]}],
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}]}).encode()


async def test_heartbeat_registers_and_second_consumer_triggers_notify(broker_ctl: BrokerController, client: RawClient):
    assert (await client.invoke(CONSUMER_LIST, {"consumerGroup": "GH"})).code == 1
    r = await client.invoke(HEART_BEAT, {}, heartbeat("10.0.0.1@1", "GH", "HT"))
    assert r.code == 0 and r.header["version"] >= 409
    first_notify = await asyncio.wait_for(client.requests.get(), 30)
    assert first_notify.code == 40 and first_notify.ext["consumerGroup"] == "GH"
    assert first_notify.header["flag"] & 2  # oneway
    second = await RawClient.connect(broker_ctl.config.broker_addr)
    try:
        r2 = await second.invoke(HEART_BEAT, {"Signature": "", "AccessKey": ""},
                                 heartbeat("10.0.0.2@2", "GH", "HT", cpp=True), language="CPP", version=333)
        assert r2.code == 0
        n1 = await asyncio.wait_for(client.requests.get(), 30)
        n2 = await asyncio.wait_for(second.requests.get(), 30)
        assert n1.ext["consumerGroup"] == n2.ext["consumerGroup"] == "GH"
        lst = await client.invoke(CONSUMER_LIST, {"consumerGroup": "GH"})
        assert lst.code == 0 and sorted(json.loads(lst.body)["consumerIdList"]) == ["10.0.0.1@1", "10.0.0.2@2"]
    finally:
        await second.close()
    # closing the second connection removes it and notifies the first
    closed_notify = await asyncio.wait_for(client.requests.get(), 30)
    assert closed_notify.code == 40
    lst = await client.invoke(CONSUMER_LIST, {"consumerGroup": "GH"})
    assert json.loads(lst.body)["consumerIdList"] == ["10.0.0.1@1"]
    # the retry topic exists now
    assert (await client.invoke(105, {"topic": "%RETRY%GH"})).code == 0
    await client.invoke(UNREGISTER, {"clientID": "10.0.0.1@1", "consumerGroup": "GH", "producerGroup": ""})
    assert (await client.invoke(CONSUMER_LIST, {"consumerGroup": "GH"})).code == 1


async def test_pull_without_subscription_flag_uses_the_heartbeat(broker_ctl: BrokerController, client: RawClient):
    await send(client, "HS", b"a", tags="A", qid=0)
    await send(client, "HS", b"b", tags="B", qid=0)
    no_group = await pull(client, "GS", "HS", 0, 0, sub=None)
    assert no_group.code == 24
    await client.invoke(HEART_BEAT, {}, heartbeat("c@1", "GS", "HS", sub="B", version=5))
    stale = await pull(client, "GS", "HS", 0, 0, sub=None, sub_version=6)
    assert stale.code == 25
    r = await pull(client, "GS", "HS", 0, 0, sub=None, sub_version=5)
    assert r.code == 0
    from tests.server.raw import decode_records
    assert [m["body"] for m in decode_records(r.body)] == [b"b"]
    other_topic = await pull(client, "GS", "Other", 0, 0, sub=None)
    assert other_topic.code in (17, 24)


async def test_offset_rules(broker_ctl: BrokerController, client: RawClient):
    ext = {"consumerGroup": "GO", "topic": "Off", "queueId": "0"}
    # a brand-new group on a young (or absent) queue starts at 0
    assert (await client.invoke(QUERY_OFFSET, ext)).ext["offset"] == "0"
    for i in range(3):
        await send(client, "Off", b"m%d" % i, qid=0)
    assert (await client.invoke(QUERY_OFFSET, ext)).ext["offset"] == "0"
    client.oneway(UPDATE_OFFSET, {**ext, "commitOffset": "2"})
    r = await client.invoke(UPDATE_OFFSET, {**ext, "queueId": "1", "commitOffset": "5"})
    assert r.code == 0
    assert (await client.invoke(QUERY_OFFSET, ext)).ext["offset"] == "2"
    assert (await client.invoke(QUERY_OFFSET, {**ext, "queueId": "1"})).ext["offset"] == "5"
    tq = {"topic": "Off", "queueId": "0"}
    assert (await client.invoke(MAX_OFFSET, tq)).ext["offset"] == "3"
    assert (await client.invoke(MIN_OFFSET, tq)).ext["offset"] == "0"
    assert (await client.invoke(MAX_OFFSET, {"topic": "Nope", "queueId": "0"})).ext["offset"] == "0"
    earliest = int((await client.invoke(EARLIEST, tq)).ext["timestamp"])
    assert earliest > 0
    assert (await client.invoke(SEARCH_OFFSET, {**tq, "timestamp": str(earliest - 10_000)})).ext["offset"] == "0"


async def test_lock_and_unlock(broker_ctl: BrokerController, client: RawClient):
    mqs = [{"brokerName": "broker-a", "queueId": q, "topic": "L"} for q in (0, 1)]
    body = json.dumps({"consumerGroup": "GL", "clientId": "c1", "mqSet": mqs}).encode()
    r = await client.invoke(LOCK, {}, body)
    assert r.code == 0 and len(json.loads(r.body)["lockOKMQSet"]) == 2
    other = json.dumps({"consumerGroup": "GL", "clientId": "c2", "mqSet": mqs}).encode()
    assert json.loads((await client.invoke(LOCK, {}, other)).body)["lockOKMQSet"] == []
    assert (await client.invoke(UNLOCK, {}, json.dumps(
        {"consumerGroup": "GL", "clientId": "c1", "mqSet": mqs[:1]}).encode())).code == 0
    got = json.loads((await client.invoke(LOCK, {}, other)).body)["lockOKMQSet"]
    assert got == [{"brokerName": "broker-a", "queueId": 0, "topic": "L"}]
