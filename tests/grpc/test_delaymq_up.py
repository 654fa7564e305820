"""`delaymq up --brokers 2 --proxies 2` (client/cli/up.py, issue 24 item 4): one command starts a name server,
two brokers and two delaymq-proxy processes sharing one gRPC port; a 4.x client (the `delaymq` CLI, through the
name server, over both brokers) and a 5.x client (the official Python 5.1.2 client, through the proxies'
port; on each grpcServerStack, `--grpc-server-stack`) send and receive; SIGINT stops everything in order and
every child, on envoy the proxies' Envoy processes too, checked by PID, is gone. A taken port stops `up` before
it starts anything, with one line naming the key."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.grpc.conftest import uniq
from tests.helpers.broker import REPO_ROOT, pick_broker_run, pick_port_pair

pytestmark = [pytest.mark.process, pytest.mark.interop]
CLI = [sys.executable, "-m", "client.cli"]


@dataclass
class Endpoint:
    grpc_addr: str


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def test_up_two_brokers_two_proxies_serve_4x_and_5x_clients_and_sigint_stops_every_child(agents, tmp_path,
                                                                                         proxy_stack):
    ns, base, grpc = pick_port_pair(), pick_broker_run(2), pick_port_pair()
    up = agents._start("delaymq-up", [*CLI, "up", "--brokers", "2", "--proxies", "2", "--store", str(tmp_path / "up"),
                                      "--namesrv-port", str(ns), "--broker-port", str(base),
                                      "--grpc-port", str(grpc), "--grpc-server-stack", proxy_stack])
    up.wait_for(lambda a: any(line.startswith("delaymq up: ready") for line in a.raw_lines), 180,
                "delaymq up to report every process ready")
    rows = [line.split() for line in up.raw_lines if re.match(r"(namesrv|broker|proxy) ", line)]
    assert [(r[0], r[1]) for r in rows] == [("namesrv", "namesrv"), ("broker", "broker-0"), ("broker", "broker-1"),
                                            ("proxy", "proxy-0"), ("proxy", "proxy-1")], up.raw_lines
    pids = [int(r[2]) for r in rows]
    # on grpcServerStack=envoy each proxy's ready line names the Envoy process that serves: it must go too
    logs = tmp_path / "up" / "logs"
    envoys = [int(m) for j in range(2) for f in (logs / f"proxy-{j}.out", logs / f"proxy-{j}.log") if f.exists()
              for m in re.findall(r"delaymq proxy ready on \S+ \(envoy pid (\d+)\)", f.read_text())]
    assert len(envoys) == (2 if proxy_stack == "envoy" else 0), [f.read_text()[-2000:] for f in logs.glob("proxy-*")]
    pids += envoys
    assert all(alive(p) for p in pids)
    assert rows[2][3] == f"127.0.0.1:{base + 10}" and rows[4][4] == f"127.0.0.1:{grpc}", rows
    n = f"127.0.0.1:{ns}"

    # 4.x: the topic on both brokers, sends spread over them, a push consumer gets every one
    topic = uniq("UpT")
    r = cli("topic", "create", "-n", n, "-t", topic, "-r", "2", "-w", "2")
    assert r.returncode == 0, r.stderr
    r = cli("produce", "-n", n, "-t", topic, "--count", "20")
    assert r.returncode == 0, r.stderr
    status = cli("topic", "status", "-n", n, "-t", topic)
    assert {ln.split()[0] for ln in status.stdout.splitlines() if ln.startswith("broker-")} \
        == {"broker-0", "broker-1"}, status.stdout
    r = cli("consume", "-n", n, "-t", topic, "-g", uniq("UpG"), "--from-where", "first", "--max", "20",
            "--idle-timeout", "30", timeout=120)
    assert r.returncode == 0 and "consumed 20 messages" in r.stderr, r.stderr

    # 5.x through the proxies' one port: sends, then a new group pops everything (4.x's and 5.x's)
    proxy = Endpoint(f"127.0.0.1:{grpc}")
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=6, body_prefix="p", timeout=90)
    assert len(sent.of("sent")) == 6
    c = agents.run_rmq5("simple", proxy, group=uniq("Up5G"), topic=topic, until_count=26, max_seconds=60,
                        timeout=90)
    bodies = sorted(e["body"] for e in c.of("received"))
    assert [b for b in bodies if b.startswith("p")] == [f"p{i}" for i in range(6)]
    assert len(bodies) == 26 and len(c.of("acked")) == 26

    # SIGINT: proxies, brokers, name server stopped in that order, each exit 0, no child left
    up.proc.send_signal(signal.SIGINT)
    assert up.wait_exit(120) == 0, up.diagnostics()
    stopped = [line for line in open(up.stderr_path).read().splitlines() if " stopped, exit code " in line]
    assert [s.split()[1] for s in stopped] == ["proxy-0", "proxy-1", "broker-0", "broker-1", "namesrv"], stopped
    assert all(s.endswith("exit code 0") for s in stopped), stopped
    assert not [p for p in pids if alive(p)]


def test_up_refuses_a_taken_port_with_one_line_naming_the_key(tmp_path):
    ns, base = pick_port_pair(), pick_broker_run(2)
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 10))
        held.listen()
        r = subprocess.run([*CLI, "up", "--brokers", "2", "--proxies", "1", "--store", str(tmp_path / "up"),
                            "--namesrv-port", str(ns), "--broker-port", str(base), "--grpc-port", str(pick_port_pair())],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert "listenPort of broker-1" in line and str(base + 10) in line and "Traceback" not in r.stderr
    assert not (tmp_path / "up").exists()  # nothing started
