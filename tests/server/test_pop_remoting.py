"""RocketMQ 5's pop codes over remoting (server/processors/pop.py) against a broker process, through the
tests' own raw client: POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME / PEEK / NOTIFICATION /
POLLING_INFO as Apache's proxy sends them, receipts as Apache's client rebuilds them, and kill -9."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from codec.codes import RequestCode, ResponseCode
from codec.pop_receipt import POP_ORDER_REVIVE_QUEUE, BatchAck, encode_batch_ack, parse_extra_info
from tests.server.helpers import send
from tests.server.raw import RawClient, RawRecord, Reply, decode_records

pytestmark = pytest.mark.process

CREATE_TOPIC = 17
POP, ACK, CHANGE = RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME


async def create_topic(c: RawClient, topic: str, queues: int = 2) -> None:
    r = await c.invoke(CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                                      "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
                                      "topicSysFlag": "0", "order": "false"})
    assert r.code == ResponseCode.SUCCESS, r.remark


async def pop(c: RawClient, group: str, topic: str, n: int = 32, invisible_ms: int = 60_000, poll_ms: int = 0,
              exp: str = "*", qid: int = -1, order: bool = False, init_mode: int = 0) -> Reply:
    ext: dict[str, Any] = {"consumerGroup": group, "topic": topic, "queueId": str(qid), "maxMsgNums": str(n),
                           "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms), "bornTime": "0",
                           "initMode": str(init_mode), "expType": "TAG", "exp": exp,
                           "order": "true" if order else "false"}
    return await c.invoke(POP, ext, timeout=poll_ms / 1000 + 10)


def popped(r: Reply) -> list[RawRecord]:
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return decode_records(r.body)


def ack_ext(group: str, rec: RawRecord, receipt: str | None = None) -> dict[str, str]:
    return {"consumerGroup": group, "topic": rec["topic"], "queueId": str(rec["queue_id"]),
            "extraInfo": receipt or rec["props"]["POP_CK"], "offset": str(rec["queue_offset"])}


async def ack(c: RawClient, group: str, rec: RawRecord, receipt: str | None = None) -> Reply:
    return await c.invoke(ACK, ack_ext(group, rec, receipt))


async def change(c: RawClient, group: str, rec: RawRecord, invisible_ms: int, receipt: str | None = None) -> Reply:
    return await c.invoke(CHANGE, {**ack_ext(group, rec, receipt), "invisibleTime": str(invisible_ms)})


def rebuilt_receipt(rec: RawRecord, r: Reply, broker_name: str) -> str:
    """The extraInfo Apache's client builds from a CHANGE_MESSAGE_INVISIBLETIME answer (MQClientAPIImpl)."""
    off = rec["queue_offset"]
    return (f"{off} {r.ext['popTime']} {r.ext['invisibleTime']} {r.ext['reviveQid']} 0 {broker_name} "
            f"{rec['queue_id']} {off}")


async def test_pop_ack_and_change_invisible_time_with_apache_receipts(broker_factory):
    b = broker_factory()
    c = await RawClient.connect(b.addr)
    try:
        await create_topic(c, "PopT")
        for i in range(6):
            assert (await send(c, "PopT", f"m{i}".encode(), tags="A" if i % 2 == 0 else "B", qid=i % 2)).code == 0
        r = await pop(c, "PopG", "PopT", exp="A")
        recs = popped(r)
        assert sorted(x["body"] for x in recs) == [b"m0", b"m2", b"m4"]
        for x in recs:
            info = parse_extra_info(x["props"]["POP_CK"])
            assert (info.queue_id, info.queue_offset, info.invisible_time) == (x["queue_id"], x["queue_offset"], 60_000)
            assert x["reconsume"] == 0 and info.revive_qid != POP_ORDER_REVIVE_QUEUE
        broker_name = parse_extra_info(recs[0]["props"]["POP_CK"]).broker_name
        # the header's offset summaries, as Apache's client parses them
        assert r.ext["msgOffsetInfo"] and int(r.ext["invisibleTime"]) == 60_000
        listed = {(int(e.split(" ")[1]), int(o)) for e in r.ext["msgOffsetInfo"].split(";")
                  for o in e.split(" ")[2].split(",")}
        assert listed == {(x["queue_id"], x["queue_offset"]) for x in recs}

        first, second, third = recs
        assert (await ack(c, "PopG", first)).code == ResponseCode.SUCCESS
        again = await ack(c, "PopG", first)
        assert again.code == ResponseCode.NO_MESSAGE and "in flight" in (again.remark or "")

        ch = await change(c, "PopG", second, 0)
        assert ch.code == ResponseCode.SUCCESS, ch.remark
        assert (await ack(c, "PopG", second)).code == ResponseCode.NO_MESSAGE  # the old receipt is stale
        redelivered = popped(await pop(c, "PopG", "PopT", exp="A"))
        assert [(x["body"], x["reconsume"]) for x in redelivered] == [(second["body"], 1)]
        assert (await ack(c, "PopG", redelivered[0])).code == ResponseCode.SUCCESS

        # a change keeps the delivery; the receipt Apache's client rebuilds from the answer acks it
        ch = await change(c, "PopG", third, 30_000)
        assert ch.code == ResponseCode.SUCCESS
        assert (await ack(c, "PopG", third, rebuilt_receipt(third, ch, broker_name))).code == ResponseCode.SUCCESS

        # nothing left for tag A: a short long poll times out with POLLING_TIMEOUT
        empty = await pop(c, "PopG", "PopT", exp="A", poll_ms=200)
        assert empty.code == ResponseCode.POLLING_TIMEOUT and not empty.body
    finally:
        await c.close()


