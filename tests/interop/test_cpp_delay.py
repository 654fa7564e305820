"""Scheduled messages through the C++ client: delay levels and consumer retry (send-back) with short levels."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.interop.checks import received, sent_ok
from tests.interop.conftest import uniq

pytestmark = pytest.mark.interop
# 18 short levels: level 2 = 1.5 s for the delay test, level 3 (first retry) = 500 ms.
LEVELS = "200ms 1500ms 500ms " + " ".join(["500ms"] * 15)


def test_delay_level_message_arrives_after_its_delay_with_delay_properties(broker_factory, agents):
    broker = broker_factory({"messageDelayLevel": LEVELS})
    topic = uniq("TcppDelay")
    broker.create_topic(topic, 2)
    sent = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=6, delay_level=2, key="dl", tag="D"), 6)
    cons = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=6, timeout=60)
    got = received(cons)
    assert {e["body"] for e in got} == {e["body"] for e in sent}
    born = {e["body"]: e["t_ms"] for e in sent}
    for e in got:
        assert e["store_ts"] - e["born_ts"] >= 1500 - 50, f"delivered after {e['store_ts'] - e['born_ts']} ms < 1.5 s"
        assert e["recv_ms"] - born[e["body"]] >= 1500 - 50
        assert e["props"].get("DELAY") == "2", e["props"]
        assert e["props"].get("REAL_TOPIC") == topic, e["props"]
        assert e["keys"] == f"dl-{e['body'].rsplit('-', 1)[1]}" and e["tags"] == "D"


def test_reconsume_later_redelivers_through_the_retry_topic(broker_factory, agents):
    broker = broker_factory({"messageDelayLevel": LEVELS})
    topic = uniq("TcppRetry")
    broker.create_topic(topic, 2)
    sent = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=5, key="rt"), 5)
    cons = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=5, timeout=90,
                          reconsume_later_times=1)
    deliveries = defaultdict(list)
    for e in cons.of("received"):
        deliveries[e["body"]].append(e)
    assert set(deliveries) == {e["body"] for e in sent}
    for body, evs in deliveries.items():
        first, last = evs[0], evs[-1]
        assert not first["ack"] and first["reconsume_times"] == 0, evs
        assert last["ack"] and last["reconsume_times"] >= 1, f"{body}: redelivery without reconsumeTimes: {evs}"
        assert last["topic"] == topic, f"{body}: retry delivered under topic {last['topic']}"
        assert last["recv_ms"] - first["recv_ms"] >= 500 - 50, "retry came back before its delay level"
