"""C++ client consumer groups against our broker: clustering split + rebalance, broadcasting, offsets."""

from __future__ import annotations

import pytest

from tests.helpers import wire
from tests.interop.checks import acked_bodies, assert_exactly, received, sent_ok, wait_bodies, warm_up
from tests.interop.conftest import uniq

pytestmark = pytest.mark.interop
QUEUES = 4


def _producer(agents, broker, topic):
    def produce(prefix: str, count: int = QUEUES):
        # orderly with shard = i % QUEUES puts message i on queue i % QUEUES: every queue gets traffic
        return agents.run_cpp("produce", broker, topic=topic, mode="orderly", count=count, shards=QUEUES,
                              body_prefix=prefix)
    return produce


@pytest.mark.slow
def test_clustering_consumers_split_the_queues_and_take_over_when_one_leaves(broker, agents):
    topic, group = uniq("TcppClu"), uniq("GID")
    broker.create_topic(topic, QUEUES)
    a = agents.cpp("consume", broker, name="cpp-A", group=group, topic=topic, until_count=0, timeout=300)
    b = agents.cpp("consume", broker, name="cpp-B", group=group, topic=topic, until_count=0, timeout=300)
    a.wait_event("started", 30)
    b.wait_event("started", 30)
    produce = _producer(agents, broker, topic)
    warm_up(produce, [a, b], QUEUES, clustering=True, rounds=10, round_timeout=8)
    assert len(broker.consumer_ids(group)) == 2, broker.consumer_ids(group)

    sent = sent_ok(produce("p2-", 40), 40)
    want = {e["body"] for e in sent}
    wait_bodies([a, b], want, 60, "both consumers together")
    ga, gb = received(a, "p2-"), received(b, "p2-")
    assert_exactly(ga + gb, sent, "clustering split")
    qa, qb = {e["queue_id"] for e in ga}, {e["queue_id"] for e in gb}
    assert qa and qb and not qa & qb and qa | qb == set(range(QUEUES)), f"A queues {qa}, B queues {qb}"

    assert a.terminate(30) == 0  # clean shutdown: persists A's offsets, UNREGISTER_CLIENT
    sent3 = sent_ok(produce("p3-", 40), 40)
    wait_bodies([b], {e["body"] for e in sent3}, 90, "B alone after A left (rebalance)")
    got3 = received(b, "p3-")
    assert_exactly(got3, sent3, "after rebalance")
    assert {e["queue_id"] for e in got3} == set(range(QUEUES))
    redelivered = acked_bodies([b], "p2-") & {e["body"] for e in ga}
    assert not redelivered, f"B re-consumed {len(redelivered)} of A's acknowledged messages (offsets not persisted?)"
    assert b.terminate(30) == 0


def test_broadcasting_delivers_everything_to_every_consumer(broker, agents):
    topic, group = uniq("TcppBc"), uniq("GID")
    broker.create_topic(topic, QUEUES)
    consumers = [agents.cpp("consume", broker, name=f"cpp-bc{i}", group=group, topic=topic, model="broadcasting",
                            until_count=0, timeout=180) for i in range(2)]
    for c in consumers:
        c.wait_event("started", 30)
    produce = _producer(agents, broker, topic)
    warm_up(produce, consumers, QUEUES, clustering=False, rounds=8, round_timeout=8)
    sent = sent_ok(produce("bc-", 20), 20)
    for c in consumers:
        wait_bodies([c], {e["body"] for e in sent}, 60, f"{c.name} gets every message")
        assert_exactly(received(c, "bc-"), sent, f"broadcast to {c.name}")
    for c in consumers:
        assert c.terminate(30) == 0


def test_consumer_offsets_survive_a_consumer_restart(broker, agents):
    topic, group = uniq("TcppOff"), uniq("GID")
    broker.create_topic(topic, QUEUES)
    first = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=12, body_prefix="r1-"), 12)
    c1 = agents.run_cpp("consume", broker, group=group, topic=topic, until_count=12, timeout=60)
    assert_exactly(received(c1), first, "first run")
    committed = {q: wire.consumer_offset(broker.addr, group, topic, q) for q in range(QUEUES)}
    maxes = {q: wire.max_offset(broker.addr, topic, q) for q in range(QUEUES)}
    assert committed == maxes, f"QUERY_CONSUMER_OFFSET after clean shutdown {committed} != GET_MAX_OFFSET {maxes}"

    second = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=8, body_prefix="r2-"), 8)
    c2 = agents.run_cpp("consume", broker, group=group, topic=topic, until_count=8, timeout=60)
    assert_exactly(received(c2), second, "second run must get only the new messages")
