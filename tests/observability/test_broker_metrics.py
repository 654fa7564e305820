"""The broker's Prometheus endpoint, scraped while delay-level and timer messages are pending."""

import socket
import subprocess
import sys
import urllib.request

import pytest

pytestmark = pytest.mark.process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_endpoint_reports_sends_pending_levels_and_timers(broker_factory):
    port = _free_port()
    broker = broker_factory({"metricsPort": port, "messageDelayLevel": "1h 2h"})
    cli = [sys.executable, "-m", "client.cli", "produce", "-n", broker.namesrv, "-t", "Orders", "--count", "3"]
    for extra in (["--delay-level", "2"], ["--delay", "1h"]):
        r = subprocess.run([*cli, *extra], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    node = 'cluster="DefaultCluster",node_type="broker",node_id="broker-a"'
    assert f'rocketmq_messages_in_total{{{node},topic="SCHEDULE_TOPIC_XXXX"}} 3' in text
    assert f'rocketmq_delay_messages{{{node},level="2"}} 3' in text
    assert f"rocketmq_timing_messages{{{node}}} 3" in text
    assert "# TYPE rocketmq_rpc_latency_seconds histogram" in text
