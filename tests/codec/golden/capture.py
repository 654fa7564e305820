"""Capture golden frames from the stock Apache RocketMQ 4.9.7 Java client, name server and broker.

Run by hand (root, Linux, ../shared present): `.venv/bin/python -m tests.codec.golden.capture`.
It starts an Apache NameServer and broker on loopback, runs the Java client (tests/java/agent) to send
and consume one message, sniffs the loopback interface (AF_PACKET; no tcpdump needed), reassembles
each TCP stream, splits it into remoting frames and keeps the first frame of each kind below as
`<name>.bin` (the whole frame, length prefix included), with `manifest.json` saying what each is.
The files are data produced by the stock Java programs; tests/codec/test_golden.py checks our codec
against them. Re-running replaces them (opaques, timestamps and addresses change; the tests check the
stable facts only).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tests.helpers.broker import pick_port_pair
from tests.helpers.java import JavaServer, java_agent_classes, java_command

OUT = Path(__file__).parent
ETH_P_ALL = 0x0003
# (file name, request code, which side: "request" or "response", what it is)
WANTED = [
    ("route_request", 105, "request", "GET_ROUTEINFO_BY_TOPIC from the Java client to the NameServer"),
    ("route_response", 105, "response", "the NameServer's TopicRouteData answer"),
    ("heartbeat_request", 34, "request", "HEART_BEAT from the Java push consumer (HeartbeatData body)"),
    ("send_request", 310, "request", "SEND_MESSAGE_V2 from the Java producer (keys, tags, UNIQ_KEY)"),
    ("send_response", 310, "response", "the broker's SEND_MESSAGE_V2 answer (SendMessageResponseHeader)"),
    ("send_retry_request", 310, "request", "SEND_MESSAGE_V2 of a consumer's fallback re-send to %RETRY%GoldenGroup "
     "(RECONSUME_TIME 2, MAX_RECONSUME_TIMES 16, delay level 5: header j and l)"),
    ("pull_request", 11, "request", "PULL_MESSAGE from the Java push consumer"),
    ("pull_response", 11, "response", "the broker's FOUND answer: stored records as the body"),
    ("register_request", 103, "request", "REGISTER_BROKER from the Apache broker (TopicConfigSerializeWrapper)"),
    ("register_response", 103, "response", "the NameServer's REGISTER_BROKER answer"),
]


class Sniffer(threading.Thread):
    """Every TCP segment on `lo` to or from `ports`: {(src, sport, dst, dport): {seq: payload}}."""

    def __init__(self, ports: set[int]) -> None:
        super().__init__(daemon=True)
        self.streams: dict[tuple[str, int, str, int], dict[int, bytes]] = {}
        self.ports, self.stop = ports, threading.Event()
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                pkt, _addr = self.sock.recvfrom(1 << 17)
            except TimeoutError:
                continue
            ip = pkt[14:]
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
                continue
            ihl = (ip[0] & 15) * 4
            total = struct.unpack_from(">H", ip, 2)[0]
            tcp = ip[ihl:total]
            sport, dport, seq = struct.unpack_from(">HHI", tcp, 0)
            if sport not in self.ports and dport not in self.ports:
                continue
            payload = tcp[(tcp[12] >> 4) * 4:]
            if payload:
                key = (socket.inet_ntoa(ip[12:16]), sport, socket.inet_ntoa(ip[16:20]), dport)
                self.streams.setdefault(key, {})[seq] = bytes(payload)


def frames(segments: dict[int, bytes]) -> list[bytes]:
    data = b"".join(segments[s] for s in sorted(segments))  # loopback: no gaps, duplicates collapse by seq
    out, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        if pos + 4 + n > len(data):
            break
        out.append(data[pos:pos + 4 + n])
        pos += 4 + n
    return out


def header(frame: bytes) -> dict:
    (word,) = struct.unpack_from(">i", frame, 4)
    if word >> 24 != 0:
        raise ValueError("only JSON headers are captured here")
    return json.loads(frame[8:8 + (word & 0xFFFFFF)])


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="golden-"))
    ns_port, b_port = pick_port_pair(), pick_port_pair()
    sniffer = Sniffer({ns_port, b_port})
    sniffer.start()
    ns = JavaServer("mqnamesrv", work / "ns", {"listenPort": ns_port}, ns_port).start()
    broker = JavaServer("mqbroker", work / "broker", {
        "brokerName": "broker-a", "brokerClusterName": "DefaultCluster", "brokerId": 0,
        "listenPort": b_port, "haListenPort": b_port + 1, "brokerIP1": "127.0.0.1",
        "namesrvAddr": f"127.0.0.1:{ns_port}", "storePathRootDir": work / "store",
        "storePathCommitLog": work / "store" / "commitlog", "mappedFileSizeCommitLog": 32 << 20,
        "autoCreateTopicEnable": "true", "flushDiskType": "ASYNC_FLUSH"}, b_port).start()
    try:
        classes = java_agent_classes()
        env = {**os.environ, "HOME": str(work)}
        for argv in (["produce", "--namesrv", f"127.0.0.1:{ns_port}", "--topic", "GoldenTopic", "--count", "1",
                      "--key", "order", "--tag", "TagA", "--body-prefix", "golden-body-"],
                     ["consume", "--namesrv", f"127.0.0.1:{ns_port}", "--topic", "GoldenTopic", "--group",
                      "GoldenGroup", "--until-count", "1", "--timeout", "60"],
                     ["produce", "--namesrv", f"127.0.0.1:{ns_port}", "--topic", "%RETRY%GoldenGroup", "--count", "1",
                      "--group", "GoldenRetryProducer", "--delay-level", "5", "--body-prefix", "golden-retry-",
                      "--system-property", "RECONSUME_TIME=2", "--system-property", "MAX_RECONSUME_TIMES=16"]):
            subprocess.run(java_command("JavaAgent", classes, *argv), env=env, check=True, timeout=120,
                           stdout=subprocess.DEVNULL)
    finally:
        broker.stop()
        ns.stop()
        sniffer.stop.set()
        sniffer.join()
    requests: dict[int, list[tuple[tuple, bytes]]] = {}
    responses: dict[tuple, list[bytes]] = {}
    for key, segs in sniffer.streams.items():
        for f in frames(segs):
            h = header(f)
            if h.get("flag", 0) & 1:
                responses.setdefault(key, []).append(f)
            else:
                requests.setdefault(h["code"], []).append((key, f))
    manifest = {}
    for name, code, side, what in WANTED:
        found = None
        for key, req in requests.get(code, []):
            ext = header(req).get("extFields") or {}
            if code == 310 and ext.get("b", "").startswith("%RETRY%") != (name == "send_retry_request"):
                continue  # the plain send and the retry send each go to their own file
            if side == "request" and (code != 11 or ext.get("queueOffset") == "0") \
                    and (code != 34 or b'"consumerDataSet":[{' in req):  # the consumer's heartbeat
                found = req
                break
            back = (key[2], key[3], key[0], key[1])
            opaque = header(req)["opaque"]
            for resp in responses.get(back, []):
                h = header(resp)
                if h["opaque"] == opaque and (code != 11 or h["code"] == 0):
                    found = resp
                    break
            if found:
                break
        if found is None:
            print(f"not captured: {name}", file=sys.stderr)
            continue
        (OUT / f"{name}.bin").write_bytes(found)
        manifest[name] = {"code": code, "side": side, "what": what, "bytes": len(found)}
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"captured {len(manifest)} of {len(WANTED)} frames into {OUT}")
    return 0 if len(manifest) == len(WANTED) else 1


if __name__ == "__main__":
    sys.exit(main())
