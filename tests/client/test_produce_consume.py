"""Producer, PushConsumer and PullConsumer against a real broker subprocess."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from client import (
    BROADCASTING,
    ConsumeStatus,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
    select_by_hash,
)
from client.message import MessageQueue
from codec.codes import RequestCode, ResponseCode
from tests.client.conftest import Collector, uniq
from tests.helpers.checks import present
from tests.server.raw import RawClient

pytestmark = pytest.mark.process


async def test_send_then_push_consume_clustering(broker, topic):
    async with Producer(uniq("PG"), broker.namesrv) as p:
        results = [await p.send(Message(topic, f"m{i}".encode(), tags="TagA", keys=[f"k{i}", "x"]))
                   for i in range(12)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 12 and all(len(r.offset_msg_id) == 32 for r in results)
    assert {r.queue.queue_id for r in results} == {0, 1, 2, 3}  # round robin over the 4 queues

    col = Collector()
    c = PushConsumer(uniq("CG"), broker.namesrv, listener=col, consume_from="first")
    c.subscribe(topic, "*")
    async with c:
        msgs = await col.wait_for(12)
    by_id = {m.msg_id: m for m in msgs}
    for i, r in enumerate(results):
        m = by_id[r.msg_id]
        assert (m.body, m.tags, m.keys, m.topic) == (f"m{i}".encode(), "TagA", [f"k{i}", "x"], topic)
        assert (m.offset_msg_id, m.queue_id, m.queue_offset) == (r.offset_msg_id, r.queue.queue_id,
                                                                  r.queue_offset)
        assert m.store_timestamp >= m.born_timestamp > 0


async def test_unknown_topic_is_created_through_tbw102(broker):
    topic = uniq("Auto")
    async with Producer(uniq("PG"), broker.namesrv) as p:
        r = await p.send(Message(topic, b"x"))
        assert r.status is SendStatus.SEND_OK
        route = await p.instance.fetch_route(topic)
    assert route is not None and route.publish_queues()


async def test_batch_items_get_their_own_uniq_key_and_consecutive_offsets(broker, topic):
    async with Producer(uniq("PG"), broker.namesrv) as p:
        mq = (await p.queues(topic))[2]
        r = await p.send_batch([Message(topic, f"b{i}".encode(), tags="B") for i in range(10)], queue=mq)
    uniq_keys = r.msg_id.split(",")
    assert len(set(uniq_keys)) == 10 and len(r.offset_msg_id.split(",")) == 10
    async with PullConsumer(uniq("PC"), broker.namesrv) as pc:
        res = await pc.pull(mq, r.queue_offset, 32)
    assert res.status is PullStatus.FOUND
    assert [m.body for m in res.messages] == [f"b{i}".encode() for i in range(10)]
    assert [m.msg_id for m in res.messages] == uniq_keys
    assert [m.queue_offset for m in res.messages] == list(range(r.queue_offset, r.queue_offset + 10))


async def test_tag_expression_filters(broker, topic):
    async with Producer(uniq("PG"), broker.namesrv) as p:
        for i in range(9):
            await p.send(Message(topic, f"{i}".encode(), tags="ABC"[i % 3]))
    # pull: the broker filters by tag hash and the client by tag string; nothing of C comes back
    async with PullConsumer(uniq("PC"), broker.namesrv) as pc:
        pulled = []
        for mq in await pc.fetch_queues(topic):
            r = await pc.pull(mq, 0, 32, expr="A || B")
            pulled += r.messages
            assert r.next_begin_offset == await pc.max_offset(mq)  # filtered units are skipped too
    assert sorted(present(m.tags) for m in pulled) == ["A"] * 3 + ["B"] * 3
    # push: the first six messages delivered are exactly the A and B ones
    col = Collector()
    c = PushConsumer(uniq("CG"), broker.namesrv, listener=col, consume_from="first")
    c.subscribe(topic, "A || B")
    async with c:
        await col.wait_for(6)
    assert sorted(present(m.tags) for m in col.messages) == ["A"] * 3 + ["B"] * 3


async def test_broadcasting_delivers_everything_to_every_consumer(broker, topic, tmp_path):
    group = uniq("BG")
    cols = [Collector(), Collector()]
    consumers = [PushConsumer(group, broker.namesrv, listener=col, message_model=BROADCASTING,
                              consume_from="first", offset_store_path=tmp_path / f"off{i}.json")
                 for i, col in enumerate(cols)]
    for c in consumers:
        c.subscribe(topic)
        await c.start()
    try:
        async with Producer(uniq("PG"), broker.namesrv) as p:
            for i in range(8):
                await p.send(Message(topic, f"{i}".encode()))
        for col in cols:
            await col.wait_for(8)
    finally:
        for c in consumers:
            await c.shutdown()
    for col in cols:
        assert sorted(col.bodies) == [f"{i}".encode() for i in range(8)]
    # offsets were kept locally (file), so a restarted broadcast consumer only sees what is new
    async with Producer(uniq("PG"), broker.namesrv) as p:
        await p.send(Message(topic, b"new"))
    col = Collector()
    again = PushConsumer(group, broker.namesrv, listener=col, message_model=BROADCASTING,
                         consume_from="first", offset_store_path=tmp_path / "off0.json")
    again.subscribe(topic)
    async with again:
        await col.wait_for(1)
    assert col.bodies == [b"new"]


async def test_clustering_splits_queues_between_two_consumers(broker, topic):
    group = uniq("CG")
    cols = [Collector(), Collector()]
    cs = [PushConsumer(group, broker.namesrv, listener=col, consume_from="first") for col in cols]
    for c in cs:
        c.subscribe(topic)
        await c.start()
    try:
        def split_ok() -> bool:
            a = {mq for mq in cs[0].process_queues if mq.topic == topic}
            b = {mq for mq in cs[1].process_queues if mq.topic == topic}
            return len(a) == 2 and len(b) == 2 and not a & b

        async with asyncio.timeout(30):
            while not split_ok():  # each rebalance (notify-driven or periodic) sets the event
                waits = [asyncio.ensure_future(c.rebalanced.wait()) for c in cs]
                for c in cs:
                    c.rebalanced.clear()
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for wt in waits:
                    wt.cancel()
        async with Producer(uniq("PG"), broker.namesrv) as p:
            for i in range(16):
                await p.send(Message(topic, f"{i}".encode()))
        async with asyncio.timeout(20):
            while len(cols[0].messages) + len(cols[1].messages) < 16:
                await asyncio.wait([asyncio.ensure_future(col.wait_for(len(col.messages) + 1))
                                    for col in cols], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for c in cs:
            await c.shutdown()
    assert sorted(cols[0].bodies + cols[1].bodies) == sorted(f"{i}".encode() for i in range(16))
    assert cols[0].messages and cols[1].messages


async def test_orderly_consumption_keeps_per_queue_order(broker, topic):
    async with Producer(uniq("PG"), broker.namesrv) as p:
        rs = [await p.send(Message(topic, f"{i}".encode()), selector=select_by_hash, arg="order-42")
              for i in range(20)]
    assert len({r.queue.queue_id for r in rs}) == 1
    seen: list[bytes] = []
    in_flight = 0
    max_in_flight = 0
    done = asyncio.Event()

    async def listener(m):
        nonlocal in_flight, max_in_flight
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
        await asyncio.sleep(0)  # give a concurrent consumer the chance to overlap (it must not)
        seen.append(m.body)
        in_flight -= 1
        if len(seen) == 20:
            done.set()
        return ConsumeStatus.SUCCESS

    c = PushConsumer(uniq("OG"), broker.namesrv, listener=listener, orderly=True, consume_from="first")
    c.subscribe(topic)
    async with c:
        await asyncio.wait_for(done.wait(), 20)
    assert seen == [f"{i}".encode() for i in range(20)]
    assert max_in_flight == 1


async def test_offsets_are_committed_and_resumed(broker, topic):
    group = uniq("CG")
    async with Producer(uniq("PG"), broker.namesrv) as p:
        for i in range(10):
            await p.send(Message(topic, f"old{i}".encode()))
        col = Collector()
        c = PushConsumer(group, broker.namesrv, listener=col, consume_from="first")
        c.subscribe(topic)
        async with c:
            await col.wait_for(10)
        async with PullConsumer(group, broker.namesrv) as pc:
            committed = [await pc.fetch_consume_offset(mq) for mq in await pc.fetch_queues(topic)]
        assert sum(committed) == 10
        for i in range(5):
            await p.send(Message(topic, f"new{i}".encode()))
    col2 = Collector()
    c2 = PushConsumer(group, broker.namesrv, listener=col2, consume_from="first")
    c2.subscribe(topic)
    async with c2:
        await col2.wait_for(5)
    assert sorted(col2.bodies) == [f"new{i}".encode() for i in range(5)]


async def test_pull_consumer_offsets(broker, topic):
    async with Producer(uniq("PG"), broker.namesrv) as p:
        mq = (await p.queues(topic))[0]
        for i in range(5):
            await p.send(Message(topic, f"{i}".encode()), queue=mq)
    group = uniq("PC")
    async with PullConsumer(group, broker.namesrv) as pc:
        assert await pc.fetch_consume_offset(mq) in (-1, 0)
        assert (await pc.min_offset(mq), await pc.max_offset(mq)) == (0, 5)
        r = await pc.pull(mq, 0, 3)
        assert [m.body for m in r.messages] == [b"0", b"1", b"2"] and r.next_begin_offset == 3
        pc.update_offset(mq, r.next_begin_offset)
        await pc.commit()
        assert (await pc.pull(mq, 5, 3)).status is PullStatus.NO_NEW_MSG
    async with PullConsumer(group, broker.namesrv) as pc2:
        assert await pc2.fetch_consume_offset(mq) == 3


async def test_fire_and_collect_and_oneway(broker, topic):
    async with Producer(uniq("PG"), broker.namesrv, max_inflight=8) as p:
        futs = [await p.send_async(Message(topic, f"a{i}".encode())) for i in range(30)]
        results = await p.collect()
        assert all(f.done() for f in futs[:-8])  # the in-flight bound made early sends finish first
        assert len(results) <= 8
        assert all(f.result().status is SendStatus.SEND_OK for f in futs)
        mq = (await p.queues(topic))[1]
        await p.send_oneway(Message(topic, b"oneway"), queue=mq)
        last = await p.send(Message(topic, b"after"), queue=mq)
    async with PullConsumer(uniq("PC"), broker.namesrv) as pc:
        total = sum([await pc.max_offset(q) for q in await pc.fetch_queues(topic)])
        r = await pc.pull(mq, 0, 32)
    assert total == 32
    bodies = [m.body for m in r.messages]
    assert b"oneway" in bodies and bodies.index(b"after") == last.queue_offset


async def test_orderly_consumers_lock_loop_survives_an_unexpected_error(broker, topic, monkeypatch):
    """A lock round that raises something unexpected is logged and counted, and the loop locks again
    (before, the task died silently and the queues' locks were never renewed)."""
    c = PushConsumer(uniq("OG"), broker.namesrv, listener=lambda m: ConsumeStatus.SUCCESS, orderly=True,
                     consume_from="first")
    c.subscribe(topic)
    real = c._lock
    calls: list[int] = []
    relocked = asyncio.Event()

    async def flaky(mqs):
        calls.append(len(mqs))
        if len(calls) == 1:
            raise RuntimeError("injected: one lock round fails unexpectedly")
        locked = await real(mqs)
        relocked.set()
        return locked

    async with c:
        monkeypatch.setattr(c, "_lock", flaky)  # after start: the rebalance has locked the queues with the real method
        c._lock_event.set()
        await asyncio.wait_for(relocked.wait(), 15)
        assert c.instance.task_failures.get("lock") == 1
        assert all(pq.locked for pq in c.process_queues.values()) and c.process_queues


async def test_refused_send_back_resends_with_the_count_so_the_dlq_is_reached(broker, topic):
    """When CONSUMER_SEND_MSG_BACK is refused (here: a commitlog offset the broker does not hold), the
    consumer re-sends the message to %RETRY%<group> itself, carrying reconsumeTimes + 1 and its
    maxReconsumeTimes in the send header (as the Java client): with max 2 and a message already
    reconsumed once, the broker puts it straight into %DLQ%<group>, body and origin id intact."""
    group = uniq("CG")
    async with Producer(uniq("PG"), broker.namesrv) as p:
        sent = await p.send(Message(topic, b"keeps-failing", tags="T"))
    async with PullConsumer(uniq("PC"), broker.namesrv) as pc:
        [m] = (await pc.pull(sent.queue, sent.queue_offset, 1)).messages
        c = PushConsumer(group, broker.namesrv, listener=Collector(), max_reconsume_times=2)
        c.subscribe(topic, "*")
        async with c:
            await c.send_back(dataclasses.replace(m, reconsume_times=1, commitlog_offset=1 << 40))
        dlq = MessageQueue(f"%DLQ%{group}", m.broker_name, 0)
        res = await pc.pull(dlq, 0, 32)
    assert res.status is PullStatus.FOUND, res
    [d] = res.messages
    assert (d.body, d.reconsume_times) == (b"keeps-failing", 2)
    assert d.properties["ORIGIN_MESSAGE_ID"] == m.msg_id and d.properties["RETRY_TOPIC"] == topic


async def test_a_message_with_several_tags_reaches_each_tags_consumers_on_a_multi_tag_topic(broker):
    """TAGS "A||B" on a MULTI_TAG topic (codec/tags.py): the broker's pull ANDs the subscribed hash against the
    OR of the tags' hashes and checks the tags; the client's own tag check keeps a message one of whose tags is
    subscribed."""
    topic = uniq("TMT")
    raw = await RawClient.connect(broker.addr)
    try:
        r = await raw.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
            "topicFilterType": "MULTI_TAG", "topicSysFlag": "0", "order": "false"})
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await raw.close()
    async with Producer(uniq("PG"), broker.namesrv) as p:
        for body, tags in ((b"ab", "A||B"), (b"b", "B"), (b"c", "C"), (b"ca", "C||A")):
            assert (await p.send(Message(topic, body, tags=tags))).status == SendStatus.SEND_OK
    async with PullConsumer(uniq("PC"), broker.namesrv) as pc:
        pulled = []
        for mq in await pc.fetch_queues(topic):
            pulled += (await pc.pull(mq, 0, 32, expr="A")).messages
    assert sorted(m.body for m in pulled) == [b"ab", b"ca"]
    col = Collector()
    c = PushConsumer(uniq("CG"), broker.namesrv, listener=col, consume_from="first")
    c.subscribe(topic, "B")
    async with c:
        await col.wait_for(2)
    assert sorted(m.body for m in col.messages) == [b"ab", b"b"]
