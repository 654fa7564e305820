"""HA interop with the stock Apache RocketMQ 4.9.7 broker (../shared/rocketmq-java): an Apache slave
follows a delaymq master and a delaymq slave follows an Apache master; the CommitLog bytes must be
identical (both sides use the same mappedFileSizeCommitLog)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.java import JavaServer, requires_java
from tests.server.helpers import send
from tests.server.raw import RawClient

from .test_ha_replication import ha_port_pair

pytestmark = [pytest.mark.java, requires_java]
FSIZE = 16 << 20


def first_segment(path) -> bytes:
    d = os.path.join(path, "commitlog") if os.path.isdir(os.path.join(path, "commitlog")) else path
    names = sorted(n for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []
    return open(os.path.join(d, names[0]), "rb").read() if names else b""


def apache_conf(root, port: int, **kw) -> dict:
    return {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "listenPort": port,
            "storePathRootDir": str(root), "storePathCommitLog": str(root / "commitlog"),
            "mappedFileSizeCommitLog": FSIZE, "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
            "autoCreateTopicEnable": "true", "flushDiskType": "ASYNC_FLUSH", **kw}


async def _send_some(addr: str, n: int) -> None:
    c = await RawClient.connect(addr)
    for i in range(n):
        r = await send(c, "Interop", b"ha-%d" % i, tags="T", keys=f"k{i}", qid=i % 4)
        assert r.code == 0, (r.code, r.remark)
    await c.close()


async def _until_same(master_dir, slave_dir, end: int, timeout: float, what) -> None:
    deadline = time.monotonic() + timeout
    while True:
        a, b = first_segment(master_dir)[:end], first_segment(slave_dir)[:end]
        if len(a) == end and a == b:
            return
        assert time.monotonic() < deadline, f"CommitLogs differ after {timeout}s\n{what()[-3000:]}"
        await asyncio.sleep(0.2)


async def test_apache_slave_follows_delaymq_master(tmp_path):
    mport, jport = ha_port_pair(), ha_port_pair()
    master = BrokerProcess(tmp_path / "m", {"mappedFileSizeCommitLog": FSIZE}, port=mport).start()
    try:
        await _send_some(master.addr, 200)
        seg = first_segment(master.store)
        end = len(seg.rstrip(b"\0"))
        jroot = tmp_path / "apache"
        with JavaServer("mqbroker", tmp_path / "j", apache_conf(jroot, jport, brokerId=1, brokerRole="SLAVE",
                                                             haMasterAddress=f"127.0.0.1:{mport + 1}"), jport) as j:
            await _until_same(master.store, jroot, end, 60, j.output)
    finally:
        master.stop()


async def test_delaymq_slave_follows_apache_master(tmp_path):
    jport, sport = ha_port_pair(), ha_port_pair()
    jroot = tmp_path / "apache"
    with JavaServer("mqbroker", tmp_path / "j", apache_conf(jroot, jport, brokerId=0,
                                                         brokerRole="ASYNC_MASTER"), jport) as j:
        await _send_some(f"127.0.0.1:{jport}", 200)
        end = len(first_segment(jroot).rstrip(b"\0"))
        slave = BrokerProcess(tmp_path / "s", {"mappedFileSizeCommitLog": FSIZE, "brokerRole": "SLAVE",
                                               "brokerId": 1, "haMasterAddress": f"127.0.0.1:{jport + 1}"},
                              port=sport).start()
        try:
            await _until_same(jroot, slave.store, end, 60, lambda: j.output() + slave.diagnostics())
        finally:
            slave.stop()
