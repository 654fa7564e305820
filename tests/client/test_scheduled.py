"""Retries through CONSUMER_SEND_MSG_BACK, delay levels and timer messages (need the scheduler)."""

from __future__ import annotations

import time

import pytest

from client import Message, Producer, PushConsumer
from client import _wire as w
from tests.client.conftest import FAST_LEVELS, Collector, uniq

pytestmark = pytest.mark.process


async def test_failed_message_comes_back_through_retry_topic(broker_factory):
    broker = broker_factory(config={"messageDelayLevel": FAST_LEVELS})
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
            t0 = int(time.time() * 1000)  # the send call starts in this ms or later
            r = await p.send(Message(topic, b"later", delay_level=5))  # 500 ms
        [m] = await col.wait_for(1, timeout=20)
    assert m.msg_id == r.msg_id and m.topic == topic and m.body == b"later"
    assert m.store_timestamp - t0 > 500  # never early: stored in the real topic only after it is due


async def test_timer_message_and_cancel(broker):
    topic = uniq("T")
    broker.create_topic(topic, queues=1)
    col = Collector()
    c = PushConsumer(uniq("TG"), broker.namesrv, listener=col, consume_from="first")
    c.subscribe(topic)
    async with c:
        async with Producer(uniq("PG"), broker.namesrv) as p:
            now = int(time.time() * 1000)
            doomed = await p.send(Message(topic, b"cancel-me", deliver_at_ms=now + 1500))
            kept = await p.send(Message(topic, b"keep-me", delay_ms=2500))
            marker = await p.cancel_timer(doomed.offset_msg_id)
            assert marker.msg_id == doomed.msg_id  # the marker carries the target's UNIQ_KEY
        [m] = await col.wait_for(1, timeout=20)
    # "keep-me" is due after "cancel-me": had the cancel failed, "cancel-me" would have come first
    assert m.body == b"keep-me" and m.msg_id == kept.msg_id
    assert m.store_timestamp > now + 2500
    assert [x.body for x in col.messages] == [b"keep-me"]
