"""A consumer group with 4.x and 5.x members: the 5.x consumers are members (GET_CONSUMER_LIST_BY_GROUP
lists them), the 4.x rebalance hands them queues, and pop serves exactly those queues, so every
message of the group is consumed once, by one side or the other, and no queue is left to nobody."""

from __future__ import annotations

import time

import pytest

from client.message import MessageQueue
from client.rebalance import allocate_averagely as client_allocate
from server.pop.model import allocate_averagely
from tests.grpc.conftest import uniq
from tests.helpers import wire


def test_pop_share_allocation_agrees_with_the_4x_client_side():
    for n in range(0, 17):
        qids = list(range(n))
        mqs = [MessageQueue("T", "broker-a", q) for q in qids]
        for c in range(1, 7):
            cids = [f"10.0.0.{k}@{k * 7919 % 1000}" for k in range(c)]
            for cid in cids:
                want = [mq.queue_id for mq in client_allocate(cid, mqs, cids)]
                assert allocate_averagely(cid, qids, cids) == want, (n, cids, cid)
            # together the members cover every queue exactly once
            got = sorted(q for cid in cids for q in allocate_averagely(cid, qids, cids))
            assert got == qids


@pytest.mark.interop
def test_mixed_group_each_message_consumed_once_by_one_side(gbroker, agents):
    topic, group = uniq("TMix"), uniq("GMix")
    gbroker.create_topic(topic, 4)
    node = agents.node5("simple", gbroker, group=group, topic=topic, until_count=1000, max_seconds=60)
    node.wait_event("started", 30)
    cpp = agents.cpp("consume", gbroker, group=group, topic=topic, until_count=1000, timeout=60)
    cpp.wait_event("started", 30)
    deadline = time.monotonic() + 20
    while len(wire.consumer_ids(gbroker.addr, group)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # polling a condition with a deadline: the C++ heartbeat registers it
    assert len(wire.consumer_ids(gbroker.addr, group)) == 2
    agents.run_node5("produce", gbroker, topic=topic, count=40, body_prefix="x")
    want = {f"x{i}" for i in range(40)}

    def union(_a) -> set[str]:
        return {e["body"] for e in node.of("received")} | {e["body"] for e in cpp.of("received")}

    # the C++ client rebalances on its own schedule (at start, then on NOTIFY_CONSUMER_IDS_CHANGED / 20 s)
    def settled(a) -> bool:
        return union(a) >= want and len(node.of("acked")) == len(node.of("received"))
    node.wait_for(settled, 50, "all 40 bodies consumed by the two sides, the 5.x side's acked", stop_on_exit=False)
    # what each side had consumed while both were members (when one leaves, the other takes its queues
    # over from the committed offsets: a redelivery then is at-least-once, not a shared queue)
    five = [e["body"] for e in node.of("received")]
    four = [e["body"] for e in cpp.of("received")]
    four_queues = {e["queue_id"] for e in cpp.of("received")}
    node.terminate()
    cpp.terminate()
    assert set(five) | set(four) == want
    assert not set(five) & set(four), "consumed by both sides"
    assert len(five) == len(set(five))  # acked, never redelivered
    assert five and four, (len(five), len(four))  # 2 members, 4 queues: each side owns two
    assert len(four_queues) == 2 and four_queues <= {0, 1, 2, 3}
