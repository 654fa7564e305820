"""A flood from one host (many connections, huge and partial frames, pipelined requests nobody reads)
neither stops a well-behaved client from sending and consuming nor grows the broker's RSS unboundedly."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from codec.command import RemotingCommand
from remoting.client import RemotingClient
from tests.security.helpers import frame, vm_rss_kib
from tests.security.test_tls import PULL_MESSAGE, SEND_MESSAGE, pull_header, send_header

pytestmark = pytest.mark.process

MiB = 1 << 20
LIMITS = {"maxConnectionsPerIp": 40, "maxFrameSize": 2 * MiB, "maxBufferedFrameBytes": 24 * MiB,
          "maxInflightPerConnection": 64}
GET_MAX_OFFSET = 30


async def open_from(addr: str, source: str):
    host, port = addr.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port), local_addr=(source, 0))


async def closed_by_broker(reader: asyncio.StreamReader, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1 << 16), timeout) == b""
    except ConnectionError:  # aborted: RST
        return True
    except TimeoutError:
        return False


async def flood(addr: str, stats: dict) -> list:
    keep = []
    # 1. many connections from one host: past maxConnectionsPerIp they are closed at once
    conns = [await open_from(addr, "127.0.0.2") for _ in range(150)]
    closed = await asyncio.gather(*(closed_by_broker(r, 2.0) for r, _ in conns))
    stats["conn_refused"] = sum(closed)
    survivors = [c for c, gone in zip(conns, closed, strict=True) if not gone]
    # 2. partial frames of 1.5 MiB on every survivor: the shared budget closes connections past 24 MiB
    partial = struct.pack(">ii", 2 * MiB - 16, 0) + b"\0" * (3 * MiB // 2)
    for _, w in survivors:
        w.write(partial)
    gone = await asyncio.gather(*(closed_by_broker(r, 3.0) for r, _ in survivors))
    stats["over_budget_closed"] = sum(gone)
    keep += [c for c, g in zip(survivors, gone, strict=True) if not g]
    # 3. a frame announcing 100 MiB is refused before anything is buffered
    r, w = await open_from(addr, "127.0.0.4")
    w.write(struct.pack(">ii", 100 * MiB, 0))
    stats["huge_frame_closed"] = await closed_by_broker(r, 3.0)
    # 4. pipelined requests whose responses are never read
    req = frame(GET_MAX_OFFSET, {"topic": "TopicGood", "queueId": "0"})
    for _ in range(3):
        r, w = await open_from(addr, "127.0.0.3")
        w.transport.set_write_buffer_limits(high=64 * MiB)
        w.write(req * 20000)
        keep.append((r, w))
    return keep


async def good_client(addr: str, n: int) -> set[bytes]:
    client = RemotingClient()
    try:
        sent = set()
        for i in range(n):
            body = f"good-{i}".encode()
            r = await client.invoke(addr, RemotingCommand.request(SEND_MESSAGE, send_header("TopicGood"), body), 10)
            assert r.code == 0, (r.code, r.remark)
            sent.add(body)
        got = b""
        deadline = time.monotonic() + 20
        offset = 0
        while not all(b in got for b in sent) and time.monotonic() < deadline:
            h = dict(pull_header("TopicGood"), queueOffset=str(offset))
            r = await client.invoke(addr, RemotingCommand.request(PULL_MESSAGE, h), 10)
            if r.code == 0:
                got += r.body_bytes()
                offset = int(r.ext_fields["nextBeginOffset"])
        return {b for b in sent if b in got}
    finally:
        client.close()


async def test_flood_from_one_host_does_not_starve_others(broker_factory):
    b = broker_factory(dict(LIMITS, autoCreateTopicEnable="true"))
    pid = b.proc.pid
    baseline = vm_rss_kib(pid)
    stats: dict = {}
    flood_task = asyncio.create_task(flood(b.addr, stats))
    arrived = await asyncio.wait_for(good_client(b.addr, 200), 60)
    keep = await asyncio.wait_for(flood_task, 60)
    assert len(arrived) == 200
    assert stats["conn_refused"] >= 150 - LIMITS["maxConnectionsPerIp"]
    assert stats["over_budget_closed"] >= 1 and stats["huge_frame_closed"]
    # while the flood's connections are still open the broker keeps serving
    arrived = await asyncio.wait_for(good_client(b.addr, 20), 30)
    assert len(arrived) == 20
    rss_growth_mib = (vm_rss_kib(pid) - baseline) / 1024
    assert rss_growth_mib < 160, f"broker RSS grew by {rss_growth_mib:.0f} MiB under the flood"
    for _, w in keep:
        w.close()
    log = b.stderr_path.read_text()
    assert "guard.too_many_connections_from_ip" in log and "guard.frame_budget_exceeded" in log
