"""The three-process cluster of the README (delaymq-namesrv, master, slave) with no haMasterAddress:
the slave follows the master the name server names; when the master dies the route keeps the slave
(consumers read there); `delaymq broker promote` re-registers it as brokerId 0; the old master comes
back as its slave (found through the name server) and cuts its unreplicated tail."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import wire
from tests.helpers.broker import REPO_ROOT, BrokerProcess
from tests.helpers.cluster import cluster_brokers, topic_route, wait_until

from .test_ha_replication import ha_port_pair

SEND_V2 = 310


def send(addr: str, topic: str, body: bytes, qid: int = 0) -> wire.Reply:
    ext = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": "0", "g": "0", "h": "0",
           "i": "WAIT\x01true\x02", "j": "0", "k": "false"}
    return wire.invoke(addr, SEND_V2, ext, body)


@pytest.mark.process
def test_three_process_cluster_failover_through_the_name_server(namesrv_factory, tmp_path):
    ns = namesrv_factory()
    common = {"namesrvAddr": ns.addr, "brokerName": "broker-a", "mappedFileSizeCommitLog": 8 << 20,
              "slaveSynchronizeIntervalMs": 300}
    mport, sport = ha_port_pair(), ha_port_pair()
    master = BrokerProcess(tmp_path / "m", {**common, "brokerRole": "SYNC_MASTER"}, port=mport).start()
    slave = BrokerProcess(tmp_path / "s", {**common, "brokerRole": "SLAVE", "brokerId": 1}, port=sport).start()
    back = None
    try:
        wait_until(lambda: cluster_brokers(ns.addr).get("broker-a") == {"0": master.addr, "1": slave.addr}, 15,
                   "master and slave registered", ns.diagnostics)
        master.create_topic("Nt", 4)
        # SEND_OK from a SYNC_MASTER: the slave found the master's HA address through the name server
        wait_until(lambda: send(master.addr, "Nt", b"first").code == 0, 15, "a slave acking", slave.diagnostics)
        for i in range(10):
            assert send(master.addr, "Nt", b"m%d" % i).code == 0
        master.kill()
        wait_until(lambda: cluster_brokers(ns.addr).get("broker-a") == {"1": slave.addr}, 30,
                   "the dead master out of the route", ns.diagnostics)
        assert topic_route(ns.addr, "Nt")["queueDatas"]  # the slave keeps the topic routable for consumers
        assert wire.max_offset(slave.addr, "Nt", 0) == 11
        assert send(slave.addr, "Nt", b"refused").code == 14

        p = subprocess.run([sys.executable, "-m", "client.cli", "broker", "promote", "-n", ns.addr,
                            "-b", slave.addr], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert cluster_brokers(ns.addr).get("broker-a") == {"0": slave.addr}  # re-registered before answering
        assert topic_route(ns.addr, "Nt")["brokerDatas"][0]["brokerAddrs"] == {"0": slave.addr}
        assert send(slave.addr, "Nt", b"new").code == 0

        back = BrokerProcess(tmp_path / "m", {**common, "brokerRole": "SLAVE", "brokerId": 1}, port=mport).start()
        wait_until(lambda: cluster_brokers(ns.addr).get("broker-a") == {"0": slave.addr, "1": back.addr}, 15,
                   "the old master back as a slave", ns.diagnostics)
        wait_until(lambda: wire.max_offset(back.addr, "Nt", 0) == 12, 15, "the old master replicating",
                   back.diagnostics)
    finally:
        for b in (back, slave):
            if b is not None and b.running:
                b.stop()
        master.kill()


@pytest.mark.java
def test_java_client_reads_from_the_slave_then_uses_the_promoted_master(namesrv_factory, java_client, tmp_path):
    """The stock Java 4.9.7 client through delaymq-namesrv: SEND_OK from a SYNC_MASTER; with the master
    killed, a push consumer gets every message from the slave; after promote, producers and consumers
    use the new master (delay level 1 delivered by it)."""
    ns = namesrv_factory()
    common = {"namesrvAddr": ns.addr, "brokerName": "broker-a", "mappedFileSizeCommitLog": 8 << 20,
              "slaveSynchronizeIntervalMs": 300}
    mport, sport = ha_port_pair(), ha_port_pair()
    master = BrokerProcess(tmp_path / "m", {**common, "brokerRole": "SYNC_MASTER"}, port=mport).start()
    slave = BrokerProcess(tmp_path / "s", {**common, "brokerRole": "SLAVE", "brokerId": 1}, port=sport).start()
    try:
        wait_until(lambda: cluster_brokers(ns.addr).get("broker-a") == {"0": master.addr, "1": slave.addr}, 15,
                   "master and slave registered", ns.diagnostics)
        master.create_topic("Jt", 4)
        wait_until(lambda: send(master.addr, "Jt", b"warm").code == 0, 15, "a slave acking", slave.diagnostics)
        sent = java_client.produce(ns, "Jt", 20, "before")
        master.kill()
        wait_until(lambda: cluster_brokers(ns.addr).get("broker-a") == {"1": slave.addr}, 30, "master gone")
        got = java_client.consume(ns, "Jt", "JG", 21, 40)
        assert {r["body"] for r in got} >= {s["body"] for s in sent}
        p = subprocess.run([sys.executable, "-m", "client.cli", "broker", "promote", "-n", ns.addr,
                            "-b", slave.addr], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        after = java_client.produce(ns, "Jt", 10, "after", delay_level=1)
        got = java_client.consume(ns, "Jt", "JG2", 31, 40)
        assert {s["body"] for s in after} <= {r["body"] for r in got}
        for r in got:
            if r["body"].startswith("after-"):
                assert r["store_ts"] - r["born_ts"] >= 1000  # a delay-level-1 delivery, never early
    finally:
        slave.stop()
        master.kill()


@pytest.mark.process
def test_a_slave_started_before_its_master_replicates_from_its_first_seconds(namesrv_factory, tmp_path):
    """Issue 25 item 4: only REGISTER_BROKER's answer names the master; with forceRegister=false and the
    longest registration period (60 s), a slave that registered before its master existed must not wait
    for the next forced round. It registers in full every second until it knows its master, so a
    SYNC_MASTER has its replica long before that period (the bound below is a quarter of it)."""
    ns = namesrv_factory()
    common = {"namesrvAddr": ns.addr, "brokerName": "broker-a", "mappedFileSizeCommitLog": 8 << 20,
              "forceRegister": "false", "registerNameServerPeriod": 60000, "slaveSynchronizeIntervalMs": 300}
    mport, sport = ha_port_pair(), ha_port_pair()
    slave = BrokerProcess(tmp_path / "s", {**common, "brokerRole": "SLAVE", "brokerId": 1}, port=sport).start()
    master = None
    try:
        wait_until(lambda: cluster_brokers(ns.addr).get("broker-a") == {"1": slave.addr}, 15,
                   "the slave registered alone", ns.diagnostics)
        master = BrokerProcess(tmp_path / "m", {**common, "brokerRole": "SYNC_MASTER"}, port=mport).start()
        master.create_topic("Early", 4)
        wait_until(lambda: send(master.addr, "Early", b"first").code == 0, 15, "a slave acking",
                   slave.diagnostics)
        # every send the wait made is stored (a SYNC_MASTER answers SLAVE_NOT_AVAILABLE after storing)
        stored = wire.max_offset(master.addr, "Early", 0)
        wait_until(lambda: wire.max_offset(slave.addr, "Early", 0) == stored, 15, "the records on the slave",
                   slave.diagnostics)
    finally:
        slave.stop()
        if master is not None:
            master.stop()
