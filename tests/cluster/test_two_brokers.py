"""Two delaymq brokers (broker-a, broker-b) behind delaymq-namesrv with the stock Java client: a topic
nobody created is auto-created through TBW102 on both, the producer spreads over both brokers' queues,
one consumer is balanced over all of them, and each broker delivers its own delay-level and timer
messages, never early."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers.cluster import route, route_brokers, wait_until
from tests.helpers.java import requires_java

pytestmark = [requires_java, pytest.mark.java]
LEVELS = "200ms 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s"


def test_two_brokers_share_an_auto_created_topic_and_each_delivers_its_own_scheduled_messages(
        namesrv_factory, cluster_broker, java_client):
    ns = namesrv_factory()
    conf = {"messageDelayLevel": LEVELS, "timerPrecisionMs": 100}
    a, b = cluster_broker("broker-a", ns, **conf), cluster_broker("broker-b", ns, **conf)
    topic = "Ttwo"
    sent = java_client("produce", ns.addr, topic, "40", "0", "m")
    per_broker = Counter(s[1] for s in sent)
    assert set(per_broker) == {"broker-a", "broker-b"} and min(per_broker.values()) >= 10, per_broker
    # each broker auto-created the topic on its first message and registered it at once
    wait_until(lambda: route_brokers(ns.addr, topic) == {"broker-a", "broker-b"}, 10,
               "both brokers' queues of the auto-created topic", lambda: a.diagnostics() + b.diagnostics())
    queues = {(q["brokerName"], q["writeQueueNums"]) for q in route(ns.addr, topic)["queueDatas"]}
    assert queues == {("broker-a", 4), ("broker-b", 4)}  # min(producer's 4, TBW102's 8) on each
    delayed = java_client("produce", ns.addr, topic, "10", "2", "d")  # level 2 = 1 s
    timed = java_client("produce", ns.addr, topic, "10", "0", "t", "2")  # TIMER_DELAY_SEC=2
    for batch in (delayed, timed):
        assert {s[1] for s in batch} == {"broker-a", "broker-b"}, batch
    got = java_client("consume", ns.addr, topic, "GID_two", "60", "60")
    want = {f"{p}-{i}" for p, n in (("m", 40), ("d", 10), ("t", 10)) for i in range(n)}
    assert {r[3] for r in got} == want
    assert {(r[1], r[2]) for r in got} == {(n, str(q)) for n in ("broker-a", "broker-b") for q in range(4)}
    where = {s[3]: s[1] for s in sent + delayed + timed}
    for r in got:
        body, broker, waited = r[3], r[1], int(r[5]) - int(r[4])
        assert broker == where[body], f"{body} sent to {where[body]} but delivered by {broker}"
        if body.startswith("d-"):
            assert waited >= 1000, f"{body}: delay level 2 (1 s) delivered {1000 - waited} ms early"
        if body.startswith("t-"):
            assert waited >= 2000, f"{body}: TIMER_DELAY_SEC=2 delivered {2000 - waited} ms early"
