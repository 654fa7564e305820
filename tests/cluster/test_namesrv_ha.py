"""Registration and the HA room together, as processes: a slave configured without haMasterAddress
follows the master the name server names in its REGISTER_BROKER answer; when the master dies the
name server drops it at once, and a promoted slave re-registers as brokerId 0 so producers (the C++
client) reach it through the name server."""

from __future__ import annotations

import json

import pytest

from tests.helpers import wire
from tests.helpers.cluster import cluster_brokers, route, topic_route, wait_until
from tests.interop.checks import sent_ok

pytestmark = pytest.mark.interop
PROMOTE_BROKER = 3101


def _stored(addr: str, topic: str) -> int:
    return sum(wire.max_offset(addr, topic, q) for q in range(2))


def test_slave_follows_the_master_named_by_the_namesrv_and_a_promotion_reregisters_as_master(
        namesrv_factory, cluster_broker, agents):
    ns = namesrv_factory()
    master = cluster_broker("broker-a", ns)
    slave = cluster_broker("broker-a", ns, brokerRole="SLAVE", brokerId=1)  # no haMasterAddress
    assert cluster_brokers(ns.addr) == {"broker-a": {"0": master.addr, "1": slave.addr}}
    master.create_topic("Tha", 2)
    wait_until(lambda: route(ns.addr, "Tha") is not None, 30, "Tha in the route", ns.diagnostics)
    assert topic_route(ns.addr, "Tha")["brokerDatas"][0]["brokerAddrs"] == {"0": master.addr, "1": slave.addr}
    sent_ok(agents.run_cpp("produce", ns, topic="Tha", count=20, body_prefix="before-"), 20)
    assert _stored(master.addr, "Tha") == 20
    wait_until(lambda: _stored(slave.addr, "Tha") == 20, 20,
               "the slave replicated from the master the name server named", slave.diagnostics)
    master.kill()
    wait_until(lambda: cluster_brokers(ns.addr) == {"broker-a": {"1": slave.addr}}, 30,
               "the dead master gone from the routes", ns.diagnostics)
    reply = wire.invoke(slave.addr, PROMOTE_BROKER, body=json.dumps({"brokerRole": "ASYNC_MASTER"}).encode(),
                        timeout=15)
    assert reply.code == 0, reply
    wait_until(lambda: cluster_brokers(ns.addr) == {"broker-a": {"0": slave.addr}}, 30,
               "the promoted slave registered as brokerId 0", slave.diagnostics)
    sent_ok(agents.run_cpp("produce", ns, topic="Tha", count=10, body_prefix="after-"), 10)
    assert _stored(slave.addr, "Tha") == 30
