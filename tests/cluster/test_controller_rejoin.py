"""A demotion that cuts bytes (issue 25 items 1-2), through real parts: Apache 5.1.3's controller, a delaymq
name server and two delaymq brokers whose haListenPort is NOT listenPort + 1 (each learns the other's
from the master itself, EXCHANGE_BROKER_HA_INFO, or the name server; nothing guesses it).

a is master, b its slave, both in the SyncStateSet; common messages (plain, delay level 3 and timers, all
pending) reach b. b is SIGSTOPped; once a dropped it (connection and SyncStateSet), a takes more (plain,
delay-level and timer messages: an ASYNC master with allAckInSyncStateSet=false answers them) and is
killed with SIGKILL; b, continued, is elected (the controller's enableElectUncleanMaster) and takes new
messages. a restarted rejoins as b's slave: before its scheduler loads it asks b for its HA
address and cuts its CommitLog at the consistent point (its own tail goes; or, when b does not answer
then, its running HA client cuts once the name server names b's HA address, and its following timer
wheel is rebuilt), and then holds b's bytes byte for byte, b's ConsumeQueue offsets, and an index where a key of the cut tail finds nothing. Handed the
group back (electMaster a), a delivers every scheduled message b left pending, once, none early, and
none of the cut ones ever; b, demoted live, follows a at its own HA port, with every master-only service
(delay levels, timer wheel, transaction check-backs, pop revive) stopped; elected again in the same
process, b starts them all again and delivers."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from codec.codes import RequestCode, ResponseCode
from codec.controller import ElectMasterRequestHeader
from tests.helpers.broker import BrokerProcess, pick_port_pair
from tests.helpers.cluster import NamesrvProcess, cluster_brokers
from tests.helpers.rocketmq5 import requires_rocketmq5, standalone_controller
from tests.helpers.wire import create_topic
from tests.server.helpers import pull, send_ext
from tests.server.raw import RawClient, decode_records, props

from .test_controller_mode import (
    CLUSTER,
    GROUP,
    QUEUES,
    SEND_MESSAGE_V2,
    TOPIC,
    broker_conf,
    delivered,
    runtime,
    sync_state,
    until,
)

pytestmark = [pytest.mark.java, pytest.mark.process, requires_rocketmq5]

QUERY_MESSAGE = int(RequestCode.QUERY_MESSAGE)
GET_MAX_OFFSET = int(RequestCode.GET_MAX_OFFSET)
ALL_MASTER_SERVICES = "delayLevels,timerWheel,transactionCheck,popRevive"
SCHEDULED = [(TOPIC, q) for q in range(QUEUES)] + [("SCHEDULE_TOPIC_XXXX", 2), ("rmq_sys_wheel_timer", 0)]


async def put(addr: str, keys: dict[str, int], prefix: str, n: int, level: int, timer_s: int) -> None:
    """n plain messages `<prefix>-p<i>` (KEYS the same), n of delay `level` `<prefix>-d<i>` and n timers
    `<prefix>-t<i>` due in `timer_s`; each key's due time (a lower bound) goes to `keys` (plain: 0)."""
    levels_ms = {1: 1000, 2: 4000, 3: 8000}
    c = await RawClient.connect(addr)
    try:
        for i in range(n):
            now = int(time.time() * 1000)
            for key, extra, due in ((f"{prefix}-p{i}", {}, 0),
                                    (f"{prefix}-d{i}", {"DELAY": str(level)}, now + levels_ms[level]),
                                    (f"{prefix}-t{i}", {"TIMER_DELIVER_MS": str(now + timer_s * 1000)}, now + timer_s * 1000)):
                r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY=key, KEYS=key, **extra), i % QUEUES),
                                   key.encode())
                assert r.code == 0, (key, r.code, r.remark)
                keys[key] = due
    finally:
        await c.close()


