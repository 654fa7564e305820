"""Every delay level and the 5.x timer properties, sent by the official C++ client, arrive on time."""

from __future__ import annotations

import time

import pytest

from tests.interop.checks import received, sent_ok
from tests.interop.conftest import uniq

pytestmark = pytest.mark.interop

# level L = L * 100 ms, so all 18 levels are exercised in under 2 s of delay
LEVELS = " ".join(f"{100 * lvl}ms" for lvl in range(1, 19))


def test_every_delay_level_from_the_cpp_client_arrives_at_or_after_its_delay(broker_factory, agents):
    broker = broker_factory({"messageDelayLevel": LEVELS})
    topic = uniq("TcppLevels")
    broker.create_topic(topic, 4)
    start = {}
    for level in range(1, 19):
        for e in sent_ok(agents.run_cpp("produce", broker, topic=topic, count=1, delay_level=level,
                                        body_prefix=f"L{level}-"), 1):
            start[e["body"]] = e["start_ms"]  # the send call's start, on the producer's clock
    got = received(agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=18, timeout=60))
    by_level = {int(e["body"].split("-")[0][1:]): e for e in got}
    assert sorted(by_level) == list(range(1, 19))
    for level, e in by_level.items():
        due = start[e["body"]] + 100 * level  # never early, no slack
        assert e["store_ts"] >= due, f"level {level} stored {due - e['store_ts']:.3f} ms early"
        assert e["recv_at"] >= due, f"level {level} received {due - e['recv_at']:.3f} ms early"
        assert e["props"].get("DELAY") == str(level) and e["props"].get("REAL_TOPIC") == topic, e["props"]


def test_timer_properties_from_the_cpp_client_are_never_early(broker_factory, agents):
    broker = broker_factory({"timerPrecisionMs": 100})
    topic = uniq("TcppTimer")
    broker.create_topic(topic, 2)
    deliver_at = int(time.time() * 1000) + 2500
    cases = {"sec": ("TIMER_DELAY_SEC=2", 2000), "ms": ("TIMER_DELAY_MS=1200", 1200),
             "at": (f"TIMER_DELIVER_MS={deliver_at}", None)}
    start = {}
    for name, (prop, _) in cases.items():
        for e in sent_ok(agents.run_cpp("produce", broker, topic=topic, count=3, body_prefix=f"{name}-",
                                        property=[prop]), 3):
            start[e["body"]] = e["start_ms"]
    got = received(agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=9, timeout=60,
                                  want_property=["TIMER_OUT_MS"]))
    assert sorted(e["body"].split("-")[0] for e in got) == sorted([n for n in cases for _ in range(3)])
    for e in got:
        name = e["body"].split("-")[0]
        _, delay = cases[name]
        due = deliver_at if delay is None else start[e["body"]] + delay  # relative: from the send call's start
        assert e["store_ts"] >= due, f"{name}: delivered {due - e['store_ts']} ms early"
        assert e["recv_at"] >= due, f"{name}: received {due - e['recv_at']} ms early"
        assert e["store_ts"] - due < 10_000, f"{name}: {e['store_ts'] - due} ms late"
        assert e["props"].get("REAL_TOPIC") == topic and "TIMER_OUT_MS" in e["props"], e["props"]
