"""Controller mode with stock clients on the outside (issue 25 item 6): Apache 5.1.3's controller, a
delaymq name server, two delaymq brokers of one group with `allAckInSyncStateSet=true` (an acknowledged
send is on both), a stock Java 4.9.7 producer (routes from the name server, no retries) and Apache's 5.x
Python producer through a delaymq-proxy, each sending one message every 50 ms. The master is killed with
SIGKILL while they send: each producer resumes on the elected slave (the 4.x client re-reads its routes
every 30 s: at most 60 s allowed), and every send either client saw acknowledged, before or after the
kill, is stored exactly once on the new master."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from codec.codes import ResponseCode
from tests.helpers.agents import AgentProcess
from tests.helpers.broker import BrokerProcess, pick_port_pair
from tests.helpers.cluster import NamesrvProcess, cluster_brokers
from tests.helpers.outside_producers import ack_times_ms, acked_ids, start_outside_producers
from tests.helpers.rocketmq5 import requires_rocketmq5, standalone_controller
from tests.helpers.wire import create_topic
from tests.server.helpers import pull
from tests.server.raw import RawClient, decode_records

from .test_controller_mode import GROUP, broker_conf, runtime, sync_state, until
from .test_ha_replication import ha_port_pair

pytestmark = [pytest.mark.java, pytest.mark.process, requires_rocketmq5]

TOPIC = "CtlClients"
QUEUES = 4
PAUSE_S = 0.05
RESUME_S = 60.0  # after the kill: the election, plus up to 30 s of the 4.x client's route poll


async def stored_keys(addr: str) -> dict[str, int]:
    """Every UNIQ_KEY in TOPIC's queues on `addr`, with how many copies are stored."""
    c = await RawClient.connect(addr)
    copies: dict[str, int] = {}
    try:
        for q in range(QUEUES):
            offset = 0
            while True:
                r = await pull(c, "CtlClientsCheck", TOPIC, q, offset, max_nums=32)
                if r.code != 0:
                    break
                for m in decode_records(r.body):
                    key = str(m["props"].get("UNIQ_KEY"))
                    copies[key] = copies.get(key, 0) + 1
                offset = int(r.ext["nextBeginOffset"])
    finally:
        await c.close()
    return copies


async def test_outside_clients_resume_on_the_new_master_and_nothing_is_lost_or_doubled(tmp_path: Path) -> None:
    controller, ctrl = standalone_controller(tmp_path / "ctrl")
    controller.start()
    ns = NamesrvProcess(tmp_path / "ns").start()
    conf = lambda: {**broker_conf(ctrl, ns.addr, pick_port_pair()), "allAckInSyncStateSet": "true"}  # noqa: E731
    a = BrokerProcess(tmp_path / "a", conf(), port=ha_port_pair(), ready_timeout=90)
    b = BrokerProcess(tmp_path / "b", conf(), port=ha_port_pair(), ready_timeout=90)
    agents: dict[str, AgentProcess] = {}
    try:
        a.start()
        b.start()

        def diag() -> str:
            return (controller.output()[-1500:] + a.diagnostics() + b.diagnostics()
                    + "".join(x.diagnostics() for x in agents.values()))

        async def both_in_sync() -> bool:
            s = await sync_state(ctrl)
            return s is not None and s.master_broker_id == 1 and {r.broker_id for r in s.in_sync_replicas} == {1, 2}
        await until(both_in_sync, 30, diag)
        create_topic(a.addr, TOPIC, QUEUES)

        async def topic_everywhere() -> bool:  # on the slave (synced every 300 ms), and routed by the name server
            probe = await RawClient.connect(b.addr)
            try:
                on_b = (await pull(probe, "CtlClientsCheck", TOPIC, 0, 0, max_nums=1)).code != ResponseCode.TOPIC_NOT_EXIST
            finally:
                await probe.close()
            return on_b and cluster_brokers(ns.addr).get(GROUP, {}).get("0") == a.addr
        await until(topic_everywhere, 30, diag)

        agents, missing = start_outside_producers(tmp_path / "clients", ns.addr, TOPIC, PAUSE_S)
        if missing:
            pytest.skip(f"an outside client is missing: {missing}")
        producers = {k: v for k, v in agents.items() if k != "proxy"}
        for name, p in producers.items():
            p.wait_for(lambda x: len(x.of("sent")) >= 5, 120, f"{name}: five acknowledged sends before the kill")

        a.kill()
        kill_ms = int(time.time() * 1000)
        deadline = time.monotonic() + RESUME_S
        for name, p in producers.items():
            p.wait_for(lambda x: any(t > kill_ms for t in ack_times_ms(x)), max(1.0, deadline - time.monotonic()),
                       f"{name}: a send acknowledged after the kill (by the new master)")
        assert cluster_brokers(ns.addr).get(GROUP, {}).get("0") == b.addr, diag()
        s = await sync_state(ctrl)
        assert s is not None and s.master_broker_id == 2, s
        for name, p in producers.items():  # a few more after the resume, then stop: the acks are final
            more = len(p.of("sent")) + 3

            def three_more(x: AgentProcess, more: int = more) -> bool:
                return len(x.of("sent")) >= more
            p.wait_for(three_more, 30, f"{name}: three more sends")
            p.terminate()
        acked = {name: acked_ids(p) for name, p in producers.items()}

        copies = await stored_keys(b.addr)
        for name, ids in acked.items():
            assert len(ids) == len(set(ids)), f"{name} reported an id twice"
            assert [k for k in ids if k not in copies] == [], f"{name}: acknowledged but not stored on the new master"
            assert {k: copies[k] for k in ids if copies[k] != 1} == {}, f"{name}: stored more than once"
        after = {name: sum(1 for t in ack_times_ms(p) if t > kill_ms) for name, p in producers.items()}
        print(f"acknowledged {({k: len(v) for k, v in acked.items()})}, after the kill {after}; "
              f"{len(copies)} distinct keys stored on the new master")
        assert (await runtime(b.addr))["brokerRole"] == "ASYNC_MASTER"
    finally:
        for x in agents.values():
            x.kill()
        for br in (a, b):
            if br.proc is not None and br.proc.poll() is None:
                br.kill()
        ns.stop()
        controller.stop()
