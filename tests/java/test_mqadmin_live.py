"""The stock Java mqadmin 4.9.7 against delaymq with live clients: producerConnection while the
`delaymq` CLI produces, consumerStatus (GET_CONSUMER_RUNNING_INFO relayed to the client) and
resetOffsetByTime (RESET_CONSUMER_CLIENT_OFFSET pushed to it) against the official C++ client, and
resetOffsetByTime's offline path for a group with no consumer online."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import wire
from tests.helpers.broker import REPO_ROOT
from tests.helpers.java import mqadmin, requires_java
from tests.interop.conftest import agents, uniq  # noqa: F401  (the C++ agent fixture)
from tests.java.test_mqadmin_ops import UPDATE_CONSUMER_OFFSET, ok, produce

pytestmark = [requires_java, pytest.mark.java]

PRODUCED = 40  # by the CLI producer, after the first 10


def test_commands_with_live_clients(broker, agents):  # noqa: F811
    ns, addr = broker.namesrv, broker.addr
    topic, group, pgroup = uniq("OpsLive"), uniq("GLive"), uniq("PLive")
    broker.create_topic(topic, 2)
    produce(broker, topic, 10)
    consumer = agents.cpp("consume", broker, group=group, topic=topic, until_count=0, timeout=180)
    consumer.wait_for(lambda a: len(a.of("received")) >= 10, 60, "the C++ consumer got the first 10")

    # producerConnection while the CLI producer runs (40 messages at 2/s: ~20 s online, so a loaded host's slow
    # mqadmin JVMs still find it there; 10 s online was missed once under load)
    producer = subprocess.Popen([sys.executable, "-m", "client.cli", "produce", "-n", ns, "-t", topic, "-g", pgroup,
                                 "--count", str(PRODUCED), "--rate", "2"], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        seen = ""
        for _ in range(20):  # the producer's first heartbeat follows its first send
            res = mqadmin("producerConnection", "-n", ns, "-g", pgroup, "-t", topic)
            seen = res.stdout + res.stderr
            if "127.0.0.1:" in seen:
                break
        assert re.search(r"^0001\s+\S+\s+127\.0\.0\.1:\d+\s+PYTHON\s+V4_9_8$", seen, re.M), seen
    finally:
        assert producer.wait(90) == 0

    out = ok(mqadmin("consumerStatus", "-n", ns, "-g", group))
    assert "Same subscription in the same group of consumer" in out and "Rebalance OK" in out, out

    before = len(consumer.of("received"))
    out = ok(mqadmin("resetOffsetByTime", "-n", ns, "-g", group, "-t", topic, "-s", "0"))
    assert re.findall(r"broker-a\s+\d\s+0\s*$", out, re.M), out  # every queue back to 0
    consumer.wait_for(lambda a: len(a.of("received")) >= before + 10 + PRODUCED, 90,
                      "the C++ consumer re-received all the topic's messages after RESET_CONSUMER_CLIENT_OFFSET")

    # a group with no online consumer: CONSUMER_NOT_ONLINE, and mqadmin's offline path resets the broker's table
    offline = uniq("GOff")
    wire.invoke(addr, UPDATE_CONSUMER_OFFSET, {"consumerGroup": offline, "topic": topic, "queueId": "0",
                                                "commitOffset": "7"})
    res = mqadmin("resetOffsetByTime", "-n", ns, "-g", offline, "-t", topic, "-s", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert wire.consumer_offset(addr, offline, topic, 0) == 0
    assert consumer.terminate(30) == 0