async def max_offsets(addr: str) -> dict[tuple[str, int], int]:
    c = await RawClient.connect(addr)
    try:
        out = {}
        for topic, q in SCHEDULED:
            r = await c.invoke(GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)})
            out[(topic, q)] = int(r.ext["offset"]) if r.code == 0 else -r.code
        return out
    finally:
        await c.close()


async def topic_keys(addr: str) -> Counter[str]:
    """Every message of TOPIC from each queue's first offset to its end, counted by UNIQ_KEY."""
    c = await RawClient.connect(addr)
    held: Counter[str] = Counter()
    try:
        for q in range(QUEUES):
            offset = 0
            while True:
                r = await pull(c, "CtlRead", TOPIC, q, offset, max_nums=32)
                if r.code != 0:
                    break
                held.update(str(m["props"].get("UNIQ_KEY")) for m in decode_records(r.body))
                offset = int(r.ext["nextBeginOffset"])
    finally:
        await c.close()
    return held


async def query_key(addr: str, key: str) -> list[bytes]:
    """QUERY_MESSAGE (the index) by KEYS: the bodies found ([] on QUERY_NOT_FOUND)."""
    c = await RawClient.connect(addr)
    try:
        r = await c.invoke(QUERY_MESSAGE, {"topic": TOPIC, "key": key, "maxNum": "32", "beginTimestamp": "0",
                                           "endTimestamp": str(1 << 62)})
    finally:
        await c.close()
    if r.code == ResponseCode.QUERY_NOT_FOUND:
        return []
    assert r.code == 0, (key, r.code, r.remark)
    return [m["body"] for m in decode_records(r.body)]


def continue_when_logged(proc: BrokerProcess, log_path: Path, event: str, timeout: float) -> threading.Thread:
    """SIGCONT `proc` once `event` appears in `log_path` (or after `timeout`): a thread, since the test's
    own thread is blocked in the start of the broker writing that log."""
    def run() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and event not in log_path.read_text(errors="replace"):
            time.sleep(0.05)  # reading a log another process writes: no event to wait on
        assert proc.proc is not None
        os.kill(proc.proc.pid, signal.SIGCONT)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


