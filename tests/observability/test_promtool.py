"""`promtool check metrics` (Debian's `prometheus` package, installed by `make setup`) on the page of a
broker that has seen real traffic: plain, delay-level, timer and transactional sends, a consumer, a
cancel, a delivered delay level."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.request

import pytest

from tests.helpers.broker import REPO_ROOT
from tests.helpers.checks import present

PROMTOOL = shutil.which("promtool")
pytestmark = [pytest.mark.process,
              pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make setup installs Debian's "
                                                          "prometheus package when apt-get can)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr + r.stdout
    return r


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def test_promtool_is_clean_after_real_traffic(broker_factory):
    port = _free_port()
    b = broker_factory({"metricsPort": port, "messageDelayLevel": "100ms 1h"})
    n = b.namesrv
    cli("produce", "-n", n, "-t", "Orders", "--count", "20", "--keys", "k{i}")
    cli("produce", "-n", n, "-t", "Orders", "--count", "5", "--delay-level", "1")
    late = json.loads(cli("produce", "-n", n, "-t", "Orders", "--count", "1", "--delay-level", "2",
                          "--output", "json").stdout)
    cli("produce", "-n", n, "-t", "Orders", "--count", "3", "--delay", "1h")
    cli("produce", "-n", n, "-t", "Orders", "--count", "2", "--transaction", "commit")
    cli("scheduled", "cancel", "-n", n, "--id", late["msgId"])
    cli("consume", "-n", n, "-t", "Orders", "-g", "billing", "--from-where", "first", "--max", "27",
        "--idle-timeout", "30")
    text = scrape(port)
    check = subprocess.run([present(PROMTOOL, "promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), \
        check.stdout + check.stderr + "\n" + text
    node = 'cluster="DefaultCluster",node_type="broker",node_id="broker-a"'
    # 20 sends + 2 commits + 5 delay-level deliveries: deliveries count as puts of their topic (issue 12)
    for line in (f'rocketmq_messages_in_total{{{node},topic="Orders"}} 27',
                 f'rocketmq_messages_out_total{{{node},topic="Orders",consumer_group="billing"}} 27',
                 f'rocketmq_delay_delivered_messages_total{{{node},level="1"}} 5',
                 f'rocketmq_delay_messages{{{node},level="2"}} 1',
                 f"rocketmq_timing_messages{{{node}}} 3", f"rocketmq_commit_messages_total{{{node}}} 2",
                 f'rocketmq_consumer_lag_messages{{{node},topic="Orders",consumer_group="billing"}} 0'):
        assert line in text, line
    for family in ("rocketmq_throughput_in_total", "rocketmq_rpc_latency_seconds", "rocketmq_storage_disk_ratio",
                   "rocketmq_delay_message_latency_seconds", "rocketmq_producer_connections",
                   "process_resident_memory_bytes", "process_cpu_seconds_total"):
        assert f"# HELP {family} " in text and f"# TYPE {family} " in text, family
    assert f'rocketmq_rpc_latency_seconds_count{{{node},request_code="310"}}' in text  # SEND_MESSAGE_V2
