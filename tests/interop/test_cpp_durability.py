"""Messages and consumer offsets outlive the broker process: clean restart, and kill -9 with SYNC_FLUSH."""

from __future__ import annotations

import pytest

from tests.helpers import wire
from tests.interop.checks import assert_exactly, received, sent_ok, wait_bodies
from tests.interop.conftest import uniq

pytestmark = pytest.mark.interop


def test_messages_and_offsets_survive_a_clean_restart(broker, agents):
    topic, group = uniq("TcppRst"), uniq("GID")
    broker.create_topic(topic, 4)
    r1 = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=20, key="r", body_prefix="r1-"), 20)
    assert_exactly(received(agents.run_cpp("consume", broker, group=group, topic=topic, until_count=20)), r1, "before")
    r2 = sent_ok(agents.run_cpp("produce", broker, topic=topic, count=10, key="r", body_prefix="r2-"), 10)

    broker.restart()  # SIGTERM (exit 0 asserted), same store and port

    again = agents.run_cpp("consume", broker, group=group, topic=topic, until_count=10)
    assert_exactly(received(again), r2, "same group after restart: only what it had not consumed")
    fresh = agents.run_cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=30)
    assert_exactly(received(fresh), r1 + r2, "new group after restart: everything")


@pytest.mark.slow
def test_sync_flush_every_acknowledged_send_survives_kill_9(broker_factory, agents):
    broker = broker_factory({"flushDiskType": "SYNC_FLUSH"})
    topic = uniq("TcppKill")
    broker.create_topic(topic, 4)
    prod = agents.cpp("produce", broker, topic=topic, count=100000, key="d", stop_on_error=True,
                      send_timeout_ms=3000)
    prod.wait_for(lambda p: len(p.of("sent")) >= 150, 90, "150 acknowledged sends")
    broker.kill()  # SIGKILL mid-stream: no shutdown hook, no final flush
    try:
        prod.wait_exit(60)
    except AssertionError:
        pass  # a producer stuck on a dead broker is the client's business; its acks so far are what count
    acked = prod.of("sent")
    assert acked and all(e["status"] == "OK" for e in acked)

    broker.start()
    stored = sum(wire.max_offset(broker.addr, topic, q) for q in range(4))
    assert stored >= len(acked), f"only {stored} messages in the ConsumeQueues after restart, {len(acked)} acknowledged"
    cons = agents.cpp("consume", broker, group=uniq("GID"), topic=topic, until_count=0, timeout=180)
    wait_bodies([cons], {e["body"] for e in acked}, 120,
                "every acknowledged send consumed after kill -9 (new group: relies on offset 0 for young queues)")
    got = {e["body"]: e for e in received(cons)}
    for e in acked:
        assert got[e["body"]]["keys"] == e["keys"]
    assert cons.terminate(30) == 0
