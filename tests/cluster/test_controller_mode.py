"""Controller mode through real parts (issue 25): Apache 5.1.3's standalone controller (`mqcontroller`
from ../shared/rocketmq5), a delaymq name server and two delaymq brokers of one replica group with
`enableControllerMode=true`. The first becomes master (controller id 1, brokerId 0 at the name server),
the second its slave; the master reports the caught-up slave into the SyncStateSet
(ALTER_SYNC_STATE_SET) and 5.x mqadmin `getSyncStateSet` shows both. Delay-level messages are sent,
replicated, and the master is killed with SIGKILL while they are pending: the controller elects the
slave, which registers with the name server as brokerId 0 and delivers every pending message, none
before its due time; its failover figures are exported on /metrics. The old master, restarted, rejoins
as the new master's slave and is reported back into the SyncStateSet; `mqadmin electMaster` then hands
the group back to it and the running master it replaces is fenced."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from codec.bodies import decode_kv_table
from codec.codes import RequestCode, ResponseCode
from codec.controller import SyncStateInfo, decode_broker_replicas_info, encode_broker_names
from tests.helpers.broker import BrokerProcess, pick_port_pair
from tests.helpers.cluster import NamesrvProcess, cluster_brokers
from tests.helpers.rocketmq5 import Rmq5Process, mqadmin5, requires_rocketmq5
from tests.helpers.wire import create_topic
from tests.server.helpers import pull, send_ext
from tests.server.raw import RawClient, decode_records, props

from .test_ha_replication import ha_port_pair

pytestmark = [pytest.mark.java, pytest.mark.process, requires_rocketmq5]

GROUP = "ctl-a"
CLUSTER = "CtlCluster"
TOPIC = "CtlT"
QUEUES = 2
LEVELS_MS = [1000, 4000, 8000]
N = 120  # delay-level messages, level 3 (8 s): pending when the master dies
SEND_MESSAGE_V2 = 310


async def until(pred: Callable[[], Awaitable[Any]], timeout: float, what: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await pred()
        if got:
            return got
        text = what()
        assert time.monotonic() < deadline, f"not within {timeout}s: {text[:300]} ... {text[-3500:]}"
        await asyncio.sleep(0.1)  # polling a remote state: there is no event to wait on


def mqadmin_retried(*args: str, attempts: int = 3) -> subprocess.CompletedProcess[str]:
    """5.x mqadmin exits 0 even when its call failed (a cold JVM on a loaded host times out its 3 s calls
    to the controller: RemotingTimeoutException): a failed command is run again, at most `attempts` times."""
    for _ in range(attempts - 1):
        got = mqadmin5(*args)
        if "command failed" not in got.stdout + got.stderr:
            return got
    return mqadmin5(*args)


async def sync_state(ctrl: str) -> SyncStateInfo | None:
    c = await RawClient.connect(ctrl)
    try:
        r = await c.invoke(int(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA), {}, encode_broker_names([GROUP]))
    finally:
        await c.close()
    return decode_broker_replicas_info(r.body).get(GROUP) if r.code == 0 else None


async def runtime(addr: str) -> dict[str, str]:
    c = await RawClient.connect(addr)
    try:
        r = await c.invoke(int(RequestCode.GET_BROKER_RUNTIME_INFO), {})
    finally:
        await c.close()
    return decode_kv_table(r.body)


def broker_conf(ctrl: str, ns: str, metrics_port: int) -> dict[str, object]:
    # brokerId / brokerRole as in Apache's controller examples: the controller decides both
    return {"enableControllerMode": "true", "controllerAddr": ctrl, "namesrvAddr": ns, "brokerName": GROUP,
            "brokerClusterName": CLUSTER, "brokerId": -1, "brokerRole": "SLAVE",
            "messageDelayLevel": " ".join(f"{ms // 1000}s" for ms in LEVELS_MS),
            "mappedFileSizeCommitLog": 64 << 20, "slaveSynchronizeIntervalMs": 300, "metricsPort": metrics_port,
            "registerNameServerPeriod": 2000}


async def test_controller_elects_the_slave_after_kill_9(tmp_path: Path) -> None:
    ctrl_port, peer_port = pick_port_pair(), pick_port_pair()
    ctrl = f"127.0.0.1:{peer_port}"
    controller = Rmq5Process("mqcontroller", tmp_path / "ctrl", {
        "controllerDLegerGroup": "g1", "controllerDLegerPeers": f"n0-{ctrl}", "controllerDLegerSelfId": "n0",
        "controllerStorePath": str(tmp_path / "ctrl" / "store"), "listenPort": ctrl_port}, peer_port).start()
    ns = NamesrvProcess(tmp_path / "ns").start()
    a_port, b_port = ha_port_pair(), ha_port_pair()
    a = BrokerProcess(tmp_path / "a", broker_conf(ctrl, ns.addr, pick_port_pair()), port=a_port, ready_timeout=90)
    b_metrics = pick_port_pair()
    b = BrokerProcess(tmp_path / "b", broker_conf(ctrl, ns.addr, b_metrics), port=b_port, ready_timeout=90)
    try:
        a.start()
        b.start()
        diag = lambda: controller.output()[-2000:] + a.diagnostics() + b.diagnostics()  # noqa: E731

        # roles: a master (id 1, brokerId 0 at the name server), b its slave (id 2)
        assert (a.store / "brokerIdentity").read_text() == f"{CLUSTER}#{GROUP}#1"
        assert (b.store / "brokerIdentity").read_text() == f"{CLUSTER}#{GROUP}#2"
        assert (await runtime(a.addr))["brokerRole"] == "ASYNC_MASTER"
        assert (await runtime(b.addr))["brokerRole"] == "SLAVE"

        async def both_in_sync() -> bool:
            s = await sync_state(ctrl)
            return s is not None and s.master_broker_id == 1 and {r.broker_id for r in s.in_sync_replicas} == {1, 2}
        await until(both_in_sync, 30, diag)
        admin = mqadmin_retried("getSyncStateSet", "-a", ctrl, "-b", GROUP)
        assert "#SyncStateSet" in admin.stdout or "syncStateSet" in admin.stdout.lower(), admin.stdout + admin.stderr
        assert re.search(r"InSyncReplica.*?1", admin.stdout, re.S | re.I), admin.stdout

        async def routed(addr: str, broker_id: int) -> bool:
            return cluster_brokers(ns.addr).get(GROUP, {}).get(str(broker_id)) == addr
        await until(lambda: routed(a.addr, 0), 20, diag)

        # pending delay-level messages, replicated before the kill
        create_topic(a.addr, TOPIC, QUEUES)
        c = await RawClient.connect(a.addr)
        sent: dict[str, int] = {}
        for i in range(N):
            key = f"k{i}"
            sent[key] = int(time.time() * 1000)  # <= its store time: due no earlier than this + 8 s
            r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY=key, DELAY="3"), i % QUEUES), key.encode())
            assert r.code == 0, (r.code, r.remark)
        await c.close()
        end = int((await runtime(a.addr))["commitLogMaxOffset"])

        async def replicated() -> bool:  # the bytes, and the topic (slave sync every 300 ms): else b answers 17
            if int((await runtime(b.addr))["commitLogMaxOffset"]) < end:
                return False
            probe = await RawClient.connect(b.addr)
            try:
                return (await pull(probe, "CtlG", TOPIC, 0, 0, max_nums=1)).code != ResponseCode.TOPIC_NOT_EXIST
            finally:
                await probe.close()
        await until(replicated, 20, diag)

        a.kill()
        killed = time.monotonic()

        async def b_is_master() -> bool:
            return await routed(b.addr, 0)
        await until(b_is_master, 30, diag)
        took = time.monotonic() - killed
        info = await runtime(b.addr)
        assert (info["brokerRole"], info["controllerMasterBrokerId"], info["controllerBrokerControllerId"]) == \
            ("ASYNC_MASTER", "2", "2")
        c = await RawClient.connect(b.addr)  # a malformed push: an error code with a remark, nothing changes
        bad = await c.invoke(int(RequestCode.NOTIFY_BROKER_ROLE_CHANGED), {"masterEpoch": "x", "masterBrokerId": "1"})
        await c.close()
        assert bad.code == ResponseCode.CONTROLLER_INVALID_REQUEST and "masterEpoch" in (bad.remark or ""), bad
        s = await sync_state(ctrl)
        assert s is not None and s.master_broker_id == 2 and s.master_epoch is not None and s.master_epoch >= 2

        # every pending message delivered by the new master, none early
        n = await RawClient.connect(b.addr)
        seen: dict[str, Any] = {}
        offsets = [0] * QUEUES
        last: dict[int, object] = {}

        async def all_delivered() -> bool:
            for q in range(QUEUES):
                while True:
                    r = await pull(n, "CtlG", TOPIC, q, offsets[q], max_nums=32)
                    last[q] = (r.code, r.remark, r.ext)
                    if r.code != 0:
                        break
                    for m in decode_records(r.body):
                        seen.setdefault(m["props"]["UNIQ_KEY"], m)
                    offsets[q] = int(r.ext["nextBeginOffset"])
            return set(seen) >= set(sent)
        await until(all_delivered, 40, lambda: f"{len(set(sent) - set(seen))} missing, last pulls {last}; " + diag())
        await n.close()
        early = [k for k, m in seen.items() if m["store_ts"] < sent[k] + LEVELS_MS[2]]
        assert early == []

        # the failover figures, exported
        page = urllib.request.urlopen(f"http://127.0.0.1:{b_metrics}/metrics", timeout=10).read().decode()
        master_s = float(re.search(r"^delaymq_failover_master_seconds (\S+)$", page, re.M).group(1))  # type: ignore[union-attr]
        first_s = float(re.search(r"^delaymq_failover_first_delivery_seconds (\S+)$", page, re.M).group(1))  # type: ignore[union-attr]
        assert 0 <= master_s <= took + 1, (master_s, took)
        assert first_s >= 0
        print(f"kill -9 -> routed as brokerId 0: {took:.2f}s; master lost -> master {master_s}s; "
              f"-> first delivery {first_s}s")

        # the old master comes back: the controller names b, so a rejoins as b's slave (controller id 1),
        # compares HA epochs with b (ReplicaRole.rejoin), catches up and is reported back into the set
        a.start()
        assert (await runtime(a.addr))["brokerRole"] == "SLAVE"
        assert (await runtime(a.addr))["brokerId"] == "1"
        b_end = int((await runtime(b.addr))["commitLogMaxOffset"])

        async def a_caught_up() -> bool:
            return int((await runtime(a.addr))["commitLogMaxOffset"]) >= b_end
        await until(a_caught_up, 30, diag)

        async def a_back_in_sync() -> bool:
            st = await sync_state(ctrl)
            return st is not None and st.master_broker_id == 2 and {r.broker_id for r in st.in_sync_replicas} == {1, 2}
        await until(a_back_in_sync, 30, diag)
        assert await routed(b.addr, 0) and await routed(a.addr, 1)

        # an operator's hand-over (5.x mqadmin electMaster): a is elected while b runs; b cannot turn into
        # a slave live yet, so it is fenced: it refuses sends and leaves brokerId 0 to a at the name server
        admin = mqadmin_retried("electMaster", "-a", ctrl, "-c", CLUSTER, "-bn", GROUP, "-b", "1")
        assert admin.returncode == 0, admin.stdout + admin.stderr
        await until(lambda: routed(a.addr, 0), 30, lambda: f"electMaster said: {admin.stdout[-1500:]}" + diag())
        await until(lambda: routed(b.addr, 2), 30, diag)
        assert (await runtime(a.addr))["brokerRole"] == "ASYNC_MASTER"
        c = await RawClient.connect(b.addr)
        refused = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY="late"), 0), b"late")
        await c.close()
        assert refused.code != 0 and "read-only" in (refused.remark or ""), (refused.code, refused.remark)
        c = await RawClient.connect(a.addr)
        r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY="new-master"), 0), b"n")
        await c.close()
        assert r.code == 0, (r.code, r.remark)
    finally:
        for p in (a, b):
            if p.proc is not None and p.proc.poll() is None:
                p.kill()
        ns.stop()
        controller.stop()
