"""Controller mode through real parts (issue 25): Apache 5.1.3's standalone controller (`mqcontroller`
from ../shared/rocketmq5), a delaymq name server and two delaymq brokers of one replica group with
`enableControllerMode=true`. The first becomes master (controller id 1, brokerId 0 at the name server),
the second its slave; the master reports the caught-up slave into the SyncStateSet
(ALTER_SYNC_STATE_SET) and 5.x mqadmin `getSyncStateSet` shows both. Delay-level messages are sent,
replicated, and the master is killed with SIGKILL while they are pending: the controller elects the
slave, which registers with the name server as brokerId 0 and delivers every pending message, delay-level
and timer, once each, none before its due time; its failover figures are exported on /metrics. The old
master, restarted, rejoins as the new master's slave and is reported back into the SyncStateSet;
`mqadmin electMaster` then hands the group back to it while delay-level and timer messages are being
delivered (issue 25 item 3, the orderly hand-over): the running master steps down (fenced) before the
elected one starts, and every message is delivered exactly once, none early. Then 5.x mqadmin's
`getBrokerEpoch`, `getControllerMetaData` and `clusterList` show the group as it is."""

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
from codec.controller import (
    ElectMasterRequestHeader,
    EpochEntryCache,
    SyncStateInfo,
    decode_broker_replicas_info,
    encode_broker_names,
)
from tests.helpers.broker import BrokerProcess, pick_port_pair
from tests.helpers.cluster import NamesrvProcess, cluster_brokers
from tests.helpers.rocketmq5 import mqadmin5, requires_rocketmq5, standalone_controller
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
N = 120  # delay-level messages, level 3 (8 s), and as many timers (8 s): pending when the master dies
M = 150  # delay-level (level 1, 1 s) and timer messages (due over 1-6 s) being delivered at the hand-over
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


def mqadmin_retried(*args: str, attempts: int = 5) -> subprocess.CompletedProcess[str]:
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


async def delivered(n: RawClient, keys: set[str], diag: Callable[[], str]) -> tuple[dict[str, Any], dict[str, int]]:
    """Pull TOPIC from the start until every one of `keys` was delivered: (first delivery of each key,
    how many copies of each key the queues hold)."""
    seen: dict[str, Any] = {}
    copies: dict[str, int] = {}
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
                    key = m["props"].get("UNIQ_KEY")
                    if key in keys:
                        seen.setdefault(key, m)
                        copies[key] = copies.get(key, 0) + 1
                offsets[q] = int(r.ext["nextBeginOffset"])
        return set(seen) >= keys
    await until(all_delivered, 40, lambda: f"{len(keys - set(seen))} missing, last pulls {last}; " + diag())
    # a level and the wheel deliver in due order, so a repeat of an earlier message is stored before the
    # last one: one more pass over every queue finds any
    await all_delivered()
    return seen, copies


def broker_conf(ctrl: str, ns: str, metrics_port: int) -> dict[str, object]:
    # brokerId / brokerRole as in Apache's controller examples: the controller decides both
    return {"enableControllerMode": "true", "controllerAddr": ctrl, "namesrvAddr": ns, "brokerName": GROUP,
            "brokerClusterName": CLUSTER, "brokerId": -1, "brokerRole": "SLAVE",
            "messageDelayLevel": " ".join(f"{ms // 1000}s" for ms in LEVELS_MS),
            "mappedFileSizeCommitLog": 64 << 20, "slaveSynchronizeIntervalMs": 300, "metricsPort": metrics_port,
            "registerNameServerPeriod": 2000}


