"""Retries through CONSUMER_SEND_MSG_BACK, delay levels and timer messages (need the scheduler)."""

from __future__ import annotations

import time

import pytest

from client import Message, MQClientError, Producer, PushConsumer
from client import _wire as w
from tests.client.conftest import FAST_LEVELS, Collector, uniq


async def _send_back_supported(broker) -> bool:
    """A broker without the retry path answers 3 REQUEST_CODE_NOT_SUPPORTED to request 36."""
    from client.instance import ClientInstance

    inst = ClientInstance(broker.namesrv)
    try:
        resp = await inst.invoke_addr(broker.addr, w.request(w.CONSUMER_SEND_MSG_BACK, {
            "offset": 0, "group": "probe", "delayLevel": 0}))
        return resp.code != w.REQUEST_CODE_NOT_SUPPORTED
    finally:
        await inst.close()


async def test_failed_message_comes_back_through_retry_topic(broker_factory):
    broker = broker_factory(config={"messageDelayLevel": FAST_LEVELS})
    if not await _send_back_supported(broker):
        pytest.skip("broker answers 3 (not supported) to CONSUMER_SEND_MSG_BACK (36)")
    topic = uniq("T")
    broker.create_topic(topic, queues=2)
    col = Collector(fail_first=1)
    c = PushConsumer(uniq("RG"), broker.namesrv, listener=col, consume_from="first")
    c.subscribe(topic)
    async with c:
        async with Producer(uniq("PG"), broker.namesrv) as p:
            r = await p.send(Message(topic, b"flaky", tags="T1"))
        first, second = await col.wait_for(2, timeout=20)
    assert first.msg_id == second.msg_id == r.msg_id
    assert (first.reconsume_times, second.reconsume_times) == (0, 1)
    assert second.stored_topic == w.RETRY_PREFIX + c.group and second.topic == topic
    assert second.body == b"flaky" and second.tags == "T1"


async def test_delay_level_message_arrives_after_its_delay(broker_factory):
    broker = broker_factory(config={"messageDelayLevel": FAST_LEVELS})
    topic = uniq("T")
    broker.create_topic(topic, queues=2)
    col = Collector()
    c = PushConsumer(uniq("DG"), broker.namesrv, listener=col, consume_from="first")
    c.subscribe(topic)
    async with c:
        async with Producer(uniq("PG"), broker.namesrv) as p:
            t0 = time.time() * 1000
            r = await p.send(Message(topic, b"later", delay_level=5))  # 500 ms
        [m] = await col.wait_for(1, timeout=20)
    assert m.msg_id == r.msg_id and m.topic == topic and m.body == b"later"
    assert m.store_timestamp - t0 >= 450  # stored in the real topic only once due


async def test_timer_message_and_cancel(broker):
    topic = uniq("T")
    broker.create_topic(topic, queues=1)
    col = Collector()
    c = PushConsumer(uniq("TG"), broker.namesrv, listener=col, consume_from="first")
    c.subscribe(topic)
    async with c:
        async with Producer(uniq("PG"), broker.namesrv) as p:
            now = int(time.time() * 1000)
            try:
                doomed = await p.send(Message(topic, b"cancel-me", deliver_at_ms=now + 1500))
            except MQClientError as e:
                pytest.skip(f"broker refuses timer messages: {e}")
            kept = await p.send(Message(topic, b"keep-me", delay_ms=2500))
            try:
                marker = await p.cancel_timer(doomed.offset_msg_id)
            except MQClientError as e:
                pytest.skip(f"timer target not viewable as a timer message: {e}")
            assert marker.msg_id == doomed.msg_id  # the marker carries the target's UNIQ_KEY
        [m] = await col.wait_for(1, timeout=20)
    # "keep-me" is due after "cancel-me": had the cancel failed, "cancel-me" would have come first
    assert m.body == b"keep-me" and m.msg_id == kept.msg_id
    assert m.store_timestamp >= now + 2400
    assert [x.body for x in col.messages] == [b"keep-me"]
