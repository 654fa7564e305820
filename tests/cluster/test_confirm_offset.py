"""Consumers see only what every SyncStateSet member holds (issue 25, allAckInSyncStateSet=true), through real
parts: Apache 5.1.3's controller (`mqcontroller` from ../shared/rocketmq5), a delaymq name server and two delaymq
brokers of one group. With the slave stopped (SIGSTOP), a message sent to the master is stored there but a pull
answers "no new message"; a held pull is answered with it once the slave resumes and acks (the ack dispatches it:
no timer). Stopped again, the master takes one more message nobody can consume, and is killed with SIGKILL; the
slave, resumed, is elected: it serves every message a consumer saw, and everything its CommitLog holds (a
promoted slave dispatches past the old master's confirmOffset)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from codec.codes import ResponseCode
from tests.helpers.broker import BrokerProcess, pick_port_pair
from tests.helpers.cluster import NamesrvProcess, cluster_brokers
from tests.helpers.rocketmq5 import requires_rocketmq5, standalone_controller
from tests.helpers.wire import create_topic
from tests.server.helpers import pull, send_ext
from tests.server.raw import RawClient, Reply, decode_records, props

from .test_autoswitch_ha import end_of, keys_in_queue
from .test_controller_mode import GROUP, SEND_MESSAGE_V2, broker_conf, runtime, sync_state, until
from .test_ha_replication import ha_port_pair

pytestmark = [pytest.mark.java, pytest.mark.process, requires_rocketmq5]

TOPIC = "AsT"  # keys_in_queue's topic, queue 0


def signal_broker(p: BrokerProcess, sig: signal.Signals) -> None:
    """SIGSTOP / SIGCONT to a broker this test started (by its pid)."""
    assert p.proc is not None and p.proc.poll() is None
    os.kill(p.proc.pid, sig)


async def send_one(addr: str, key: str) -> Reply:
    c = await RawClient.connect(addr)
    try:
        return await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY=key), 0), key.encode(), timeout=30)
    finally:
        await c.close()


async def test_a_message_is_consumable_once_every_member_holds_it(tmp_path: Path) -> None:
    controller, ctrl = standalone_controller(tmp_path / "ctrl")
    controller.start()
    ns = NamesrvProcess(tmp_path / "ns").start()

    def conf() -> dict[str, object]:  # the stopped slave stays in the set (and connected) while the test runs
        return {**broker_conf(ctrl, ns.addr, pick_port_pair()), "allAckInSyncStateSet": "true",
                "haMaxTimeSlaveNotCatchup": 120_000, "haHousekeepingInterval": 120_000, "slaveTimeout": 1000}
    a = BrokerProcess(tmp_path / "a", conf(), port=ha_port_pair(), ready_timeout=90)
    b = BrokerProcess(tmp_path / "b", conf(), port=ha_port_pair(), ready_timeout=90)
    stopped = False
    try:
        a.start()
        b.start()
        diag = lambda: controller.output()[-1500:] + a.diagnostics() + b.diagnostics()  # noqa: E731

        async def in_sync(master: int, members: set[int]) -> bool:
            s = await sync_state(ctrl)
            return s is not None and s.master_broker_id == master and {r.broker_id for r in s.in_sync_replicas} == members
        await until(lambda: in_sync(1, {1, 2}), 30, diag)
        await until(lambda: _limit_set(a.addr), 30, diag)  # the master took the set from the controller
        create_topic(a.addr, TOPIC, 1)
        r = await send_one(a.addr, "m0")
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        assert await keys_in_queue(a.addr) == ["m0"]  # answered after b's ack, which dispatched it

        # b stopped: m1 is stored on a, not consumable
        signal_broker(b, signal.SIGSTOP)
        stopped = True
        before = await end_of(a.addr)
        send = asyncio.ensure_future(send_one(a.addr, "m1"))  # its answer waits for b (FLUSH_SLAVE_TIMEOUT)

        async def stored() -> bool:
            return await end_of(a.addr) > before
        await until(stored, 30, diag)
        c = await RawClient.connect(a.addr)
        try:
            r = await pull(c, "ConfirmG", TOPIC, 0, 1)
            assert (r.code, r.ext.get("maxOffset")) == (ResponseCode.PULL_NOT_FOUND, "1"), (r.code, r.remark, r.ext)
            info = await runtime(a.addr)
            assert int(info["haDispatchLimit"]) < int(info["commitLogMaxOffset"]), info
            assert int(info["haDispatchHeldWrites"]) >= 1, info
            held = asyncio.ensure_future(pull(c, "ConfirmG", TOPIC, 0, 1, suspend_ms=20_000, timeout=40))
            got = await send
            assert got.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (got.code, got.remark)  # not acknowledged
            assert not held.done()  # the held pull still waits: nothing dispatched
            signal_broker(b, signal.SIGCONT)
            stopped = False
            r = await held  # b's ack dispatches m1 and wakes the held pull
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark, r.ext)
            assert [m["props"]["UNIQ_KEY"] for m in decode_records(r.body)] == ["m1"]
        finally:
            await c.close()
        seen = await keys_in_queue(a.addr)
        assert seen == ["m0", "m1"]

        # stopped again: m2 is on a alone, nobody can consume it; then a dies
        signal_broker(b, signal.SIGSTOP)
        stopped = True
        before = await end_of(a.addr)
        send = asyncio.ensure_future(send_one(a.addr, "m2"))
        await until(stored, 30, diag)
        a_end = await end_of(a.addr)
        seen_before_kill = await keys_in_queue(a.addr)
        assert seen_before_kill == seen, seen_before_kill  # m2: "no new message"
        a.kill()
        with contextlib.suppress(Exception):
            await send
        signal_broker(b, signal.SIGCONT)
        stopped = False

        async def b_routed() -> bool:
            return cluster_brokers(ns.addr).get(GROUP, {}).get("0") == b.addr
        await until(b_routed, 60, diag)
        served = await keys_in_queue(b.addr)
        assert served[:2] == seen, served  # every message a consumer saw is on the new master
        # and it serves all it holds: m2 too if its bytes reached b before the kill (they sat in b's socket)
        b_holds_m2 = int((await runtime(b.addr))["haEpochStartOffset"]) >= a_end
        print(f"the elected slave held m2 (past the old master's confirmOffset): {b_holds_m2}")
        assert served == seen + (["m2"] if b_holds_m2 else []), (served, b_holds_m2)
        assert int((await runtime(b.addr))["haDispatchLimit"]) == -1  # alone in the set: no limit
    finally:
        if stopped:
            signal_broker(b, signal.SIGCONT)
        for p in (a, b):
            if p.proc is not None and p.proc.poll() is None:
                p.kill()
        ns.stop()
        controller.stop()


async def _limit_set(addr: str) -> bool:
    return int((await runtime(addr)).get("haDispatchLimit", "-1")) >= 0
