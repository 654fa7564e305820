"""The official C++ client (librocketmq via PyPI `rocketmq`) against our broker: send paths and consumers.

Every test runs the client in a subprocess (cpp_agent.py) and checks, from its JSON lines, that the
consumer got exactly what the producer had acknowledged, with bodies, keys, tags and properties intact.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.interop.checks import assert_exactly, received, sent_ok
from tests.interop.conftest import uniq

pytestmark = pytest.mark.interop
N = 20


@pytest.mark.parametrize("mode", ["sync", "async", "oneway"])
def test_send_mode_then_push_consumer_gets_exactly_the_sent_set(broker, agents, mode):
    topic = uniq("TcppSend")
    broker.create_topic(topic, 4)
    prod = agents.run_cpp("produce", broker, topic=topic, mode=mode, count=N, tag="TagA", key="k",
                          property=["color=blue"])
    sent = sent_ok(prod, N)
    if mode != "oneway":
        assert all(e["status"] == "OK" and e["msg_id"] for e in sent), sent[:3]
        assert len({e["msg_id"] for e in sent}) == N, "send results must carry distinct msg ids"
    cons = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=N, timeout=60,
                          want_property=["color"])
    got = received(cons)
    assert_exactly(got, sent, f"{mode} send")
    assert all(e["topic"] == topic and e["props"].get("color") == "blue" for e in got), got[:2]
    assert len({e["queue_id"] for e in got}) > 1, "sends should spread over the topic's queues"
    per_queue = defaultdict(list)
    for e in got:
        per_queue[e["queue_id"]].append(e["queue_offset"])
    for q, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), f"queue {q} offsets not 0..n-1: {sorted(offsets)}"
    if mode == "sync":
        # The C++ send result carries either the client UNIQ_KEY or the broker's offset msgId.
        ids = {e["msg_id"] for e in got} | {e["props"].get("UNIQ_KEY") for e in got}
        unknown = [e["msg_id"] for e in sent if e["msg_id"] not in ids]
        assert not unknown, f"send-result msg ids not seen on delivery: {unknown[:3]}"


def test_orderly_send_and_orderly_consumer_keep_per_queue_order(broker, agents):
    topic = uniq("TcppOrder")
    broker.create_topic(topic, 4)
    prod = agents.run_cpp("produce", broker, topic=topic, mode="orderly", count=N, shards=4, key="o")
    sent = sent_ok(prod, N)
    cons = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=N, timeout=60,
                          orderly=True)
    got = received(cons)
    assert_exactly(got, sent, "orderly send")
    shard_of = {e["body"]: e["shard"] for e in sent}
    per_queue = defaultdict(list)
    for e in got:
        assert e["queue_id"] == shard_of[e["body"]], f"shard {shard_of[e['body']]} landed on queue {e['queue_id']}"
        per_queue[e["queue_id"]].append(int(e["body"].rsplit("-", 1)[1]))
    for q, seq in per_queue.items():
        assert seq == sorted(seq), f"queue {q} consumed out of order: {seq}"


def test_batch_send_is_stored_as_separate_messages(broker, agents):
    topic = uniq("TcppBatch")
    broker.create_topic(topic, 4)
    prod = agents.run_cpp("produce", broker, topic=topic, mode="batch", count=30, batch_size=10, tag="B", key="b")
    sent = sent_ok(prod, 30)
    assert all(e["status"] == "OK" for e in sent)
    cons = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=30, timeout=25)
    got = received(cons)
    assert_exactly(got, sent, "batch send")
    by_batch = defaultdict(set)
    for e in got:
        by_batch[int(e["body"].rsplit("-", 1)[1]) // 10].add(e["queue_id"])
    assert all(len(qs) == 1 for qs in by_batch.values()), f"a batch must land in one queue: {dict(by_batch)}"


def test_producer_auto_creates_an_unknown_topic_from_tbw102(broker, agents):
    topic = uniq("TcppAuto")
    prod = agents.run_cpp("produce", broker, topic=topic, count=5, key="a")
    sent = sent_ok(prod, 5)
    cons = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=5, timeout=60)
    assert_exactly(received(cons), sent, "auto-created topic")


def test_tag_subscription_delivers_only_matching_tags(broker, agents):
    topic = uniq("TcppTags")
    broker.create_topic(topic, 2)
    # Non-matching messages first: they sit at lower offsets, so a filter bug would deliver them first.
    sent_ok(agents.run_cpp("produce", broker, topic=topic, count=10, tag="TagB", body_prefix="b-"), 10)
    wanted = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=10, tag="TagA", body_prefix="a-"), 10)
    sent_ok(agents.run_cpp("produce", broker, topic=topic, count=5, tag="TagC", body_prefix="c-"), 5)
    cons = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, expr="TagA || TagZ",
                          until_count=10, timeout=60)
    got = cons.of("received")
    assert {e["tags"] for e in got} == {"TagA"}, f"non-matching tags delivered: {sorted({e['tags'] for e in got})}"
    assert_exactly(received(cons), wanted, "tag filter")


def test_pull_consumer_reads_every_queue(broker, agents):
    topic = uniq("TcppPull")
    broker.create_topic(topic, 4)
    sent = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=N, tag="P", key="p"), N)
    cons = agents.run_cpp("pull", broker, group=uniq("GID"), topic=topic, until_count=N, timeout=60)
    got = received(cons)
    assert_exactly(got, sent, "pull consumer")
    queues = {e["queue_id"] for e in got}
    assert queues <= {0, 1, 2, 3} and len(queues) > 1, f"pulled from queues {queues}"
