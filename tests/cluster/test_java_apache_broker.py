"""Apache RocketMQ 4.9.7, the other way: an Apache broker (compressed registration) registers with
delaymq-namesrv beside a delaymq broker; mqadmin clusterList / topicRoute / updateTopic -c see both and
wipeWritePerm works; the stopped Apache broker leaves the routes."""

from __future__ import annotations

import pytest

from tests.helpers.broker import pick_port_pair
from tests.helpers.cluster import cluster_brokers, route_brokers, topic_route, wait_until
from tests.helpers.java import JavaServer, mqadmin, requires_java

pytestmark = [requires_java, pytest.mark.java]


def test_apache_broker_registers_with_delaymq_namesrv_and_mqadmin_sees_both_brokers(
        tmp_path, namesrv_factory, cluster_broker):
    ns = namesrv_factory()
    dmq = cluster_broker("dmq-a", ns)
    port = pick_port_pair()
    store = tmp_path / "apache-broker-store"
    conf = {"brokerClusterName": "DefaultCluster", "brokerName": "apache-b", "brokerId": 0,
            "listenPort": port, "namesrvAddr": ns.addr, "brokerIP1": "127.0.0.1",
            "storePathRootDir": store, "storePathCommitLog": store / "commitlog",
            "mappedFileSizeCommitLog": 33554432, "mappedFileSizeConsumeQueue": 60000,
            "compressedRegister": "true", "autoCreateTopicEnable": "true", "flushDiskType": "ASYNC_FLUSH"}
    with JavaServer("mqbroker", tmp_path / "apache-broker", conf, port, ready_timeout=90):
        wait_until(lambda: "apache-b" in cluster_brokers(ns.addr), 60, "the Apache broker registered",
                   ns.diagnostics)
        assert cluster_brokers(ns.addr) == {"dmq-a": {"0": dmq.addr}, "apache-b": {"0": f"127.0.0.1:{port}"}}
        assert route_brokers(ns.addr, "TBW102") == {"dmq-a", "apache-b"}  # the compressed body decoded
        listed = mqadmin("clusterList", "-n", ns.addr)
        assert "dmq-a" in listed.stdout and "apache-b" in listed.stdout, listed.stdout + listed.stderr
        assert "Exception" not in listed.stdout, listed.stdout
        made = mqadmin("updateTopic", "-n", ns.addr, "-c", "DefaultCluster", "-t", "Tboth", "-r", "2", "-w", "2")
        assert made.stdout.count("create topic to") == 2, made.stdout + made.stderr
        wait_until(lambda: route_brokers(ns.addr, "Tboth") == {"dmq-a", "apache-b"}, 30,
                   "Tboth on both brokers in the route", ns.diagnostics)
        shown = mqadmin("topicRoute", "-n", ns.addr, "-t", "Tboth")
        assert '"apache-b"' in shown.stdout and '"dmq-a"' in shown.stdout, shown.stdout + shown.stderr
        wiped = mqadmin("wipeWritePerm", "-n", ns.addr, "-b", "dmq-a")  # e.g. before taking dmq-a down
        assert f"wipe write perm of broker[dmq-a] in name server[{ns.addr}] OK" in wiped.stdout, wiped.stdout
        perms = {q["brokerName"]: q["perm"] for q in topic_route(ns.addr, "Tboth")["queueDatas"]}
        assert perms == {"dmq-a": 4, "apache-b": 6}, perms
    wait_until(lambda: "apache-b" not in cluster_brokers(ns.addr), 30, "the stopped Apache broker gone",
               ns.diagnostics)