async def test_controller_elects_the_slave_after_kill_9(tmp_path: Path) -> None:
    controller, ctrl = standalone_controller(tmp_path / "ctrl")
    controller.start()
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
        due: dict[str, int] = {}  # a lower bound of each message's due time
        for i in range(N):
            key = f"k{i}"
            due[key] = int(time.time() * 1000) + LEVELS_MS[2]  # its store time is later: due no earlier
            r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY=key, DELAY="3"), i % QUEUES), key.encode())
            assert r.code == 0, (r.code, r.remark)
            key = f"t{i}"
            due[key] = int(time.time() * 1000) + 8000
            r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY=key, TIMER_DELIVER_MS=str(due[key])),
                                                         i % QUEUES), key.encode())
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

        # every pending message delivered by the new master, once, none early
        n = await RawClient.connect(b.addr)
        seen, copies = await delivered(n, set(due), diag)
        await n.close()
        assert [k for k in due if k not in seen] == []
        assert {k: v for k, v in copies.items() if v > 1} == {}
        early = [k for k, m in seen.items() if m["store_ts"] < due[k]]
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

        # an operator's hand-over (5.x mqadmin electMaster's request) while scheduled messages are being delivered:
        # a is elected while b runs; b steps down before a starts (HAND_OVER_MASTER: fenced, it refuses
        # sends and leaves brokerId 0 to a), a catches up with b's last byte and continues: every message
        # once, none lost, none early
        c = await RawClient.connect(b.addr)
        handed: dict[str, int] = {}
        for i in range(M):
            key = f"h{i}"
            handed[key] = int(time.time() * 1000) + LEVELS_MS[0]
            r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY=key, DELAY="1"), i % QUEUES), key.encode())
            assert r.code == 0, (r.code, r.remark)
            key = f"w{i}"
            handed[key] = int(time.time() * 1000) + 1000 + (5000 * i) // M
            r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY=key, TIMER_DELIVER_MS=str(handed[key])),
                                                         i % QUEUES), key.encode())
            assert r.code == 0, (r.code, r.remark)
        await c.close()
        # CONTROLLER_ELECT_MASTER as mqadmin's electMaster sends it (designateElect); sent from here, as a
        # JVM started on this loaded host can spend mqadmin's 3 s timeout before its request goes out
        ctl = await RawClient.connect(ctrl)
        r = await ctl.invoke(int(RequestCode.CONTROLLER_ELECT_MASTER),
                             ElectMasterRequestHeader(CLUSTER, GROUP, 1, designateElect=True).to_ext())
        await ctl.close()
        assert r.code == 0, (r.code, r.remark)
        await until(lambda: routed(a.addr, 0), 30, diag)
        await until(lambda: routed(b.addr, 2), 30, diag)
        assert (await runtime(a.addr))["brokerRole"] == "ASYNC_MASTER"
        n = await RawClient.connect(a.addr)  # b's deliveries reached a before it stepped down: all are here
        seen, copies = await delivered(n, set(handed), diag)
        await n.close()
        assert [k for k in handed if k not in seen] == []
        assert {k: v for k, v in copies.items() if v > 1} == {}  # 0 duplicates
        assert [k for k, m in seen.items() if m["store_ts"] < handed[k]] == []
        a_start = int((await runtime(a.addr))["haEpochStartOffset"])  # a's own writes begin here
        late_by_b = sum(1 for k in handed if seen[k]["phys"] < a_start)
        print(f"hand-over: {late_by_b} of {len(handed)} delivered by the old master, the rest by the new one")
        c = await RawClient.connect(b.addr)
        refused = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY="late"), 0), b"late")
        await c.close()
        assert refused.code != 0 and "read-only" in (refused.remark or ""), (refused.code, refused.remark)
        c = await RawClient.connect(a.addr)
        r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY="new-master"), 0), b"n")
        await c.close()
        assert r.code == 0, (r.code, r.remark)

        # live demotion: b, not restarted, becomes a's slave (AutoSwitch handshake against a's epochs),
        # replicates from it and is reported back into a's SyncStateSet; its CommitLog is a's, byte for byte
        async def b_demoted() -> bool:
            info = await runtime(b.addr)
            return (info["brokerRole"], info["brokerId"]) == ("SLAVE", "2")
        await until(b_demoted, 30, diag)

        async def b_in_a_set() -> bool:
            st = await sync_state(ctrl)
            return st is not None and st.master_broker_id == 1 and {r.broker_id for r in st.in_sync_replicas} == {1, 2}
        await until(b_in_a_set, 30, diag)
        c = await RawClient.connect(a.addr)
        r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY="after-demotion"), 1), b"d")
        await c.close()
        assert r.code == 0, (r.code, r.remark)
        a_end = int((await runtime(a.addr))["commitLogMaxOffset"])

        async def b_has_a_end() -> bool:
            return int((await runtime(b.addr))["commitLogMaxOffset"]) == a_end
        await until(b_has_a_end, 30, diag)

        def commitlog(store: Path) -> bytes:
            first = sorted((store / "commitlog").iterdir())[0]  # 64 MiB segments: everything is in the first
            with open(first, "rb") as f:
                return f.read(a_end)
        assert commitlog(a.store) == commitlog(b.store)
        c = await RawClient.connect(b.addr)  # b answers as a slave now
        refused = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY="to-slave"), 0), b"s")
        await c.close()
        assert refused.code != 0, (refused.code, refused.remark)

        # operators (issue 25 item 5): the epoch cache as mqadmin reads it, then Apache 5.1.3's mqadmin itself
        c = await RawClient.connect(a.addr)
        r = await c.invoke(int(RequestCode.GET_BROKER_EPOCH_CACHE), {})
        await c.close()
        cache = EpochEntryCache.decode(r.body)
        assert (r.code, cache.cluster_name, cache.broker_name, cache.broker_id) == (0, CLUSTER, GROUP, 0)
        assert cache.epoch_list[-1].epoch == 3 and cache.epoch_list[-1].start_offset <= cache.max_offset
        epochs = mqadmin_retried("getBrokerEpoch", "-n", ns.addr, "-b", GROUP)  # GET_BROKER_EPOCH_CACHE, each broker
        out = epochs.stdout + epochs.stderr
        assert f"#brokerAddr\t{a.addr}" in out and f"#brokerAddr\t{b.addr}" in out, out
        assert "EpochEntry{epoch=3, startOffset=" in out and "EpochEntry{epoch=2, startOffset=" in out, out
        meta = mqadmin_retried("getControllerMetaData", "-a", ctrl)
        assert f"#ControllerLeaderAddress\t{ctrl}" in meta.stdout, meta.stdout + meta.stderr
        clusters = mqadmin_retried("clusterList", "-n", ns.addr)
        rows = [ln.split() for ln in clusters.stdout.splitlines() if ln.split()[:1] == [CLUSTER]]
        assert {(r[1], r[2], r[3]) for r in rows} >= {(GROUP, "0", a.addr), (GROUP, "2", b.addr)}, clusters.stdout
    finally:
        for p in (a, b):
            if p.proc is not None and p.proc.poll() is None:
                p.kill()
        ns.stop()
        controller.stop()
