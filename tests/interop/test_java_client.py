"""The stock Apache RocketMQ 4.9.7 Java client (tests/java/agent/JavaAgent.java) against a delaymq broker.

Sends (sync, async, oneway, batch, orderly), push consumers (clustering, broadcasting, orderly), the lite
pull consumer, delay levels and timers (never early, on the producer's clock), retry to the DLQ, and
transactions with a check-back. The Java client is the reference every RocketMQ user runs.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from tests.helpers import wire
from tests.helpers.java import requires_java
from tests.interop.checks import assert_exactly, received, sent_ok
from tests.interop.conftest import uniq

pytestmark = [requires_java, pytest.mark.java, pytest.mark.interop]
# 18 short levels: level 2 = 1.5 s, level 3 (first retry) = 500 ms
LEVELS = "200ms 1500ms 500ms " + " ".join(["500ms"] * 15)


@pytest.mark.parametrize("mode", ["sync", "async", "oneway", "batch"])
def test_sends_of_every_kind_reach_a_push_consumer_exactly_once(broker, agents, mode):
    topic = uniq(f"Tj{mode}")
    broker.create_topic(topic, 4)
    prod = agents.run_java("produce", broker, topic=topic, mode=mode, count=20, key="k", tag="TagA")
    sent = sent_ok(prod, 20)
    if mode != "oneway":
        assert {e["status"] for e in sent} == {"SEND_OK"}
        assert all(len(e["offset_msg_id"]) == 32 for e in sent)
    cons = agents.run_java("consume", broker, group=uniq("GIDj"), topic=topic, until_count=20, timeout=60)
    assert_exactly(received(cons), sent, f"java {mode}")
    if mode != "oneway":
        ids = {e["body"]: e["msg_id"] for e in sent}
        assert all(e["msg_id"] == ids[e["body"]] for e in received(cons))  # UNIQ_KEY survives the trip


def test_orderly_sends_are_consumed_in_order_per_queue(broker, agents):
    topic = uniq("TjOrd")
    broker.create_topic(topic, 4)
    sent = sent_ok(agents.run_java("produce", broker, topic=topic, mode="orderly", count=40, shards=4), 40)
    cons = agents.run_java("consume", broker, group=uniq("GIDj"), topic=topic, until_count=40, timeout=60,
                           orderly=True)
    got = received(cons)
    assert_exactly(got, sent, "orderly")
    by_queue = defaultdict(list)
    for e in got:
        by_queue[e["queue_id"]].append(int(e["body"].rsplit("-", 1)[1]))
    assert len(by_queue) == 4
    for q, seq in by_queue.items():
        assert seq == sorted(seq), f"queue {q} consumed out of order: {seq}"
        assert {i % 4 for i in seq} == {seq[0] % 4}


def test_broadcasting_consumers_each_get_everything(broker, agents):
    topic, group = uniq("TjBc"), uniq("GIDj")
    broker.create_topic(topic, 2)
    a = agents.java("consume", broker, name="java-A", group=group, topic=topic, until_count=10, timeout=60,
                    model="broadcasting")
    b = agents.java("consume", broker, name="java-B", group=group, topic=topic, until_count=10, timeout=60,
                    model="broadcasting")
    a.wait_event("started", 60)
    b.wait_event("started", 60)
    sent = sent_ok(agents.run_java("produce", broker, topic=topic, count=10), 10)
    assert a.wait_exit(60) == 0 and b.wait_exit(60) == 0
    assert_exactly(received(a), sent, "broadcast A")
    assert_exactly(received(b), sent, "broadcast B")


def test_lite_pull_consumer_reads_and_commits(broker, agents):
    topic, group = uniq("TjLite"), uniq("GIDj")
    broker.create_topic(topic, 2)
    sent = sent_ok(agents.run_java("produce", broker, topic=topic, count=12), 12)
    cons = agents.run_java("litepull", broker, group=group, topic=topic, until_count=12, timeout=60)
    assert {e["body"] for e in received(cons)} == {e["body"] for e in sent}
    committed = sum(wire.consumer_offset(broker.addr, group, topic, q) or 0 for q in range(2))
    assert committed == 12


def test_delay_levels_are_never_early_on_the_producers_clock(broker_factory, agents):
    broker = broker_factory({"messageDelayLevel": LEVELS})
    topic = uniq("TjDelay")
    broker.create_topic(topic, 2)
    sent = sent_ok(agents.run_java("produce", broker, topic=topic, count=10, delay_level=2, tag="D"), 10)
    cons = agents.run_java("consume", broker, group=uniq("GIDj"), topic=topic, until_count=10, timeout=60)
    t0 = {e["body"]: e["t_ms"] for e in sent}
    got = received(cons)
    assert_exactly(got, sent, "delay level 2")
    for e in got:
        # never early: stored in the real topic strictly after send start + 1.5 s, received no sooner
        assert e["store_ts"] > t0[e["body"]] + 1500, (e, t0[e["body"]])
        assert e["recv_ms"] >= t0[e["body"]] + 1500
        assert e["props"]["DELAY"] == "2" and e["props"]["REAL_TOPIC"] == topic and e["topic"] == topic


def test_timer_properties_deliver_at_and_after_a_delay(broker, agents):
    topic = uniq("TjTimer")
    broker.create_topic(topic, 2)
    at = int(time.time() * 1000) + 2000
    sent_at = sent_ok(agents.run_java("produce", broker, topic=topic, count=5, body_prefix="at-",
                                      property=[f"TIMER_DELIVER_MS={at}"]), 5)
    sent_after = sent_ok(agents.run_java("produce", broker, topic=topic, count=5, body_prefix="sec-",
                                         property=["TIMER_DELAY_SEC=2"]), 5)
    cons = agents.run_java("consume", broker, group=uniq("GIDj"), topic=topic, until_count=10, timeout=60)
    got = received(cons)
    assert_exactly(got, sent_at + sent_after, "timers")
    t0 = {e["body"]: e["t_ms"] for e in sent_after}
    for e in got:
        if e["body"].startswith("at-"):
            assert e["store_ts"] >= at and e["recv_ms"] >= at, e
        else:
            assert e["store_ts"] > t0[e["body"]] + 2000 and e["recv_ms"] >= t0[e["body"]] + 2000, e


def test_reconsume_later_retries_then_lands_in_the_dlq(broker_factory, agents):
    broker = broker_factory({"messageDelayLevel": LEVELS})
    topic, group = uniq("TjDlq"), uniq("GIDj")
    broker.create_topic(topic, 1)
    sent = sent_ok(agents.run_java("produce", broker, topic=topic, count=3), 3)
    want = {e["body"] for e in sent}
    # max 1 reconsume: the first delivery and one retry fail, then the broker moves it to %DLQ%<group>
    cons = agents.java("consume", broker, group=group, topic=topic, until_count=0, timeout=120,
                       fail_forever=True, max_reconsume_times=1)
    dlq = f"%DLQ%{group}"
    cons.wait_for(lambda a: sum(1 for e in a.of("received") if e["reconsume_times"] >= 1) >= 3, 60,
                  "every message redelivered once")
    deadline = time.monotonic() + 30
    while wire.max_offset(broker.addr, dlq, 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the DLQ put follows the consumer's send-back: poll the broker's offset
    assert wire.max_offset(broker.addr, dlq, 0) == 3
    tries = defaultdict(list)
    for e in cons.of("received"):
        tries[e["body"]].append(e["reconsume_times"])
    assert set(tries) == want and all(sorted(t)[:2] == [0, 1] for t in tries.values()), dict(tries)


def test_transactions_commit_rollback_and_check_back(broker_factory, agents):
    broker = broker_factory({"transactionTimeOut": 500, "transactionCheckInterval": 500})
    topic = uniq("TjTx")
    broker.create_topic(topic, 2)
    committed = sent_ok(agents.run_java("transaction", broker, topic=topic, count=3, local="commit",
                                        body_prefix="commit-"), 3)
    sent_ok(agents.run_java("transaction", broker, topic=topic, count=3, local="rollback", body_prefix="rollback-"), 3)
    checked = agents.run_java("transaction", broker, topic=topic, count=2, local="unknown", check="commit",
                              until_checks=2, timeout=60, body_prefix="checked-")
    sent_checked = sent_ok(checked, 2)
    assert {e["body"] for e in checked.of("check")} == {e["body"] for e in sent_checked}
    cons = agents.run_java("consume", broker, group=uniq("GIDj"), topic=topic, until_count=5, timeout=60)
    got = received(cons)
    assert_exactly(got, committed + sent_checked, "transactions")
    assert not [e for e in got if e["body"].startswith("rollback-")]
    assert sum(wire.max_offset(broker.addr, topic, q) for q in range(2)) == 5  # a rollback never reaches the topic
