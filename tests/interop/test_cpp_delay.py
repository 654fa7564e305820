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
        waited = e["store_ts"] - e["born_ts"]
        assert 1500 - 50 <= waited < 4500, f"level 2 (1.5 s) delivered after {waited} ms (config not applied?)"
        assert e["recv_ms"] - born[e["body"]] >= 1500 - 50
        assert e["props"].get("DELAY") == "2", e["props"]
        assert e["props"].get("REAL_TOPIC") == topic, e["props"]
        assert e["keys"] == f"dl-{e['body'].rsplit('-', 1)[1]}" and e["tags"] == "D"


def test_reconsume_later_redelivers_through_the_retry_topic(broker_factory, agents):
    broker = broker_factory({"messageDelayLevel": LEVELS})
    topic, group = uniq("TcppRetry"), uniq("GID")
    broker.create_topic(topic, 2)
    sent = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=5, key="rt"), 5)
    cons = agents.run_cpp("consume", broker, group=group, topic=topic, until_count=5, timeout=90,
                          reconsume_later_times=1)
    deliveries = defaultdict(list)
    for e in cons.of("received"):
        deliveries[e["body"]].append(e)
    assert set(deliveries) == {e["body"] for e in sent}

    def brief(evs):
        return [(e["ack"], e["topic"], e["reconsume_times"], e["queue_id"], e["queue_offset"], e["recv_ms"],
                 e["props"].get("REAL_TOPIC")) for e in evs]

    # The C API fails a whole pulled batch when one callback says RECONSUME_LATER, so some messages go
    # back to the broker without their first delivery reaching the agent: judge the redelivery only.
    for body, evs in deliveries.items():
        acked = [e for e in evs if e["ack"]]
        assert acked, f"{body} never acknowledged: {brief(evs)}"
        redo = acked[0]
        assert redo["reconsume_times"] >= 1, f"{body}: redelivery without reconsumeTimes: {brief(evs)}"
        assert redo["topic"] == topic, f"{body}: retry delivered under topic {redo['topic']}"
        assert redo["props"].get("REAL_TOPIC") == f"%RETRY%{group}", brief(evs)
        first = evs[0]
        if not first["ack"] and first["reconsume_times"] == 0:
            assert redo["recv_ms"] - first["recv_ms"] >= 500 - 50, f"retry came back before its delay: {brief(evs)}"
    assert any(not e["ack"] and e["reconsume_times"] == 0 for evs in deliveries.values() for e in evs)
