"""The Node client ali-ons (pinned in package.json) against our broker used as its name server."""

from __future__ import annotations

import pytest

from tests.interop.checks import assert_exactly, received, sent_ok
from tests.interop.conftest import uniq

pytestmark = pytest.mark.interop


def test_ali_ons_producer_and_push_consumer_round_trip(broker, agents):
    topic = uniq("TnodeRt")
    broker.create_topic(topic, 4)  # ali-ons cannot create topics itself
    node = agents.node("produce_consume.js", broker, topic=topic, group=uniq("GID"), count=20, tag="TagN", timeout=90)
    code = node.wait_exit(120)
    assert code == 0, f"node exited {code}\n{node.diagnostics()}"
    sent = sent_ok(node, 20)
    assert all(e["status"] == "SEND_OK" and e["msg_id"] for e in sent), sent[:2]
    assert_exactly(received(node), sent, "ali-ons round trip")
    assert {e["topic"] for e in received(node)} == {topic}
