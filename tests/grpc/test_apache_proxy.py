"""Apache's own RocketMQ 5.1.3 proxy in cluster mode (`mqproxy -pm cluster`, ../shared/rocketmq5) in front of a
delaymq broker: it starts (system topics created through the cluster-name route), and the RocketMQ 5 Python
client sends and pop-receives through it, the proxy reaching the broker only over remoting (POP_MESSAGE,
ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME with Apache's extraInfo receipts)."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass

import pytest

from codec.codes import ResponseCode
from tests.grpc.conftest import uniq
from tests.helpers.broker import pick_port_pair
from tests.helpers.java import SHARED_DIR
from tests.server.raw import RawClient

RMQ5 = SHARED_DIR / "rocketmq5"
pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(not (RMQ5 / "bin" / "mqproxy").is_file() or shutil.which("java") is None,
                       reason=f"no Apache RocketMQ 5.1.3 at {RMQ5} (../shared absent) or no java on PATH"),
]
CREATE_TOPIC, CREATE_GROUP, UPDATE_OFFSET = 17, 200, 15


@dataclass
class Endpoint:
    grpc_addr: str  # what the agents dial (the proxy's gRPC port)


def start_proxy(agents, tmp_path, namesrv: str) -> Endpoint:
    grpc_port, remoting_port = pick_port_pair(), pick_port_pair()
    conf = tmp_path / "proxy.json"
    conf.write_text(json.dumps({"rocketMQClusterName": "DefaultCluster", "grpcServerPort": grpc_port,
                                "remotingListenPort": remoting_port, "namesrvAddr": namesrv}))
    home = tmp_path / "proxy-home"
    home.mkdir()
    proxy = agents._start("apache-proxy", [str(RMQ5 / "bin" / "mqproxy"), "-pm", "cluster", "-pc", str(conf)],
                          env={"RMQ_USER_HOME": str(home), "RMQ_HEAP": "-Xms128m -Xmx384m"})
    proxy.wait_for(lambda a: any("startup successfully" in line for line in a.raw_lines), 90,
                   "Apache's proxy to start in front of the delaymq broker")
    return Endpoint(f"127.0.0.1:{grpc_port}")


async def prepare(addr: str, topic: str, group: str, message_type: str = "NORMAL", orderly: bool = False) -> None:
    """The topic (1 queue, its message.type), the group, and the group's offset at 0: Apache's proxy pops
    with initMode MAX, which would start a new group at the queue's last message."""
    c = await RawClient.connect(addr)
    try:
        r = await c.invoke(CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1",
                                          "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                          "topicSysFlag": "0", "order": "false",
                                          "attributes": f"+message.type={message_type}"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = await c.invoke(CREATE_GROUP, {}, json.dumps({"groupName": group, "consumeMessageOrderly": orderly}).encode())
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = await c.invoke(UPDATE_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0",
                                           "commitOffset": "0"})
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await c.close()


def send_receive_ack_five(agents, endpoint, topic: str, group: str) -> None:
    """Five tagged sends through `endpoint`, a simple consumer receives and acks exactly them (ids and
    bodies), and afterwards the broker hands nothing out again (acked for good, wherever the ack went)."""
    sent = agents.run_rmq5("produce", endpoint, topic=topic, count=5, tag="tagA", timeout=90)
    assert len(sent.of("sent")) == 5
    c = agents.run_rmq5("simple", endpoint, group=group, topic=topic, until_count=5, tag="tagA", max_seconds=60,
                        timeout=90)
    got = c.of("received")
    assert sorted(e["body"] for e in got) == [f"m{i}" for i in range(5)]
    assert {e["id"] for e in got} == {e["id"] for e in sent.of("sent")}
    assert len(c.of("acked")) == 5
    again = agents.run_rmq5("simple", endpoint, group=group, topic=topic, until_count=1, max_seconds=5,
                            timeout=60, expect_code=3)
    assert again.of("received") == []


def three_delayed_never_early(agents, endpoint, topic: str, group: str) -> None:
    """A simple consumer waits; three messages due 2 s after their send go through `endpoint`; all three
    arrive, none before its delivery time (the client sends whole seconds)."""
    c = agents.rmq5("simple", endpoint, group=group, topic=topic, until_count=3, max_seconds=60)
    c.wait_event("started", 60)
    sent = agents.run_rmq5("produce", endpoint, topic=topic, count=3, deliver_in=2, timeout=90)
    assert len(sent.of("sent")) == 3
    assert c.wait_exit(90) == 0, c.diagnostics()
    due = {e["id"]: e["deliver_s"] * 1000 for e in sent.of("sent")}
    got = c.of("received")
    assert sorted(e["body"] for e in got) == ["m0", "m1", "m2"]
    for e in got:
        assert e["t"] >= due[e["id"]], (e, due[e["id"]])


