"""RocketMQ 5's AutoSwitch HA between delaymq brokers under Apache 5.1.3's controller (issue 25 item 2),
through real parts: `mqcontroller` from ../shared/rocketmq5, a delaymq name server, two delaymq brokers.

a becomes master of epoch 1 (epochFileCheckpoint "1-0", Apache's layout), b its slave: b's handshake
names its controller id, so a proposes exactly b for the SyncStateSet; with allAckInSyncStateSet a send
is answered only once b holds it. b is killed: a drops it from the set (not connected) and, alone in
it, takes writes b never sees -- a divergent tail. a is killed; b, restarted, is elected (unclean:
enableElectUncleanMaster) as master of a newer epoch starting at its own end. a, restarted, joins b as a slave,
finds the consistent point against b's epochs at the handshake, cuts its tail there (the divergent
messages are gone from its CommitLog and ConsumeQueue), replicates b's writes of the new epoch and is taken back
into the set; both epoch files then agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from codec.autoswitch_ha import EPOCH_FILE
from codec.codes import ResponseCode
from tests.helpers.broker import BrokerProcess, pick_port_pair
from tests.helpers.cluster import NamesrvProcess
from tests.helpers.rocketmq5 import requires_rocketmq5, standalone_controller
from tests.helpers.wire import create_topic
from tests.server.helpers import pull, send_ext
from tests.server.raw import RawClient, decode_records, props

from .test_controller_mode import SEND_MESSAGE_V2, broker_conf, runtime, sync_state, until
from .test_ha_replication import ha_port_pair

pytestmark = [pytest.mark.java, pytest.mark.process, requires_rocketmq5]

TOPIC = "AsT"


async def send_keys(addr: str, keys: list[str]) -> None:
    c = await RawClient.connect(addr)
    try:
        for k in keys:
            r = await c.invoke(SEND_MESSAGE_V2, send_ext(TOPIC, props(UNIQ_KEY=k), 0), k.encode())
            assert r.code == 0, (k, r.code, r.remark)
    finally:
        await c.close()


async def keys_in_queue(addr: str) -> list[str]:
    c = await RawClient.connect(addr)
    out: list[str] = []
    offset = 0
    try:
        while True:
            r = await pull(c, "AsG", TOPIC, 0, offset, max_nums=32)
            if r.code != ResponseCode.SUCCESS:
                return out
            out += [m["props"]["UNIQ_KEY"] for m in decode_records(r.body)]
            offset = int(r.ext["nextBeginOffset"])
    finally:
        await c.close()


async def end_of(addr: str) -> int:
    return int((await runtime(addr))["commitLogMaxOffset"])


async def test_autoswitch_replicates_and_a_returning_master_cuts_its_divergent_tail(tmp_path: Path) -> None:
    controller, ctrl = standalone_controller(tmp_path / "ctrl", enableElectUncleanMaster="true")
    controller.start()
    ns = NamesrvProcess(tmp_path / "ns").start()

    def conf() -> dict[str, object]:
        return {**broker_conf(ctrl, ns.addr, pick_port_pair()), "allAckInSyncStateSet": "true",
                "haMaxTimeSlaveNotCatchup": 3000}
    a = BrokerProcess(tmp_path / "a", conf(), port=ha_port_pair(), ready_timeout=90)
    b = BrokerProcess(tmp_path / "b", conf(), port=ha_port_pair(), ready_timeout=90)
    try:
        a.start()
        b.start()
        diag = lambda: controller.output()[-1500:] + a.diagnostics() + b.diagnostics()  # noqa: E731

        async def in_sync(master: int, members: set[int]) -> bool:
            s = await sync_state(ctrl)
            return s is not None and s.master_broker_id == master and {r.broker_id for r in s.in_sync_replicas} == members
        await until(lambda: in_sync(1, {1, 2}), 30, diag)
        assert (a.store / EPOCH_FILE).read_text().splitlines()[2:] == ["1-0"]

        # allAckInSyncStateSet: each send is answered once b (in the set) acked it
        create_topic(a.addr, TOPIC, 1)
        first = [f"m{i}" for i in range(20)]
        await send_keys(a.addr, first)
        a_end = await end_of(a.addr)
        assert await end_of(b.addr) >= a_end  # no wait here: b acked before a answered
        assert (b.store / EPOCH_FILE).read_text() == (a.store / EPOCH_FILE).read_text()

        # b goes: a shrinks the set to itself and takes writes b never sees
        b.kill()
        await until(lambda: in_sync(1, {1}), 30, diag)
        divergent = [f"d{i}" for i in range(10)]
        await send_keys(a.addr, divergent)  # answered at once: the set is a alone
        a_tail_end = await end_of(a.addr)
        assert a_tail_end > a_end
        a.kill()

        # b comes back alone and is elected (unclean) as master of a newer epoch from its own end
        b.start()
        await until(lambda: in_sync(2, {2}), 30, diag)
        st = await sync_state(ctrl)
        assert st is not None and st.master_epoch is not None and st.master_epoch >= 2
        b_epochs = (b.store / EPOCH_FILE).read_text().splitlines()[2:]
        assert b_epochs == ["1-0", f"{st.master_epoch}-{a_end}"], b_epochs
        later = [f"n{i}" for i in range(5)]
        await send_keys(b.addr, later)
        b_end = await end_of(b.addr)

        # a rejoins as b's slave: the handshake cuts its divergent tail, then it replicates epoch 2
        a.start()
        assert (await runtime(a.addr))["brokerRole"] == "SLAVE"

        async def a_matches_b() -> bool:
            return await end_of(a.addr) == b_end
        await until(a_matches_b, 30, diag)
        await until(lambda: in_sync(2, {1, 2}), 30, diag)
        assert (a.store / EPOCH_FILE).read_text() == (b.store / EPOCH_FILE).read_text()
        keys = await keys_in_queue(a.addr)
        assert keys == first + later, keys
        assert f'"to_offset": {a_end}' in a.stderr_path.read_text()  # ha.autoswitch_truncated, logged
        # b's next sends wait for a again (allAckInSyncStateSet, a back in the set)
        await send_keys(b.addr, ["after"])
        assert await end_of(a.addr) >= await end_of(b.addr)
    finally:
        for p in (a, b):
            if p.proc is not None and p.proc.poll() is None:
                p.kill()
        ns.stop()
        controller.stop()
