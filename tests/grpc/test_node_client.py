"""Apache's RocketMQ 5 Node client (npm rocketmq-client-nodejs, pinned in package.json) over gRPC.

Each test drives the real client in a subprocess (tests/interop/node/rmq5.js). The client's
startup waits for the server's Telemetry settings answer (a producer with topics and every consumer
block until it comes), and it checks each received body against the body digest (`corrupted`), so a
passing receive proves both.
"""

from __future__ import annotations

import pytest

from tests.grpc.conftest import uniq

pytestmark = [pytest.mark.interop]


def test_node_producer_then_simple_consumer_receives_and_acks(sbroker, agents):
    topic, group = uniq("Tn5"), uniq("Gn5")
    sent = agents.run_node5("produce", sbroker, topic=topic, count=5, tag="tagA", body_prefix="n")
    assert [e["i"] for e in sent.of("sent")] == list(range(5))
    c = agents.run_node5("simple", sbroker, group=group, topic=topic, until_count=5, tag="tagA", max_seconds=20)
    got = c.of("received")
    assert sorted(e["body"] for e in got) == [f"n{i}" for i in range(5)]
    assert {e["id"] for e in got} == {e["id"] for e in sent.of("sent")}
    assert all(e["attempt"] == 1 and e["tag"] == "tagA" and e["corrupted"] is False for e in got), got
    assert len(c.of("acked")) == 5
    # acked means done: the group gets nothing more
    again = agents.run_node5("simple", sbroker, group=group, topic=topic, until_count=1, max_seconds=3,
                             expect_code=3)
    assert again.of("received") == []


def test_node_unacked_message_comes_back_with_attempt_plus_one(gbroker, agents):
    topic, group = uniq("Tn5"), uniq("Gn5")
    agents.run_node5("produce", gbroker, topic=topic, count=1)
    c = agents.run_node5("simple", gbroker, group=group, topic=topic, until_count=2, no_ack=True,
                         invisible=2000, max_seconds=20)
    got = c.of("received")
    assert [e["body"] for e in got] == ["m0", "m0"]
    assert [e["attempt"] for e in got] == [1, 2]
    assert got[1]["t"] - got[0]["t_req"] >= 2000


def test_node_delay_never_early_and_recall_cancels(gbroker, agents):
    topic, group = uniq("Tn5"), uniq("Gn5")
    delay_ms = 4000
    # three scheduled sends (delivery_timestamp = the producer's Date.now() + delay), then the
    # second is recalled by the recall handle from its send receipt
    p = agents.run_node5("produce", gbroker, topic=topic, count=3, delay=delay_ms, recall="1")
    sent = p.of("sent")
    assert all(e["recall"] for e in sent), sent
    assert [e["id"] for e in p.of("recalled")] == [sent[1]["id"]]
    assert p.of("recall_error") == []
    # the consumer runs until well past every delivery time: the recalled message never comes
    c = agents.run_node5("simple", gbroker, group=group, topic=topic, until_count=3,
                         max_seconds=delay_ms / 1000 + 5, expect_code=3)
    got = {e["body"]: e for e in c.of("received")}
    assert sorted(got) == ["m0", "m2"]
    for e in sent[0], sent[2]:
        r = got[f"m{e['i']}"]
        # the client stamps delivery_timestamp = its Date.now() + delay inside send(), a little after
        # t_send; the message carries that stamp back to the consumer
        assert e["deliver_ms"] <= r["deliver_ms"] < e["deliver_ms"] + 2000, (r, e)
        assert r["t"] >= r["deliver_ms"], (r, e)     # never early on the producer's clock (one host)
        assert r["corrupted"] is False


def test_node_and_python_5x_clients_share_the_store(gbroker, agents):
    topic = uniq("Tn5")
    agents.run_node5("produce", gbroker, topic=topic, count=3, body_prefix="node")
    agents.run_rmq5("produce", gbroker, topic=topic, count=3, body_prefix="py")
    c1 = agents.run_node5("simple", gbroker, group=uniq("Gn5"), topic=topic, until_count=6, max_seconds=15)
    c2 = agents.run_rmq5("simple", gbroker, group=uniq("G5"), topic=topic, until_count=6, max_seconds=15)
    want = sorted([f"node{i}" for i in range(3)] + [f"py{i}" for i in range(3)])
    assert sorted(e["body"] for e in c1.of("received")) == want
    assert sorted(e["body"] for e in c2.of("received")) == want
    assert all(e["corrupted"] is False for e in c1.of("received"))


async def test_thread_stack_and_verify_message_commands_reach_the_node_client_and_come_back(gbroker, agents):
    """mqadmin's consumerStatus (GET_CONSUMER_RUNNING_INFO) and consumeMessage (CONSUME_MESSAGE_DIRECTLY)
    to a 5.x consumer: the broker relays them on the client's Telemetry stream as
    PrintThreadStackTraceCommand / VerifyMessageCommand and answers with what the client sent back."""
    import json

    from client.admin import Admin
    from codec.codes import RequestCode
    from tests.grpc.raw import RawClient
    from tests.helpers import wire

    topic, group = uniq("Tn5"), uniq("Gn5")
    c = RawClient(gbroker.grpc_addr)
    try:
        sent = await c.send(topic, b"check-me")
    finally:
        await c.close()
    async with Admin(gbroker.addr) as admin:
        found = await admin.query_by_key(topic, sent.entries[0].message_id, unique=True)
    assert len(found) == 1
    w = agents.node5("watch", gbroker, group=group, topic=topic, seconds=40)
    cid = w.wait_event("started", 30)["client_id"]  # startup returns after the settings answer
    assert cid in wire.consumer_ids(gbroker.addr, group)  # a 5.x consumer is a member of its group

    r = wire.invoke(gbroker.addr, int(RequestCode.GET_CONSUMER_RUNNING_INFO),
                    {"consumerGroup": group, "clientId": cid, "jstackEnable": "true"}, timeout=15)
    assert r.code == 0, r.remark
    info = json.loads(r.body)
    assert info["jstack"] == "mock stack"  # what rocketmq-client-nodejs 1.0.8 answers
    assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_POP"
    assert [s["topic"] for s in info["subscriptionSet"]] == [topic]

    r = wire.invoke(gbroker.addr, int(RequestCode.CONSUME_MESSAGE_DIRECTLY),
                    {"consumerGroup": group, "clientId": cid, "msgId": found[0].offset_msg_id,
                     "brokerName": "broker-a"}, timeout=15)
    assert r.code == 0, r.remark
    res = json.loads(r.body)
    # the Node client does not verify messages: it answers NOT_IMPLEMENTED, which comes back as such
    assert (res["consumeResult"], res["remark"]) == ("CR_THROW_EXCEPTION", "NOT_IMPLEMENTED")

    # an unknown client of the group: refused at once, nothing waits
    r = wire.invoke(gbroker.addr, int(RequestCode.GET_CONSUMER_RUNNING_INFO),
                    {"consumerGroup": group, "clientId": "nobody@1", "jstackEnable": "true"}, timeout=15)
    assert r.code != 0 and "not online" in (r.remark or "")