def node_send_receive_ack_five(agents, endpoint, topic: str, group: str, await_ms: int = 2000) -> None:
    """`send_receive_ack_five` with Apache's Node client 1.0.8 (tests/interop/node/rmq5.js): five tagged sends, a
    SimpleConsumer receives and acks exactly them (ids, bodies, first attempts, digests intact), then nothing.
    `await_ms`: the consumer's long polling time (Apache's proxy refuses one under 5 s,
    grpcClientConsumerMinLongPollingTimeoutMillis)."""
    sent = agents.run_node5("produce", endpoint, topic=topic, count=5, tag="tagA", body_prefix="n", timeout=90)
    assert [e["i"] for e in sent.of("sent")] == list(range(5))
    c = agents.run_node5("simple", endpoint, group=group, topic=topic, until_count=5, tag="tagA", max_seconds=60,
                         await_ms=await_ms, timeout=90)
    got = c.of("received")
    assert sorted(e["body"] for e in got) == [f"n{i}" for i in range(5)]
    assert {e["id"] for e in got} == {e["id"] for e in sent.of("sent")}
    assert all(e["attempt"] == 1 and e["tag"] == "tagA" and e["corrupted"] is False for e in got), got
    assert len(c.of("acked")) == 5
    again = agents.run_node5("simple", endpoint, group=group, topic=topic, until_count=1, max_seconds=5,
                             await_ms=await_ms, timeout=60, expect_code=3)
    assert again.of("received") == []


def node_three_delayed_never_early(agents, endpoint, topic: str, group: str, await_ms: int = 2000) -> None:
    """`three_delayed_never_early` with the Node client: it stamps delivery_timestamp = Date.now() + 2 s inside
    send() (just after the agent's t_send); each message comes back carrying that stamp, never before it (one
    host, one clock)."""
    c = agents.node5("simple", endpoint, group=group, topic=topic, until_count=3, max_seconds=60, await_ms=await_ms)
    c.wait_event("started", 60)
    sent = agents.run_node5("produce", endpoint, topic=topic, count=3, delay=2000, timeout=90)
    assert len(sent.of("sent")) == 3
    assert c.wait_exit(90) == 0, c.diagnostics()
    by_id = {e["id"]: e for e in sent.of("sent")}
    got = c.of("received")
    assert sorted(e["body"] for e in got) == ["m0", "m1", "m2"]
    for r in got:
        e = by_id[r["id"]]
        assert r["deliver_ms"] is not None and e["deliver_ms"] <= r["deliver_ms"] < e["deliver_ms"] + 2000, (r, e)
        assert r["t"] >= r["deliver_ms"], (r, e)
    assert len(c.of("acked")) == 3


def test_python_client_sends_and_receives_through_apaches_cluster_proxy(broker_factory, agents, tmp_path):
    b = broker_factory()
    topic, group = uniq("PxT"), uniq("PxG")
    asyncio.run(prepare(b.addr, topic, group))
    send_receive_ack_five(agents, start_proxy(agents, tmp_path, b.addr), topic, group)


def test_scheduled_messages_through_apaches_cluster_proxy_arrive_at_their_time(broker_factory, agents, tmp_path):
    b = broker_factory()
    topic, group = uniq("PxD"), uniq("PxDG")
    asyncio.run(prepare(b.addr, topic, group, "DELAY"))
    three_delayed_never_early(agents, start_proxy(agents, tmp_path, b.addr), topic, group)


def test_node_client_sends_receives_and_schedules_through_apaches_cluster_proxy(broker_factory, agents, tmp_path):
    """Apache's Node client 1.0.8 through Apache's 5.1.3 proxy (cluster mode) in front of a delaymq broker: send,
    receive, ack, and scheduled messages delivered not early (one proxy for both topics)."""
    b = broker_factory()
    topic, group = uniq("PxNn"), uniq("PxNnG")
    delayed, dgroup = uniq("PxNd"), uniq("PxNdG")
    asyncio.run(prepare(b.addr, topic, group))
    asyncio.run(prepare(b.addr, delayed, dgroup, "DELAY"))
    proxy = start_proxy(agents, tmp_path, b.addr)
    node_send_receive_ack_five(agents, proxy, topic, group, await_ms=5000)
    node_three_delayed_never_early(agents, proxy, delayed, dgroup, await_ms=5000)


def test_change_invisible_duration_through_apaches_cluster_proxy_redelivers(broker_factory, agents, tmp_path):
    b = broker_factory()
    topic, group = uniq("PxC"), uniq("PxCG")
    asyncio.run(prepare(b.addr, topic, group))
    proxy = start_proxy(agents, tmp_path, b.addr)
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=1, timeout=90)
    [msg] = sent.of("sent")
    # each delivery made visible again after 1 s (CHANGE_MESSAGE_INVISIBLETIME with the proxy's receipt)
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=2, change_invisible=1,
                        max_seconds=60, timeout=90)
    got = c.of("received")
    assert [(e["id"], e["attempt"]) for e in got] == [(msg["id"], 1), (msg["id"], 2)]
    assert len(c.of("changed")) == 2


def test_fifo_messages_through_apaches_cluster_proxy_arrive_in_order(broker_factory, agents, tmp_path):
    b = broker_factory()
    topic, group = uniq("PxF"), uniq("PxFG")
    asyncio.run(prepare(b.addr, topic, group, "FIFO", orderly=True))
    proxy = start_proxy(agents, tmp_path, b.addr)
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=6, message_group="g1", timeout=90)
    assert len(sent.of("sent")) == 6
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=6, max_seconds=60, timeout=90)
    assert [e["body"] for e in c.of("received")] == [f"m{i}" for i in range(6)]
    assert {e["group"] for e in c.of("received")} == {"g1"}