async def test_bad_pop_requests_get_an_error_code_and_remark(broker_factory):
    b = broker_factory()
    c = await RawClient.connect(b.addr)
    try:
        await create_topic(c, "PopBad")
        r = await pop(c, "PopG", "PopBad", n=33)
        assert r.code == ResponseCode.SYSTEM_ERROR and "32" in (r.remark or "")
        r = await c.invoke(POP, {"consumerGroup": "PopG", "topic": "PopBad", "queueId": "-1", "maxMsgNums": "1",
                                 "invisibleTime": "1000", "pollTime": "0", "bornTime": "0", "initMode": "0",
                                 "expType": "SQL92", "exp": "a > 1"})
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "SQL92" in (r.remark or "")  # filter off
        r = await pop(c, "PopG", "NoSuchTopic", poll_ms=0)
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in (r.remark or "")
        r = await c.invoke(ACK, {"consumerGroup": "PopG", "topic": "PopBad", "queueId": "0", "extraInfo": "1 2",
                                 "offset": "0"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "extraInfo" in (r.remark or "")
        r = await c.invoke(ACK, {"consumerGroup": "PopG", "topic": "PopBad", "queueId": "0"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "extraInfo" in (r.remark or "")
    finally:
        await c.close()


async def test_long_polling_pop_answers_when_a_message_arrives(broker_factory):
    b = broker_factory()
    c = await RawClient.connect(b.addr)
    try:
        await create_topic(c, "PopLP")
        waiting = asyncio.ensure_future(pop(c, "PopG", "PopLP", poll_ms=20_000))
        info = await c.invoke(RequestCode.POLLING_INFO, {"consumerGroup": "PopG", "topic": "PopLP", "queueId": "0"})
        assert info.code == ResponseCode.SUCCESS and int(info.ext["pollingNum"]) in (0, 1)
        assert (await send(c, "PopLP", b"late")).code == 0
        recs = popped(await asyncio.wait_for(waiting, 15))
        assert [x["body"] for x in recs] == [b"late"]
        note = await c.invoke(RequestCode.NOTIFICATION, {"consumerGroup": "PopG", "topic": "PopLP", "queueId": "-1",
                                                         "pollTime": "0", "bornTime": "0"})
        assert note.code == ResponseCode.SUCCESS and note.ext["hasMsg"] == "false"
        assert (await send(c, "PopLP", b"next")).code == 0
        note = await c.invoke(RequestCode.NOTIFICATION, {"consumerGroup": "PopG", "topic": "PopLP", "queueId": "-1",
                                                         "pollTime": "0", "bornTime": "0"})
        assert note.ext["hasMsg"] == "true"
        peeked: list[bytes] = []
        for qid in (0, 1):
            peek = await c.invoke(RequestCode.PEEK_MESSAGE, {"consumerGroup": "PopG", "topic": "PopLP",
                                                             "queueId": str(qid), "maxMsgNums": "4"})
            assert peek.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), peek.remark
            peeked += [x["body"] for x in decode_records(peek.body)]
        assert peeked == [b"next"]
        # a peek changes nothing: the pop still hands the message out
        assert [x["body"] for x in popped(await pop(c, "PopG", "PopLP"))] == [b"next"]
    finally:
        await c.close()


async def test_orderly_pop_holds_the_queue_until_the_ack(broker_factory):
    b = broker_factory()
    c = await RawClient.connect(b.addr)
    try:
        await create_topic(c, "PopFifo", queues=1)
        for i in range(3):
            assert (await send(c, "PopFifo", f"f{i}".encode(), qid=0)).code == 0
        first = popped(await pop(c, "PopFG", "PopFifo", n=1, order=True))
        assert [x["body"] for x in first] == [b"f0"]
        assert parse_extra_info(first[0]["props"]["POP_CK"]).revive_qid == POP_ORDER_REVIVE_QUEUE
        blocked = await pop(c, "PopFG", "PopFifo", n=1, order=True, poll_ms=100)
        assert blocked.code == ResponseCode.POLLING_TIMEOUT
        assert (await ack(c, "PopFG", first[0])).code == ResponseCode.SUCCESS
        assert [x["body"] for x in popped(await pop(c, "PopFG", "PopFifo", n=1, order=True))] == [b"f1"]
    finally:
        await c.close()


async def test_receipts_and_acks_survive_kill_9(broker_factory):
    b = broker_factory()
    c = await RawClient.connect(b.addr)
    await create_topic(c, "PopK9")
    for i in range(8):
        assert (await send(c, "PopK9", f"k{i}".encode(), qid=i % 2)).code == 0
    recs = popped(await pop(c, "PopKG", "PopK9", n=6))
    assert len(recs) == 6
    acked, kept, changed = recs[:3], recs[3:5], recs[5]
    for x in acked:
        assert (await ack(c, "PopKG", x)).code == ResponseCode.SUCCESS
    ch = await change(c, "PopKG", changed, 120_000)
    assert ch.code == ResponseCode.SUCCESS
    await c.close()
    b.kill()
    b.start()
    c = await RawClient.connect(b.addr)
    try:
        # acked and in-flight messages are not handed out again: only the two never popped
        rest = popped(await pop(c, "PopKG", "PopK9", poll_ms=0))
        assert sorted(x["body"] for x in rest) == sorted({f"k{i}".encode() for i in range(8)}
                                                         - {x["body"] for x in recs})
        for x in acked:
            assert (await ack(c, "PopKG", x)).code == ResponseCode.NO_MESSAGE
        assert (await ack(c, "PopKG", changed)).code == ResponseCode.NO_MESSAGE  # changed before the kill
        broker_name = parse_extra_info(changed["props"]["POP_CK"]).broker_name
        assert (await ack(c, "PopKG", changed, rebuilt_receipt(changed, ch, broker_name))).code == ResponseCode.SUCCESS
        for x in kept + rest:
            assert (await ack(c, "PopKG", x)).code == ResponseCode.SUCCESS
    finally:
        await c.close()


async def test_batch_ack_acks_the_deliveries_its_bitset_names(broker_factory):
    b = broker_factory()
    c = await RawClient.connect(b.addr)
    try:
        await create_topic(c, "PopBA", queues=1)
        for i in range(4):
            assert (await send(c, "PopBA", f"b{i}".encode(), qid=0)).code == 0
        recs = popped(await pop(c, "PopBG", "PopBA", n=4))
        info = parse_extra_info(recs[0]["props"]["POP_CK"])
        start = recs[0]["queue_offset"]
        acked = [recs[0], recs[2]]
        body = encode_batch_ack(info.broker_name, [BatchAck("PopBG", "PopBA", "0", start, 0, info.revive_qid,
                                                            info.pop_time, info.invisible_time,
                                                            tuple(x["queue_offset"] for x in acked))])
        r = await c.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, body)
        assert r.code == ResponseCode.SUCCESS, r.remark
        for x in acked:
            assert (await ack(c, "PopBG", x)).code == ResponseCode.NO_MESSAGE
        for x in (recs[1], recs[3]):
            assert (await ack(c, "PopBG", x)).code == ResponseCode.SUCCESS
        bad = await c.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, b"not json")
        assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark
    finally:
        await c.close()


async def test_sql92_pop_with_the_property_filter_on(broker_factory):
    b = broker_factory({"enablePropertyFilter": "true"})
    c = await RawClient.connect(b.addr)
    try:
        await create_topic(c, "PopSql", queues=1)
        for i in range(4):
            assert (await send(c, "PopSql", f"s{i}".encode(), qid=0, properties={"n": i})).code == 0

        async def sql_pop(exp: str) -> Reply:
            return await c.invoke(POP, {"consumerGroup": "PopSG", "topic": "PopSql", "queueId": "-1",
                                        "maxMsgNums": "8", "invisibleTime": "60000", "pollTime": "0",
                                        "bornTime": "0", "initMode": "0", "expType": "SQL92", "exp": exp})
        assert sorted(x["body"] for x in popped(await sql_pop("n >= 2"))) == [b"s2", b"s3"]
        bad = await sql_pop("n >>> 2")
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and bad.remark
    finally:
        await c.close()
