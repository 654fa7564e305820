"""Logs an operator can use: the effective configuration at start, client connects/disconnects with
remote address, client id and role, and the errors clients get (rate-limited per kind)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import wire
from tests.helpers.broker import REPO_ROOT

pytestmark = pytest.mark.process


def records(broker) -> list[dict]:
    out = []
    for path in (broker.stdout_path, broker.stderr_path):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    return out


def test_config_clients_and_client_errors_are_logged(broker_factory):
    b = broker_factory({"messageDelayLevel": "1s 5s", "autoCreateTopicEnable": "false"})
    b.create_topic("Logged", 2)
    r = subprocess.run([sys.executable, "-m", "client.cli", "produce", "-n", b.namesrv, "-t", "Logged", "-g", "PGlog",
                        "--count", "3"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for _ in range(3):  # a send to a topic that does not exist: TOPIC_NOT_EXIST, logged once per 10 s
        resp = wire.invoke(b.addr, 10, {"producerGroup": "PGlog", "topic": "NoSuchTopic", "defaultTopic": "TBW102",
                                        "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
                                        "bornTimestamp": "0", "flag": "0", "properties": ""}, b"x")
        assert resp.code == 17, resp.remark
    assert b.stop() == 0
    recs = records(b)
    [cfg] = [x for x in recs if x.get("event") == "broker.config"]
    assert cfg["delay_table"] == {"L1": 1000, "L2": 5000} and cfg["config"]["autoCreateTopicEnable"] == "false"
    conn = [x for x in recs if x.get("event") == "client.connected" and x.get("group") == "PGlog"]
    assert conn and conn[0]["role"] == "producer" and conn[0]["remote"].startswith("127.0.0.1:") \
        and conn[0]["client_id"]
    gone = [x for x in recs if x.get("event") == "client.disconnected" and x.get("group") == "PGlog"]
    assert gone and gone[0]["remote"] == conn[0]["remote"]
    errs = [x for x in recs if x.get("event") == "client.error_returned" and x.get("code") == 17]
    assert len(errs) == 1 and errs[0]["kind"] == "TOPIC_NOT_EXIST" and errs[0]["level"] == "info"
    assert errs[0]["remote"].startswith("127.0.0.1:") and "NoSuchTopic" in errs[0]["remark"]
