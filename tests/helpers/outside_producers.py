"""The two outside producers of a controller-mode group (issue 25 item 6), started one way for the test
and the bench: a stock Java 4.9.7 producer (tests/java/agent/JavaAgent.java, routes from the name server,
no retries) and Apache's 5.x Python producer (.venv-rmq5, tests/interop/rmq5_agent.py) through a
delaymq-proxy on the same name server. Each sends one plain message every `pause_s` to `topic` and
reports each acknowledged send as a "sent" event (Java: "msg_id", 5.x: "id"; both the UNIQ_KEY)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers.agents import AgentProcess
from tests.helpers.broker import REPO_ROOT, pick_port_pair
from tests.helpers.java import java_agent_classes, java_available, java_command


def start_outside_producers(work: Path, namesrv: str, topic: str, pause_s: float,
                            max_s: float = 120.0) -> tuple[dict[str, AgentProcess], dict[str, str]]:
    """({"java_4x", "proxy", "python_5x"}: started agents, stopped by the caller by their own PIDs;
    {name: why it was left out} for a missing tool). Bounded: at most `max_s` of sends each."""
    started: dict[str, AgentProcess] = {}
    missing: dict[str, str] = {}
    count = str(int(max_s / pause_s))
    if java_available():
        argv = java_command("JavaAgent", java_agent_classes(), "produce", "--namesrv", namesrv,
                            "--topic", topic, "--count", count, "--retries", "0",
                            "--send-timeout-ms", "3000", "--pause-ms", str(int(pause_s * 1000)))
        started["java_4x"] = AgentProcess("java-producer", argv, work / "java").start()
    else:
        missing["java_4x"] = "no Apache RocketMQ 4.9.7 jars in ../shared/rocketmq-java or no java"
    rmq5 = REPO_ROOT / ".venv-rmq5" / "bin" / "python"
    if rmq5.exists():
        port = pick_port_pair()
        proxy = AgentProcess("delaymq-proxy", [sys.executable, "-m", "server.proxy", "--namesrv", namesrv,
                                               "--grpc-port", str(port), "--host", "127.0.0.1"], work / "proxy").start()
        started["proxy"] = proxy
        proxy.wait_for(lambda a: any("delaymq proxy ready on" in line for line in a.raw_lines), 30,
                       "delaymq-proxy to start")
        argv = [str(rmq5), str(REPO_ROOT / "tests" / "interop" / "rmq5_agent.py"), "produce",
                "--endpoint", f"127.0.0.1:{port}", "--topic", topic, "--count", count,
                "--request-timeout", "3", "--pause", str(pause_s), "--keep-going"]
        started["python_5x"] = AgentProcess("rmq5-producer", argv, work / "rmq5", env={"HOME": str(work / "rmq5")}).start()
    else:
        missing["python_5x"] = ".venv-rmq5 (rocketmq-python-client 5.1.2) is missing"
    return started, missing


def ack_times_ms(agent: AgentProcess) -> list[int]:
    """Wall-clock ms of each acknowledged send."""
    return [int(e.get("ack_ms", e.get("ts", 0))) for e in agent.of("sent")]


def acked_ids(agent: AgentProcess) -> list[str]:
    """The UNIQ_KEY of each acknowledged send."""
    return [str(e.get("msg_id", e.get("id"))) for e in agent.of("sent")]
