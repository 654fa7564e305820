"""Routes, sends (V1, V2, batch) and pulls against an in-process broker over real sockets."""

import asyncio
import json
import re
import time

from server.broker import BrokerController
from tests.server.helpers import SEND_BATCH, SEND_MESSAGE, SEND_MESSAGE_V2, pull, send, send_ext, until
from tests.server.raw import RawClient, decode_records, encode_batch, props

ROUTE = 105


async def test_route_for_tbw102_and_unknown_topic(broker_ctl: BrokerController, client: RawClient):
    r = await client.invoke(ROUTE, {"topic": "TBW102"})
    assert r.code == 0
    route = json.loads(r.body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": broker_ctl.config.broker_addr}
    q = route["queueDatas"][0]
    assert (q["perm"], q["readQueueNums"], q["writeQueueNums"]) == (7, 8, 8)
    missing = await client.invoke(ROUTE, {"topic": "NoSuchTopic"})
    assert missing.code == 17 and missing.body == b""


async def test_route_key_quoting_follows_request_version(broker_ctl: BrokerController, client: RawClient):
    addr = broker_ctl.config.broker_addr
    old = await client.invoke(ROUTE, {"topic": "TBW102"}, version=333)
    assert f'"brokerAddrs":{{0:"{addr}"}}' in old.body.decode()
    std = await client.invoke(ROUTE, {"topic": "TBW102", "acceptStandardJsonOnly": "true"}, version=333)
    assert f'"brokerAddrs":{{"0":"{addr}"}}' in std.body.decode()
    assert isinstance(json.loads(std.body)["queueDatas"][0]["perm"], int)


async def test_send_auto_creates_topic_and_pull_filters_by_tag(broker_ctl: BrokerController, client: RawClient):
    r1 = await send(client, "Orders", b"one", tags="TagA", keys="k1 k2", qid=0, code=SEND_MESSAGE_V2)
    r2 = await send(client, "Orders", b"two", tags="TagB", qid=0, code=SEND_MESSAGE)
    assert (r1.code, r2.code) == (0, 0), (r1.remark, r2.remark)
    for r in (r1, r2):
        assert set(r.ext) >= {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
        assert re.fullmatch(r"[0-9A-F]{32}", r.ext["msgId"])
        assert r.ext["TRACE_ON"] == "true" and r.ext["MSG_REGION"] == "DefaultRegion"
    assert (r1.ext["queueOffset"], r2.ext["queueOffset"]) == ("0", "1")
    route = json.loads((await client.invoke(ROUTE, {"topic": "Orders"})).body)
    assert route["queueDatas"][0]["writeQueueNums"] == 4  # min(client's 4, TBW102's 8)

    all_msgs = await pull(client, "G1", "Orders", 0, 0)
    assert all_msgs.code == 0 and all_msgs.remark == "FOUND"
    recs = decode_records(all_msgs.body)
    assert [m["body"] for m in recs] == [b"one", b"two"]
    assert recs[0]["props"]["CLUSTER"] == "DefaultCluster" and "WAIT" not in recs[0]["props"]
    assert recs[0]["props"]["KEYS"] == "k1 k2" and recs[0]["props"]["UNIQ_KEY"]
    host, port = broker_ctl.config.broker_addr.split(":")
    assert recs[0]["store_host"] == (host, int(port))
    assert all_msgs.ext["nextBeginOffset"] == "2" and all_msgs.ext["maxOffset"] == "2"
    assert all_msgs.ext["minOffset"] == "0" and all_msgs.ext["suggestWhichBrokerId"] == "0"

    only_b = await pull(client, "G1", "Orders", 0, 0, sub="TagB || TagC")
    assert [m["body"] for m in decode_records(only_b.body)] == [b"two"]
    none = await pull(client, "G1", "Orders", 0, 0, sub="TagZ")
    assert none.code == 20 and none.ext["nextBeginOffset"] == "2" and none.body == b""
    at_end = await pull(client, "G1", "Orders", 0, 2)
    assert at_end.code == 19 and at_end.remark == "OFFSET_OVERFLOW_ONE"
    beyond = await pull(client, "G1", "Orders", 0, 9)
    assert beyond.code == 21 and beyond.ext["nextBeginOffset"] == "2"
    empty_q = await pull(client, "G1", "Orders", 3, 0)
    assert empty_q.code == 19 and set(empty_q.ext) >= {"nextBeginOffset", "minOffset", "maxOffset"}


async def test_batch_via_320_and_via_310_with_m(broker_ctl: BrokerController, client: RawClient):
    items = [(b"b0", props(TAGS="T0", UNIQ_KEY="U0")), (b"b1", props(TAGS="T1", UNIQ_KEY="U1"))]
    r = await client.invoke(SEND_BATCH, send_ext("Batchy", props(WAIT="true"), 1, batch=True),
                            encode_batch(items))
    assert r.code == 0, r.remark
    assert len(r.ext["msgId"].split(",")) == 2 and r.ext["queueOffset"] == "0"
    r2 = await client.invoke(SEND_MESSAGE_V2, send_ext("Batchy", "", 1, batch=True),
                             encode_batch([(b"b2", props(UNIQ_KEY="U2"))]))
    assert r2.code == 0 and r2.ext["queueOffset"] == "2"
    recs = decode_records((await pull(client, "G", "Batchy", 1, 0)).body)
    assert [(m["body"], m["queue_offset"]) for m in recs] == [(b"b0", 0), (b"b1", 1), (b"b2", 2)]
    assert recs[1]["props"]["TAGS"] == "T1" and recs[1]["props"]["CLUSTER"] == "DefaultCluster"
    t1 = await pull(client, "G", "Batchy", 1, 0, sub="T1")
    assert [m["body"] for m in decode_records(t1.body)] == [b"b1"]
    delayed = await client.invoke(SEND_BATCH, send_ext("Batchy", props(DELAY="2"), 1, batch=True),
                                  encode_batch(items))
    assert delayed.code == 13


async def test_long_poll_is_woken_by_a_send(broker_ctl: BrokerController, client: RawClient):
    await send(client, "Poll", b"seed", qid=0)
    other = await RawClient.connect(broker_ctl.config.broker_addr)
    try:
        held = asyncio.ensure_future(pull(client, "GP", "Poll", 0, 1, suspend_ms=60_000, timeout=90))
        await until(lambda: broker_ctl.pull_hold.held_count == 1, 30)  # the pull is parked, not answered
        assert not held.done()
        r = await send(other, "Poll", b"wake", qid=0)
        assert r.code == 0
        resp = await asyncio.wait_for(held, 30)  # < the 60 s suspend: answered by the send's wake-up
        assert resp.code == 0 and [m["body"] for m in decode_records(resp.body)] == [b"wake"]
    finally:
        await other.close()


async def test_long_poll_times_out_with_pull_not_found(broker_ctl: BrokerController, client: RawClient):
    await send(client, "Quiet", b"x", qid=0)
    t0 = time.monotonic()
    r = await pull(client, "GQ", "Quiet", 0, 1, suspend_ms=300, timeout=30)  # the client timeout: a hang guard
    assert r.code == 19
    assert time.monotonic() - t0 >= 0.25  # held for its suspend time, then answered PULL_NOT_FOUND


async def test_commit_offset_flag_stores_the_offset(broker_ctl: BrokerController, client: RawClient):
    await send(client, "Commit", b"x", qid=0)
    await pull(client, "GC", "Commit", 0, 0, commit_offset=7)
    r = await client.invoke(14, {"consumerGroup": "GC", "topic": "Commit", "queueId": "0"})
    assert r.code == 0 and r.ext["offset"] == "7"


async def test_retry_topic_send_past_max_goes_to_dlq(broker_ctl: BrokerController, client: RawClient):
    ext = send_ext("%RETRY%GR", props(RETRY_TOPIC="Orig", DELAY="5"), 0, reconsume=3, max_reconsume=3)
    r = await client.invoke(SEND_MESSAGE_V2, ext, b"dead")
    assert r.code == 0, r.remark
    recs = decode_records((await pull(client, "GR", "%DLQ%GR", 0, 0)).body)
    assert recs and recs[0]["body"] == b"dead" and recs[0]["props"]["DELAY"] == "0"



async def test_uniq_key_the_broker_assigns_names_broker_ip1(make_broker):
    """A producer that sends no UNIQ_KEY gets one from the broker, with brokerIP1 as its host part."""
    from tests.server.raw import RawClient

    b = await make_broker(broker_ip1="127.0.0.9")
    c = await RawClient.connect(f"127.0.0.1:{b.config.listen_port}")
    try:
        r = await send(c, "NoKey", b"x", qid=0)
        assert r.code == 0
        [rec] = decode_records((await pull(c, "G", "NoKey", 0, 0)).body)
        assert rec["props"]["UNIQ_KEY"][:8] == "7F000009"
    finally:
        await c.close()
