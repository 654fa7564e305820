"""The stock Java mqadmin 4.9.7 against delaymq: the operator commands issue 15 lists that need no
live client (clusterList, statsAll, getNamesrvConfig, queryCq, brokerConsumeStats, updateBrokerConfig,
deleteTopic, deleteSubGroup), batched on one broker (each mqadmin run is a JVM start, 1-5 s here).
The ones that need live clients are in test_mqadmin_live.py.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import wire
from tests.helpers.broker import REPO_ROOT
from tests.helpers.java import mqadmin, requires_java
from tests.interop.conftest import uniq

pytestmark = [requires_java, pytest.mark.java]

GET_BROKER_CONFIG, UPDATE_CONSUMER_OFFSET, GET_ROUTEINFO_BY_TOPIC = 26, 15, 105


def ok(res: subprocess.CompletedProcess[str]) -> str:
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "Exception" not in out, out
    return res.stdout


def produce(broker, topic: str, count: int, *extra: str) -> None:
    subprocess.run([sys.executable, "-m", "client.cli", "produce", "-n", broker.namesrv, "-t", topic,
                    "--count", str(count), *extra], cwd=REPO_ROOT, check=True, capture_output=True, timeout=60)


def test_offline_commands(broker):
    ns, addr = broker.namesrv, broker.addr
    topic, group = uniq("Ops"), uniq("GOps")
    broker.create_topic(topic, 2)
    produce(broker, topic, 20)
    for qid in range(2):  # the group consumed 3 of each queue
        r = wire.invoke(addr, UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": str(qid),
                                                        "commitOffset": "3"})
        assert r.code == 0, r.remark

    out = ok(mqadmin("clusterList", "-n", ns))
    row = next(line for line in out.splitlines() if addr in line)
    assert re.search(r"\s\d+\.\d\d\(0,0ms\)\s+\d+\.\d\d\(0,0ms\)", row), row  # InTPS / OutTPS parsed

    out = ok(mqadmin("statsAll", "-n", ns))
    row = next(line for line in out.splitlines() if line.startswith(topic + " "))
    assert row.split()[-2:] == ["20", "0"], row  # in 24 h: 20, out: 0 (the group's pulls were none)

    out = ok(mqadmin("getNamesrvConfig", "-n", ns))
    assert re.search(rf"listenPort\s+=\s+{broker.port}\b", out), out

    out = ok(mqadmin("queryCq", "-n", ns, "-t", topic, "-q", "0", "-i", "0", "-c", "4"))
    assert out.count("ConsumeQueueData{physicOffset=") == 4, out

    out = ok(mqadmin("brokerConsumeStats", "-n", ns, "-b", addr))
    rows = [line.split() for line in out.splitlines() if line.startswith(topic + " ")]
    assert sorted((r[1], r[3], r[4], r[5]) for r in rows) == [(group, "0", "10", "3"), (group, "1", "10", "3")], out
    assert "Diff Total: 14" in out, out

    out = ok(mqadmin("updateBrokerConfig", "-n", ns, "-b", addr, "-k", "fileReservedTime", "-v", "48"))
    assert "success" in out
    conf = wire.invoke(addr, GET_BROKER_CONFIG)
    assert "fileReservedTime=48\n" in bytes(conf.body).decode(), conf.body
    refused = mqadmin("updateBrokerConfig", "-n", ns, "-b", addr, "-k", "storePathRootDir", "-v", "/tmp/x")
    assert "CODE: 16" in refused.stdout + refused.stderr, refused.stdout

    out = ok(mqadmin("deleteTopic", "-n", ns, "-t", topic, "-c", "DefaultCluster"))
    assert f"delete topic [{topic}] from NameServer success" in out
    assert wire.invoke(addr, GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code == 17  # gone from the routes

    # deleteSubGroup -c also deletes the group's %RETRY% and %DLQ% topics
    retry = f"%RETRY%{group}"
    broker.create_topic(retry, 1)
    out = ok(mqadmin("deleteSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", group))
    assert f"delete topic [{retry}] from NameServer success" in out, out
    assert f"delete topic [%DLQ%{group}] from NameServer success" in out, out
    assert wire.invoke(addr, GET_ROUTEINFO_BY_TOPIC, {"topic": retry}).code == 17
