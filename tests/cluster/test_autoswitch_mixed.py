"""Mixed replica groups under Apache 5.1.3's controller (issue 25 item 2): RocketMQ 5's AutoSwitch HA
between a delaymq broker and an Apache 5.1.3 broker (../shared/rocketmq5), both ways, through real
processes: the slave of the other kind handshakes with its controller id, replicates, is taken into the
SyncStateSet by the master, receives every message a send was answered for (allAckInSyncStateSet), and
is elected when the master is killed with SIGKILL -- then the name server routes it as brokerId 0 and it
serves the messages it replicated."""

from __future__ import annotations

from pathlib import Path

import pytest

from codec.codes import RequestCode
from tests.helpers.broker import BrokerProcess, pick_port_pair
from tests.helpers.cluster import NamesrvProcess, cluster_brokers
from tests.helpers.rocketmq5 import Rmq5Process, requires_rocketmq5, standalone_controller
from tests.helpers.wire import create_topic, invoke

from .test_autoswitch_ha import TOPIC, keys_in_queue, send_keys
from .test_controller_mode import CLUSTER, GROUP, broker_conf, sync_state, until
from .test_ha_replication import ha_port_pair

pytestmark = [pytest.mark.java, pytest.mark.process, requires_rocketmq5]

FSIZE = 64 << 20  # as broker_conf's: a slave's CommitLog files are its master's


def apache_broker(work: Path, ctrl: str, ns: str) -> Rmq5Process:
    port = ha_port_pair()
    root = work / "store"
    return Rmq5Process("mqbroker", work, {
        "brokerClusterName": CLUSTER, "brokerName": GROUP, "brokerId": -1, "brokerRole": "SLAVE",
        "enableControllerMode": "true", "controllerAddr": ctrl, "namesrvAddr": ns, "allAckInSyncStateSet": "true",
        "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1", "listenPort": port, "haListenPort": port + 1,
        "storePathRootDir": str(root), "storePathCommitLog": str(root / "commitlog"), "mappedFileSizeCommitLog": FSIZE,
        "flushDiskType": "ASYNC_FLUSH", "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true"},
        port, ready_timeout=120)


def controller_at(tmp_path: Path) -> tuple[Rmq5Process, str]:
    return standalone_controller(tmp_path / "ctrl")


def delaymq_broker(work: Path, ctrl: str, ns: str) -> BrokerProcess:
    return BrokerProcess(work, {**broker_conf(ctrl, ns, pick_port_pair()), "allAckInSyncStateSet": "true"},
                         port=ha_port_pair(), ready_timeout=90)


async def in_sync(ctrl: str, master: int, members: set[int]) -> bool:
    s = await sync_state(ctrl)
    return s is not None and s.master_broker_id == master and {r.broker_id for r in s.in_sync_replicas} == members


async def routed(ns: str, addr: str) -> bool:
    return cluster_brokers(ns).get(GROUP, {}).get("0") == addr


async def topic_known(addr: str) -> bool:
    """The slave's metadata sync brought the topic (GET_ALL_TOPIC_CONFIG): else, elected, it answers 17."""
    reply = invoke(addr, int(RequestCode.GET_ALL_TOPIC_CONFIG))
    return reply.code == 0 and f'"{TOPIC}"'.encode() in reply.body


def apache_log(j: Rmq5Process) -> str:
    logs = j.workdir / "home" / "logs" / "rocketmqlogs"
    return "".join(p.read_text(errors="replace")[-3000:] for p in (logs / "broker.log", logs / "store.log")
                   if p.exists())


async def test_an_apache_slave_of_a_delaymq_master_replicates_and_is_elected(tmp_path: Path) -> None:
    controller, ctrl = controller_at(tmp_path)
    controller.start()
    ns = NamesrvProcess(tmp_path / "ns").start()
    a = delaymq_broker(tmp_path / "a", ctrl, ns.addr)
    j = apache_broker(tmp_path / "j", ctrl, ns.addr)
    try:
        a.start()
        diag = lambda: controller.output()[-1000:] + a.diagnostics() + apache_log(j)  # noqa: E731
        await until(lambda: in_sync(ctrl, 1, {1}), 30, diag)
        j.start()
        await until(lambda: in_sync(ctrl, 1, {1, 2}), 60, diag)  # a took the Apache slave (id 2) into the set

        create_topic(a.addr, TOPIC, 1)
        keys = [f"m{i}" for i in range(20)]
        await send_keys(a.addr, keys)  # each answered once j acked it (allAckInSyncStateSet)
        await until(lambda: topic_known(j.addr), 30, diag)
        a.kill()
        await until(lambda: in_sync(ctrl, 2, {2}), 60, diag)
        await until(lambda: routed(ns.addr, j.addr), 60, diag)

        async def served() -> bool:
            return await keys_in_queue(j.addr) == keys
        await until(served, 30, diag)
    finally:
        for p in (a, j):
            if p.proc is not None and p.proc.poll() is None:
                p.kill()
        ns.stop()
        controller.stop()


async def test_a_delaymq_slave_of_an_apache_master_replicates_and_is_elected(tmp_path: Path) -> None:
    controller, ctrl = controller_at(tmp_path)
    controller.start()
    ns = NamesrvProcess(tmp_path / "ns").start()
    j = apache_broker(tmp_path / "j", ctrl, ns.addr)
    b = delaymq_broker(tmp_path / "b", ctrl, ns.addr)
    try:
        j.start()
        diag = lambda: controller.output()[-1000:] + apache_log(j) + b.diagnostics()  # noqa: E731
        await until(lambda: in_sync(ctrl, 1, {1}), 60, diag)
        await until(lambda: routed(ns.addr, j.addr), 60, diag)
        b.start()
        await until(lambda: in_sync(ctrl, 1, {1, 2}), 60, diag)  # the Apache master took b (id 2) into the set

        create_topic(j.addr, TOPIC, 1)
        keys = [f"m{i}" for i in range(20)]
        await send_keys(j.addr, keys)

        async def replicated() -> bool:
            return await keys_in_queue(b.addr) == keys
        await until(replicated, 30, diag)
        await until(lambda: topic_known(b.addr), 30, diag)
        epochs = (b.store / "epochFileCheckpoint").read_text().splitlines()
        assert epochs[2:] == ["1-0"], epochs  # the Apache master's epoch, from its transfer headers

        j.kill()
        await until(lambda: in_sync(ctrl, 2, {2}), 60, diag)
        await until(lambda: routed(ns.addr, b.addr), 60, diag)
        assert await keys_in_queue(b.addr) == keys
        await send_keys(b.addr, ["after"])  # the new master takes writes
    finally:
        for p in (j, b):
            if p.proc is not None and p.proc.poll() is None:
                p.kill()
        ns.stop()
        controller.stop()
