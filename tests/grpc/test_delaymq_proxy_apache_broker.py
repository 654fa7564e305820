"""delaymq-proxy, on each grpcServerStack (grpcio, the default, and envoy), in front of Apache RocketMQ 5.1.3's own
name server and broker (../shared/rocketmq5, timer wheel on), the other direction of tests/grpc/test_apache_proxy.py:
the official Python 5.1.2 client sends normal, FIFO and delayed messages, receives, acks and changes the invisible
duration through delaymq-proxy (the Node client 1.0.8 sends, receives, acks and schedules), which reaches the
Apache broker only over remoting (SEND_MESSAGE_V2, POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME with the
Apache broker's own extraInfo receipts)."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass

import pytest

from server.grpc.v2 import definition_pb2 as pb
from tests.grpc.conftest import uniq
from tests.grpc.test_apache_proxy import (
    node_send_receive_ack_five,
    node_three_delayed_never_early,
    prepare,
    send_receive_ack_five,
    three_delayed_never_early,
)
from tests.grpc.test_delaymq_proxy import consumer_settings, route_types
from tests.helpers.broker import pick_port_pair
from tests.helpers.cluster import route_brokers, wait_until
from tests.helpers.java import JavaServer
from tests.helpers.rocketmq5 import Rmq5Process, requires_rocketmq5

pytestmark = [pytest.mark.interop, pytest.mark.java, requires_rocketmq5, pytest.mark.timeout(600)]
BROKER_NAME = "apache-a"


@dataclass
class Endpoint:
    grpc_addr: str


@dataclass
class ApacheCluster:
    namesrv: JavaServer  # Rmq5Process.start() answers the JavaServer it is
    broker: JavaServer


@pytest.fixture(scope="module")
def apache(tmp_path_factory):
    work = tmp_path_factory.mktemp("apache5")
    ns_port, broker_port = pick_port_pair(), pick_port_pair()
    ns = Rmq5Process("mqnamesrv", work / "ns", {"listenPort": ns_port}, ns_port).start()
    try:
        broker = Rmq5Process("mqbroker", work / "broker", {
            "brokerClusterName": "DefaultCluster", "brokerName": BROKER_NAME, "brokerId": 0,
            "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH", "namesrvAddr": ns.addr,
            "brokerIP1": "127.0.0.1", "listenPort": broker_port, "haListenPort": broker_port + 1,
            "storePathRootDir": work / "broker" / "store", "storePathCommitLog": work / "broker" / "store" / "commitlog",
            "timerWheelEnable": "true", "autoCreateTopicEnable": "true", "mappedFileSizeCommitLog": 67108864,
            "mappedFileSizeConsumeQueue": 600000}, broker_port, ready_timeout=120).start()
    except BaseException:
        ns.stop()
        raise
    try:
        yield ApacheCluster(ns, broker)
    finally:
        broker.stop()
        ns.stop()


def topic_on_apache(c: ApacheCluster, prefix: str, message_type: str = "NORMAL",
                    orderly: bool = False) -> tuple[str, str]:
    topic, group = uniq(prefix), uniq(prefix + "G")
    asyncio.run(prepare(c.broker.addr, topic, group, message_type, orderly))
    wait_until(lambda: route_brokers(c.namesrv.addr, topic) == {BROKER_NAME}, 30,
               "the Apache broker's route of the topic on its name server", c.broker.output)
    return topic, group


def start_proxy(agents, c: ApacheCluster, stack: str) -> Endpoint:
    """`stack`: grpcServerStack (tests/grpc/conftest.py's proxy_stack; on envoy the ready line names Envoy's pid)."""
    port = pick_port_pair()
    p = agents._start("delaymq-proxy", [sys.executable, "-m", "server.proxy", "--namesrv", c.namesrv.addr,
                                        "--grpc-port", str(port), "--host", "127.0.0.1", "--grpc-server-stack", stack])
    p.wait_for(lambda a: any("delaymq proxy ready on" in line for line in a.raw_lines), 30, "delaymq-proxy to start")
    ready = next(line for line in p.raw_lines if "delaymq proxy ready on" in line)
    assert ("(envoy pid " in ready) == (stack == "envoy"), ready
    return Endpoint(f"127.0.0.1:{port}")


def test_normal_messages_through_delaymq_proxy_to_an_apache_broker(apache, agents, proxy_stack):
    topic, group = topic_on_apache(apache, "AbN")
    send_receive_ack_five(agents, start_proxy(agents, apache, proxy_stack), topic, group)


def test_fifo_messages_through_delaymq_proxy_to_an_apache_broker_arrive_in_order(apache, agents, proxy_stack):
    topic, group = topic_on_apache(apache, "AbF", "FIFO", orderly=True)
    proxy = start_proxy(agents, apache, proxy_stack)
    # the Apache broker's TopicConfig (GET_TOPIC_CONFIG) and group config (GET_SUBSCRIPTIONGROUP_CONFIG) as the
    # proxy reads them: the route takes FIFO messages only, the group's consumers are told fifo
    assert asyncio.run(route_types(proxy.grpc_addr, topic)) == [[pb.FIFO]]
    assert asyncio.run(consumer_settings(proxy.grpc_addr, group, topic)).subscription.fifo is True
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=6, message_group="g1", timeout=90)
    assert len(sent.of("sent")) == 6
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=6, max_seconds=60, timeout=90)
    assert [e["body"] for e in c.of("received")] == [f"m{i}" for i in range(6)]
    assert {e["group"] for e in c.of("received")} == {"g1"}


def test_delayed_messages_through_delaymq_proxy_to_an_apache_broker_never_arrive_early(apache, agents, proxy_stack):
    topic, group = topic_on_apache(apache, "AbD", "DELAY")
    three_delayed_never_early(agents, start_proxy(agents, apache, proxy_stack), topic, group)


def test_node_client_through_delaymq_proxy_to_an_apache_broker(apache, agents, proxy_stack):
    """Apache's Node client 1.0.8 through delaymq-proxy in front of the Apache 5.1.3 broker: send, receive, ack,
    and scheduled messages (the Apache broker's timer wheel) delivered not early."""
    topic, group = topic_on_apache(apache, "AbNn")
    delayed, dgroup = topic_on_apache(apache, "AbNd", "DELAY")
    proxy = start_proxy(agents, apache, proxy_stack)
    node_send_receive_ack_five(agents, proxy, topic, group)
    node_three_delayed_never_early(agents, proxy, delayed, dgroup)


def test_change_invisible_duration_through_delaymq_proxy_to_an_apache_broker_redelivers(apache, agents, proxy_stack):
    topic, group = topic_on_apache(apache, "AbC")
    proxy = start_proxy(agents, apache, proxy_stack)
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=1, timeout=90)
    [msg] = sent.of("sent")
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=2, change_invisible=1,
                        max_seconds=60, timeout=90)
    got = c.of("received")
    assert [(e["id"], e["attempt"]) for e in got] == [(msg["id"], 1), (msg["id"], 2)]
    assert len(c.of("changed")) == 2


