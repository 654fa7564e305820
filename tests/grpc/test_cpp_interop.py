"""One store, two protocols: a 4.x C++ consumer receives what a 5.x (gRPC) producer sent, and a 5.x
consumer receives what a 4.x C++ producer sent (including a delay-level message)."""

from __future__ import annotations

import pytest

from tests.grpc.conftest import uniq

pytestmark = [pytest.mark.interop]


def test_cpp_consumer_receives_what_a_5x_producer_sent(gbroker, agents):
    topic, group = uniq("TX"), uniq("GX")
    consumer = agents.cpp("consume", gbroker, group=group, topic=topic, until_count=4, timeout=40)
    consumer.wait_event("started", 30)
    sent = agents.run_rmq5("produce", gbroker, topic=topic, count=4, tag="t5", keys=["k5"])
    assert consumer.wait_exit(45) == 0, consumer.diagnostics()
    got = consumer.of("received")
    assert sorted({e["body"] for e in got}) == [f"m{i}" for i in range(4)]
    assert {e["tags"] for e in got} == {"t5"} and {e["keys"] for e in got} == {"k5"}
    # the 5.x message id is the UNIQ_KEY the 4.x client reads
    assert {e["props"]["UNIQ_KEY"] for e in got} == {e["id"] for e in sent.of("sent")}


def test_5x_consumer_receives_what_a_cpp_producer_sent(gbroker, agents):
    topic, group = uniq("TY"), uniq("GY")
    agents.run_cpp("produce", gbroker, topic=topic, count=3, tag="t4")
    agents.run_cpp("produce", gbroker, topic=topic, count=1, tag="t4", delay_level=1)  # 1 s
    c = agents.run_rmq5("simple", gbroker, group=group, topic=topic, until_count=4, max_seconds=20)
    got = c.of("received")
    assert len({e["id"] for e in got}) == 4 and {e["tag"] for e in got} == {"t4"}
