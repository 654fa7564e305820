"""Topic creation rules, view/query, runtime info, bad input, restart and SIGTERM."""

import json

import pytest

from server.broker import BrokerController
from tests.helpers import wire
from tests.server.helpers import SEND_MESSAGE_V2, pull, send, send_ext
from tests.server.raw import RawClient, decode_records

CREATE, VIEW, QUERY, RUNTIME = 17, 33, 12, 28


def create_ext(topic, queues=4, perm=6):
    return {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
            "writeQueueNums": str(queues), "perm": str(perm), "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0", "order": "false"}


async def test_create_topic_rules(broker_ctl: BrokerController, client: RawClient):
    assert (await client.invoke(CREATE, create_ext("Made", 3))).code == 0
    route = json.loads((await client.invoke(105, {"topic": "Made"})).body)
    assert route["queueDatas"][0]["readQueueNums"] == 3
    for bad in ("TBW102", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRACE_TOPIC"):
        r = await client.invoke(CREATE, create_ext(bad))
        assert r.code == 1 and "conflict with system topic" in (r.remark or ""), bad
    assert (await client.invoke(CREATE, create_ext("bad topic!"))).code == 1
    assert (await client.invoke(CREATE, create_ext("x" * 128))).code == 1
    read_only = await client.invoke(CREATE, create_ext("RO", 1, perm=4))
    assert read_only.code == 0
    assert (await send(client, "RO", b"x", qid=0)).code == 16


async def test_view_by_id_and_query_by_key(broker_ctl: BrokerController, client: RawClient):
    r = await send(client, "Look", b"needle", keys="order-42 other", qid=0)
    phys = int(r.ext["msgId"][16:], 16)
    v = await client.invoke(VIEW, {"offset": str(phys)})
    assert v.code == 0 and decode_records(v.body)[0]["body"] == b"needle"
    assert (await client.invoke(VIEW, {"offset": str(phys + 10_000_000)})).code == 1
    q = await client.invoke(QUERY, {"topic": "Look", "key": "order-42", "maxNum": "32", "beginTimestamp": "0",
                                    "endTimestamp": str(1 << 62)})
    assert q.code == 0 and [m["body"] for m in decode_records(q.body)] == [b"needle"]
    assert "indexLastUpdateTimestamp" in q.ext
    uniq = decode_records(v.body)[0]["props"]["UNIQ_KEY"]
    u = await client.invoke(QUERY, {"topic": "Look", "key": uniq, "maxNum": "1", "beginTimestamp": "0",
                                    "endTimestamp": str(1 << 62), "_UNIQUE_KEY_QUERY": "true"})
    assert u.code == 0 and decode_records(u.body)[0]["body"] == b"needle"
    miss = await client.invoke(QUERY, {"topic": "Look", "key": "nope", "maxNum": "32", "beginTimestamp": "0",
                                       "endTimestamp": str(1 << 62)})
    assert miss.code == 22


async def test_runtime_info(broker_ctl: BrokerController, client: RawClient):
    await send(client, "RT", b"x", qid=0)
    r = await client.invoke(RUNTIME)
    table = json.loads(r.body)["table"]
    assert table["brokerVersion"] == "409"
    assert int(table["msgPutTotalTodayNow"]) >= 1
    assert int(table["commitLogMaxOffset"]) > int(table["commitLogMinOffset"]) >= 0
    assert all(isinstance(v, str) for v in table.values())


async def test_bad_input_codes(broker_ctl: BrokerController, client: RawClient):
    unknown = await client.invoke(9999)
    assert unknown.code == 3
    missing = await client.invoke(14, {"topic": "T", "queueId": "0"})
    assert missing.code == 1 and "consumerGroup" in (missing.remark or "")
    bad_num = await client.invoke(30, {"topic": "T", "queueId": "zero"})
    assert bad_num.code == 1 and "queueId" in (bad_num.remark or "")
    big = await client.invoke(SEND_MESSAGE_V2, send_ext("Big", "", 0), b"x" * (4 * 1024 * 1024 + 1))
    assert big.code == 13 and big.remark and set(big.ext) >= {"msgId", "queueId", "queueOffset", "MSG_REGION"}
    invalid = await client.invoke(SEND_MESSAGE_V2, send_ext("bad topic", "", 0), b"x")
    assert invalid.code == 1 and "illegal" in (invalid.remark or "")
    sched = await client.invoke(SEND_MESSAGE_V2, send_ext("SCHEDULE_TOPIC_XXXX", "", 0), b"x")
    assert sched.code == 16
    bad_queue = await client.invoke(SEND_MESSAGE_V2, send_ext("TBW102", "", 99), b"x")
    assert bad_queue.code == 1


async def test_restart_keeps_messages_offsets_and_topics(make_broker, tmp_path):
    store = tmp_path / "restart-store"
    b = await make_broker(store=store)
    port = b.config.listen_port
    c = await RawClient.connect(b.config.broker_addr)
    for i in range(5):
        assert (await send(c, "Keep", b"m%d" % i, qid=0)).code == 0
    await c.invoke(15, {"consumerGroup": "GK", "topic": "Keep", "queueId": "0", "commitOffset": "3"})
    await c.invoke(CREATE, create_ext("Created", 2))
    await c.close()
    await b.shutdown()
    b2 = await make_broker(store=store, port=port)
    c2 = await RawClient.connect(b2.config.broker_addr)
    try:
        r = await pull(c2, "GK", "Keep", 0, 0)
        assert [m["body"] for m in decode_records(r.body)] == [b"m%d" % i for i in range(5)]
        q = await c2.invoke(14, {"consumerGroup": "GK", "topic": "Keep", "queueId": "0"})
        assert q.ext["offset"] == "3"
        route = json.loads((await c2.invoke(105, {"topic": "Created"})).body)
        assert route["queueDatas"][0]["writeQueueNums"] == 2
        assert (await send(c2, "Keep", b"m5", qid=0)).ext["queueOffset"] == "5"
    finally:
        await c2.close()


@pytest.mark.process
def test_sigterm_exits_zero_and_restart_sees_everything(broker):
    """The console script as a subprocess (tests/helpers/broker.py harness)."""
    ext = send_ext("Durable", "UNIQ_KEY\x01U1\x02", 0)
    r = wire.invoke(broker.addr, SEND_MESSAGE_V2, ext, b"persisted")
    assert r.code == 0, r.remark
    wire.invoke(broker.addr, 15, {"consumerGroup": "GD", "topic": "Durable", "queueId": "0", "commitOffset": "1"})
    broker.restart(clean=True)  # SIGTERM, exit 0 asserted, then start on the same store and port
    assert wire.max_offset(broker.addr, "Durable", 0) == 1
    assert wire.consumer_offset(broker.addr, "GD", "Durable", 0) == 1
    from tests.server.helpers import pull_ext
    got = wire.invoke(broker.addr, 11, pull_ext("GD", "Durable", 0, 0))
    assert got.code == 0 and decode_records(got.body)[0]["body"] == b"persisted"
