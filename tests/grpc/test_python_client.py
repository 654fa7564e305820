"""Apache's RocketMQ 5 Python client (rocketmq-python-client 5.1.2, gRPC) against the broker's gRPC port.

Each test drives the real client in a subprocess (tests/interop/rmq5_agent.py) and checks what it
saw: normal, FIFO, scheduled (+ recall) and transactional sends; SimpleConsumer receive / ack /
change invisible duration; PushConsumer.
"""

from __future__ import annotations

import time

import pytest

from tests.grpc.conftest import grpc_broker, uniq

pytestmark = [pytest.mark.interop]


def bodies(agent, kind="received"):
    return [e["body"] for e in agent.of(kind)]


def test_send_then_simple_consumer_receives_and_acks(sbroker, agents):
    topic, group = uniq("T5"), uniq("G5")
    sent = agents.run_rmq5("produce", sbroker, topic=topic, count=5, tag="tagA", keys=["k1", "k2"])
    assert len(sent.of("sent")) == 5
    c = agents.run_rmq5("simple", sbroker, group=group, topic=topic, until_count=5, tag="tagA")
    got = c.of("received")
    assert sorted(bodies(c)) == [f"m{i}" for i in range(5)]
    assert {e["id"] for e in got} == {e["id"] for e in sent.of("sent")}
    assert all(e["tag"] == "tagA" and e["keys"] == ["k1", "k2"] and e["attempt"] == 1 for e in got)
    assert len(c.of("acked")) == 5
    # acked means done: the group gets nothing more
    again = agents.run_rmq5("simple", sbroker, group=group, topic=topic, until_count=1, max_seconds=4,
                            expect_code=3)
    assert again.of("received") == []


def test_tag_filter_only_matching(gbroker, agents):
    topic, group = uniq("T5"), uniq("G5")
    agents.run_rmq5("produce", gbroker, topic=topic, count=3, tag="red", body_prefix="r")
    agents.run_rmq5("produce", gbroker, topic=topic, count=3, tag="blue", body_prefix="b")
    c = agents.run_rmq5("simple", gbroker, group=group, topic=topic, until_count=3, tag="blue")
    assert sorted(bodies(c)) == ["b0", "b1", "b2"]


def test_unacked_message_comes_back_with_attempt_plus_one(gbroker, agents):
    topic, group = uniq("T5"), uniq("G5")
    agents.run_rmq5("produce", gbroker, topic=topic, count=1)
    # first receive does not ack; invisible for 2 s, then the same message is delivered again
    c = agents.run_rmq5("simple", gbroker, group=group, topic=topic, until_count=2, no_ack=True, invisible=2,
                        max_seconds=20)
    got = c.of("received")
    assert [e["body"] for e in got] == ["m0", "m0"]
    assert [e["attempt"] for e in got] == [1, 2]
    # popped at or after the first request started, invisible for 2 s from then: never earlier
    assert got[1]["t"] - got[0]["t_req"] >= 2000


def test_change_invisible_duration_brings_it_back_sooner(gbroker, agents):
    topic, group = uniq("T5"), uniq("G5")
    agents.run_rmq5("produce", gbroker, topic=topic, count=1)
    # received with 60 s invisibility, changed to 1 s: redelivered well before the 60 s
    c = agents.run_rmq5("simple", gbroker, group=group, topic=topic, until_count=2, invisible=60,
                        change_invisible=1, max_seconds=20)
    got = c.of("received")
    assert [e["attempt"] for e in got] == [1, 2]
    assert got[1]["t"] - got[0]["t"] < 20_000
    assert len(c.of("changed")) == 2


def test_fifo_message_group_keeps_order(broker_factory, broker_stack, agents, tmp_path):
    b = grpc_broker(broker_factory, stack=broker_stack)
    topic, group = uniq("T5"), uniq("G5")
    sent = agents.run_rmq5("produce", b, topic=topic, count=20, message_group="order-1")
    assert len(sent.of("sent")) == 20
    c = agents.run_rmq5("simple", b, group=group, topic=topic, until_count=20)
    got = c.of("received")
    assert bodies(c) == [f"m{i}" for i in range(20)]
    assert {e["group"] for e in got} == {"order-1"}


