"""The broker process is killed (SIGKILL) while it delivers delay-level and timer messages sent by the
official C++ client, in both flush modes; after a restart every message reaches its real topic exactly
once (the topic's ConsumeQueues hold as many records as were acknowledged, and a consumer receives each
acknowledged body), never before its send call's start + delay."""

from __future__ import annotations

import time

import pytest

from tests.helpers import wire
from tests.interop.checks import received, sent_ok
from tests.interop.conftest import uniq

pytestmark = pytest.mark.interop
QUEUES = 4
N = 600  # per kind
DELAY_MS = 2000


def _stored(broker, topic: str) -> int:
    return sum(wire.max_offset(broker.addr, topic, q) for q in range(QUEUES))


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_kill9_during_scheduled_delivery_delivers_each_message_once(broker_factory, agents, flush):
    broker = broker_factory({"flushDiskType": flush, "timerPrecisionMs": 100,
                             "messageDelayLevel": f"{DELAY_MS}ms 5s 10s"})
    topic = uniq("TcppKillSched")
    broker.create_topic(topic, QUEUES)
    level = agents.cpp("produce", broker, topic=topic, count=N, delay_level=1, body_prefix="L-", mode="async")
    timer = agents.cpp("produce", broker, topic=topic, count=N, body_prefix="T-", mode="async",
                       property=[f"TIMER_DELAY_MS={DELAY_MS}"])
    assert level.wait_exit(60) == 0 and timer.wait_exit(60) == 0
    sent = sent_ok(level, N) + sent_ok(timer, N)
    deadline = time.monotonic() + 30
    while _stored(broker, topic) < N // 2:  # mid-delivery: about a quarter of them delivered
        assert time.monotonic() < deadline, f"deliveries did not start: {_stored(broker, topic)}"
        time.sleep(0.02)
    before = _stored(broker, topic)
    broker.kill()
    broker.start()
    cons = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=2 * N, timeout=90)
    got = received(cons)
    start = {e["body"]: e["start_ms"] for e in sent}
    assert {e["body"] for e in got} == set(start), "lost or unknown messages"
    stored = _stored(broker, topic)
    assert stored == 2 * N, f"{stored - 2 * N} delivered twice (killed with {before} of {2 * N} delivered)"
    early = [e["body"] for e in got if e["store_ts"] < start[e["body"]] + DELAY_MS]
    assert not early, f"{len(early)} delivered early: {early[:5]}"
    assert before < 2 * N  # the kill did land mid-delivery