def test_a_redelivery_from_the_apache_pop_retry_topic_is_acknowledged_for_good(apache, agents, proxy_stack):
    """Unacked, the message comes back from the Apache broker's pop retry topic (%RETRY%group_topic, the
    receipt's topicMark 1) as attempt 2; its ACK through the proxy names that retry topic and holds: nothing
    comes back after the second delivery's invisible time."""
    topic, group = topic_on_apache(apache, "AbR")
    proxy = start_proxy(agents, apache, proxy_stack)
    [msg] = agents.run_rmq5("produce", proxy, topic=topic, count=1, timeout=90).of("sent")
    first = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=1, no_ack=True, invisible=2,
                            max_seconds=30, timeout=60)
    assert [(e["id"], e["attempt"]) for e in first.of("received")] == [(msg["id"], 1)]
    second = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=1, invisible=3,
                             max_seconds=60, timeout=90)
    assert [(e["id"], e["attempt"]) for e in second.of("received")] == [(msg["id"], 2)]
    assert second.of("received")[0]["properties"] == {}  # the broker's 1ST_POP_TIME is a system property
    assert len(second.of("acked")) == 1
    again = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=1, max_seconds=10,
                            timeout=60, expect_code=3)
    assert again.of("received") == []


def test_an_orderly_group_gets_a_fifo_queues_next_message_only_after_the_previous_is_done(apache, agents, proxy_stack):
    """The group is orderly (consumeMessageOrderly, read by the proxy with GET_SUBSCRIPTIONGROUP_CONFIG), so
    the proxy pops with order=true: one message at a time and unacknowledged, the queue's next message is
    held back and the same message comes again after its invisible time, as attempt 2 (orderCountInfo)."""
    topic, group = topic_on_apache(apache, "AbO", "FIFO", orderly=True)
    proxy = start_proxy(agents, apache, proxy_stack)
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=3, message_group="g1", timeout=90)
    assert len(sent.of("sent")) == 3
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=2, batch=1, no_ack=True,
                        invisible=3, max_seconds=60, timeout=90)
    assert [(e["body"], e["attempt"]) for e in c.of("received")] == [("m0", 1), ("m0", 2)]