# pre_start_cut: the master answers EXCHANGE_BROKER_HA_INFO when a restarts, so a cuts before its scheduler
# loads; running_client_cut: b is stopped then (a's question times out), a learns b's HA address from
# the name server and its running HA client cuts, after which a's following wheel is rebuilt
@pytest.mark.parametrize("master_answers", [True, False], ids=["pre_start_cut", "running_client_cut"])
async def test_old_master_rejoins_cutting_what_the_new_epoch_does_not_hold(tmp_path: Path, master_answers: bool) -> None:
    # b is out of the SyncStateSet when a dies (a shrank it when its connection went): electing it is the
    # unclean election that leaves a with bytes the new epoch does not hold
    controller, ctrl = standalone_controller(tmp_path / "ctrl", enableElectUncleanMaster="true")
    controller.start()
    ns = NamesrvProcess(tmp_path / "ns").start()
    brokers = {}
    for name in ("a", "b"):
        # haListenPort: a port of its own (listenPort + 1 stays free, so a guess would reach nothing)
        port, ha_port = pick_port_pair(), pick_port_pair()
        # a master drops a silent slave's connection after 3 s (haHousekeepingInterval), so a stopped
        # slave's socket buffers take none of the tail written after
        conf = {**broker_conf(ctrl, ns.addr, 0), "haListenPort": ha_port, "allAckInSyncStateSet": "false",
                "haHousekeepingInterval": 3000, "haSendHeartbeatInterval": 500}
        if name == "b":  # stopped for a while when a restarts (running_client_cut): not expired meanwhile
            conf["controllerHeartBeatTimeoutMills"] = 30000
        brokers[name] = BrokerProcess(tmp_path / name, conf, port=port, ready_timeout=90)
    a, b = brokers["a"], brokers["b"]
    a_ha, b_ha = (f"127.0.0.1:{p.config['haListenPort']}" for p in (a, b))
    try:
        a.start()
        b.start()
        diag = lambda: controller.output()[-2000:] + a.diagnostics() + b.diagnostics()  # noqa: E731

        async def in_sync(master_id: int) -> bool:
            s = await sync_state(ctrl)
            return s is not None and s.master_broker_id == master_id and \
                {r.broker_id for r in s.in_sync_replicas} == {1, 2}
        await until(lambda: in_sync(1), 30, diag)

        async def routed(addr: str, broker_id: int) -> bool:
            return cluster_brokers(ns.addr).get(GROUP, {}).get(str(broker_id)) == addr
        await until(lambda: routed(a.addr, 0), 20, diag)
        assert (await runtime(b.addr)).get("haMasterAddress") == a_ha  # learned, not a.port + 1

        # common messages, all replicated: plain, delay level 3 (8 s) and timers (8 s), pending at the kill
        create_topic(a.addr, TOPIC, QUEUES)
        keys: dict[str, int] = {}
        await put(a.addr, keys, "common", 20, 3, 8)
        end = int((await runtime(a.addr))["commitLogMaxOffset"])

        async def b_has(n: int) -> bool:
            return int((await runtime(b.addr))["commitLogMaxOffset"]) >= n and \
                (await max_offsets(b.addr))[(TOPIC, 0)] > 0  # the topic too (slave sync): else b answers 17
        await until(lambda: b_has(end), 20, diag)

        # b stops; once a has dropped its connection (and b from the SyncStateSet), a takes a tail of its
        # own, never replicated, and dies
        assert b.proc is not None
        os.kill(b.proc.pid, signal.SIGSTOP)
        cut: dict[str, int] = {}
        try:
            async def b_dropped() -> bool:
                return (await runtime(a.addr)).get("haSlaveCount") == "0"
            await until(b_dropped, 10, diag)
            await put(a.addr, cut, "cut", 20, 3, 8)
            a_end = int((await runtime(a.addr))["commitLogMaxOffset"])
            assert a_end > end
            a.kill()
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)
        await until(lambda: routed(b.addr, 0), 40, diag)
        assert (await runtime(b.addr))["brokerRole"] == "ASYNC_MASTER"
        await put(b.addr, keys, "new", 20, 1, 2)  # b's own: delivered by b before a comes back

        # a rejoins as b's slave: b's HA address from b itself, the tail cut before its scheduler loads
        if master_answers:
            a.start()
        else:
            assert b.proc is not None
            before = a.stderr_path.read_text()
            os.kill(b.proc.pid, signal.SIGSTOP)
            resumed = continue_when_logged(b, a.stderr_path, "ha.master_ha_unknown", 60)
            try:
                a.start()
            finally:
                resumed.join(60)
                os.kill(b.proc.pid, signal.SIGCONT)
        info = await runtime(a.addr)
        assert (info["brokerRole"], info["brokerId"]) == ("SLAVE", "1"), info
        assert info["haMasterServices"] == ""  # a slave runs none of a master's services
        if master_answers:
            log = a.stderr_path.read_text()
            assert "ha.master_ha_learned" in log and b_ha in log, log[-3000:]
            assert "ha.autoswitch_truncated" in log and '"timer_wheel_rebuilt": true' in log, log[-3000:]
        else:
            async def wheel_rebuilt() -> bool:
                log = a.stderr_path.read_text()[len(before):]
                return "ha.master_ha_unknown" in log and "ha.autoswitch_truncated" in log and \
                    "ha.timer_wheel_rebuilt" in log
            await until(wheel_rebuilt, 30, diag)

        async def same_end() -> bool:
            return (await runtime(a.addr))["commitLogMaxOffset"] == (await runtime(b.addr))["commitLogMaxOffset"]
        await until(same_end, 30, diag)
        b_end = int((await runtime(b.addr))["commitLogMaxOffset"])

        def commitlog(store: Path) -> bytes:
            first = sorted((store / "commitlog").iterdir())[0]  # 64 MiB segments: everything is in the first
            with open(first, "rb") as f:
                return f.read(b_end)
        assert commitlog(a.store) == commitlog(b.store)
        async def same_queues() -> bool:  # the ConsumeQueues: a's end where b's is
            return await max_offsets(a.addr) == await max_offsets(b.addr)
        await until(same_queues, 20, diag)
        for key in ("cut-p3", "cut-d3", "cut-t3"):  # the index: the cut tail is gone from it
            assert await query_key(a.addr, key) == [], key
        assert await query_key(a.addr, "new-p3") == [b"new-p3"] and await query_key(a.addr, "common-p3") == [b"common-p3"]
        await until(lambda: in_sync(2), 30, diag)

        # the group handed back to a (electMaster, as mqadmin sends it): a delivers what b left pending and
        # more sent to it now, each once, none early, none of the cut ones (their due time long past)
        ctl = await RawClient.connect(ctrl)
        r = await ctl.invoke(int(RequestCode.CONTROLLER_ELECT_MASTER),
                             ElectMasterRequestHeader(CLUSTER, GROUP, 1, designateElect=True).to_ext())
        await ctl.close()
        assert r.code == 0, (r.code, r.remark)
        await until(lambda: routed(a.addr, 0), 30, diag)
        await put(a.addr, keys, "after", 10, 1, 2)
        n = await RawClient.connect(a.addr)
        seen, _copies = await delivered(n, set(keys), diag)
        await n.close()
        assert [k for k, m in seen.items() if m["store_ts"] < keys[k]] == []
        held = await topic_keys(a.addr)  # a consumer reading the topic from its start: each message once
        assert {k: v for k, v in held.items() if v != 1} == {}
        assert set(held) == set(keys), (set(held) ^ set(keys))  # none of the cut ones
        for key in ("cut-p0", "cut-d5", "cut-t7"):
            assert await query_key(a.addr, key) == [], key

        # b, demoted live, follows a at a's own HA port
        async def b_follows_a() -> bool:
            info = await runtime(b.addr)
            return (info["brokerRole"], info.get("haMasterAddress")) == ("SLAVE", a_ha)
        await until(b_follows_a, 30, diag)
        await until(lambda: in_sync(1), 30, diag)
        # the master-only services: running on the master, stopped on the demoted one
        assert (await runtime(a.addr))["haMasterServices"] == ALL_MASTER_SERVICES
        assert (await runtime(b.addr))["haMasterServices"] == ""

        # b elected again, in the same process that was demoted: each of them starts again and its delay
        # levels and wheel deliver (a level stopped by the demotion is resumed, not left stopped)
        ctl = await RawClient.connect(ctrl)
        r = await ctl.invoke(int(RequestCode.CONTROLLER_ELECT_MASTER),
                             ElectMasterRequestHeader(CLUSTER, GROUP, 2, designateElect=True).to_ext())
        await ctl.close()
        assert r.code == 0, (r.code, r.remark)
        await until(lambda: routed(b.addr, 0), 30, diag)
        again: dict[str, int] = {}
        await put(b.addr, again, "again", 10, 1, 2)
        n = await RawClient.connect(b.addr)
        seen, copies = await delivered(n, set(again), diag)
        await n.close()
        assert {k: v for k, v in copies.items() if v > 1} == {}
        assert [k for k in again if seen[k]["store_ts"] < again[k]] == []
        assert (await runtime(b.addr))["haMasterServices"] == ALL_MASTER_SERVICES
        async def a_demoted() -> bool:
            return (await runtime(a.addr))["haMasterServices"] == "" and \
                (await runtime(a.addr))["brokerRole"] == "SLAVE"
        await until(a_demoted, 30, diag)
    finally:
        for p in (a, b):
            if p.proc is not None and p.proc.poll() is None:
                os.kill(p.proc.pid, signal.SIGCONT)
                p.kill()
        ns.stop()
        controller.stop()