def test_scheduled_message_arrives_not_before_its_time_and_recall_cancels(sbroker, agents):
    topic, group = uniq("T5"), uniq("G5")
    # 5.1.2 sends delivery_timestamp as epoch seconds; 15 s: room for three agent starts on a loaded host (8 s
    # was not: the recall agent once started after the message was due)
    at = int(time.time()) + 15
    keep = agents.run_rmq5("produce", sbroker, topic=topic, count=1, deliver_at=at, body_prefix="keep")
    drop = agents.run_rmq5("produce", sbroker, topic=topic, count=1, deliver_at=at, body_prefix="drop")
    handle = drop.of("sent")[0]["recall"]
    assert handle and keep.of("sent")[0]["recall"]
    r = agents.run_rmq5("recall", sbroker, topic=topic, handle=handle)
    assert r.of("recalled") and r.of("recalled")[0]["id"] == drop.of("sent")[0]["id"]
    # the consumer runs until 6 s past the delivery time: the kept message arrives, the recalled one never
    c = agents.run_rmq5("simple", sbroker, group=group, topic=topic, until_count=2,
                        max_seconds=max(6.0, at + 6 - time.time()), expect_code=3, timeout=90)
    got = c.of("received")
    assert [e["body"] for e in got] == ["keep0"]
    assert got[0]["t"] >= at * 1000


def test_transaction_commit_rollback_and_check_back(broker_factory, broker_stack, agents):
    b = grpc_broker(broker_factory, {"transactionTimeOut": 1000, "transactionCheckInterval": 1000}, stack=broker_stack)
    topic, group = uniq("T5"), uniq("G5")
    agents.run_rmq5("transaction", b, topic=topic, count=2, end="commit", body_prefix="c")
    agents.run_rmq5("transaction", b, topic=topic, count=2, end="rollback", body_prefix="r")
    # nobody ends these: the broker asks the producer (RecoverOrphanedTransactionCommand), which commits
    checked = agents.run_rmq5("transaction", b, topic=topic, count=1, end="none", check="commit", body_prefix="u",
                              linger=20, until_checks=1)
    assert checked.of("checked")[0]["id"] == checked.of("sent")[0]["id"]
    c = agents.run_rmq5("simple", b, group=group, topic=topic, until_count=3, max_seconds=15)
    assert sorted(bodies(c)) == ["c0", "c1", "u0"]


def test_push_consumer_consumes_and_retries_a_failure(gbroker, agents):
    topic, group = uniq("T5"), uniq("G5")
    agents.run_rmq5("produce", gbroker, topic=topic, count=5)
    c = agents.run_rmq5("push", gbroker, group=group, topic=topic, until_count=5, fail_first=True, max_seconds=40)
    assert sorted(bodies(c)) == [f"m{i}" for i in range(5)]
    assert {e["attempt"] for e in c.of("received")} == {2}


def test_thread_stack_command_the_python_client_ignores_times_out_and_the_session_goes_on(gbroker, agents):
    """rocketmq-python-client 5.1.2 does not answer PrintThreadStackTraceCommand (the Node client does:
    test_node_client.py). mqadmin consumerStatus then gets CONSUME_MSG_TIMEOUT after the broker's relay
    timeout, not a hang, and the consumer keeps receiving on the same session."""
    from codec.codes import RequestCode, ResponseCode
    from server.processors.admin_ops import RELAY_TIMEOUT_S
    from tests.helpers import wire

    topic, group = uniq("T5"), uniq("G5")
    agents.run_rmq5("produce", gbroker, topic=topic, count=1, body_prefix="a")
    c = agents.rmq5("simple", gbroker, group=group, topic=topic, until_count=2, max_seconds=40)
    cid = c.wait_event("started", 30)["client_id"]
    c.wait_for(lambda a: len(a.of("acked")) == 1, 20, "the first message received and acked")
    t0 = time.monotonic()
    r = wire.invoke(gbroker.addr, int(RequestCode.GET_CONSUMER_RUNNING_INFO),
                    {"consumerGroup": group, "clientId": cid, "jstackEnable": "true"}, timeout=RELAY_TIMEOUT_S + 10)
    assert r.code == ResponseCode.CONSUME_MSG_TIMEOUT, (r.code, r.remark)
    assert time.monotonic() - t0 >= RELAY_TIMEOUT_S - 0.5
    agents.run_rmq5("produce", gbroker, topic=topic, count=1, body_prefix="b")
    assert c.wait_exit(30) == 0, c.diagnostics()
    assert bodies(c) == ["a0", "b0"]
