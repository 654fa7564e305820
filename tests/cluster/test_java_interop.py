"""Apache RocketMQ 4.9.7, one way: a delaymq broker registers with the Apache NameServer, mqadmin
clusterList lists it, and the stock Java client sends (plain and delay-level) and consumes through it.
The other way is test_java_apache_broker.py."""

from __future__ import annotations

import pytest

from tests.helpers.broker import pick_port_pair
from tests.helpers.cluster import cluster_brokers, route_brokers, wait_until
from tests.helpers.java import JavaServer, mqadmin, requires_java

pytestmark = [requires_java, pytest.mark.java]
LEVELS = "200ms 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s"


def test_delaymq_broker_registers_with_the_apache_namesrv_and_the_java_client_works_through_it(
        tmp_path, cluster_broker, java_client):
    port = pick_port_pair()
    with JavaServer("mqnamesrv", tmp_path / "apache-ns", {"listenPort": port}, port) as ns:
        broker = cluster_broker("dmq-a", ns, messageDelayLevel=LEVELS)
        assert cluster_brokers(ns.addr) == {"dmq-a": {"0": broker.addr}}
        listed = mqadmin("clusterList", "-n", ns.addr)
        assert "dmq-a" in listed.stdout and broker.addr in listed.stdout, listed.stdout + listed.stderr
        assert "Exception" not in listed.stdout, listed.stdout  # every runtime field clusterList reads is there
        # a topic nobody created: the Java producer takes TBW102's route from the Apache name server,
        # our broker auto-creates it and registers it at once
        sent = java_client.produce(ns, "TjavaNs", 12, "m")
        assert {s["broker"] for s in sent} == {"dmq-a"}
        wait_until(lambda: route_brokers(ns.addr, "TjavaNs") == {"dmq-a"}, 30, "TjavaNs in the Apache route",
                   broker.diagnostics)
        delayed = java_client.produce(ns, "TjavaNs", 4, "d", delay_level=2)  # level 2 = 1 s
        got = java_client.consume(ns, "TjavaNs", "GID_javaNs", 16, 60)
        assert {r["body"] for r in got} == {s["body"] for s in sent + delayed}
        waited = {r["body"]: r["store_ts"] - r["born_ts"] for r in got if r["body"].startswith("d-")}
        assert len(waited) == 4 and all(w >= 1000 for w in waited.values()), \
            f"delay level 2 (1 s) delivered early: {waited}"
