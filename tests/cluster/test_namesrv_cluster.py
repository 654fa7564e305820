"""delaymq-namesrv with delaymq brokers as real processes on loopback: registration with every name
server, merged routes, leaving at once on a closed connection or shutdown, expiry of a silent broker,
QUERY_DATA_VERSION rounds that re-send nothing, and re-registration with a restarted name server."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable

import pytest

from codec.namesrv_bodies import DataVersion, RegisterBrokerBody, TopicConfigData, encode_register_body
from tests.helpers import wire
from tests.helpers.cluster import (
    NamesrvProcess,
    Session,
    cluster_brokers,
    route,
    route_brokers,
    topic_route,
    wait_until,
)

pytestmark = pytest.mark.process

REGISTER_BROKER, GET_BROKER_RUNTIME_INFO = 103, 28


def runtime(addr: str) -> dict[str, str]:
    reply = wire.invoke(addr, GET_BROKER_RUNTIME_INFO)
    assert reply.code == 0, reply
    return json.loads(reply.body)["table"]


def test_two_brokers_register_with_two_namesrvs_share_a_topic_and_leave_at_once(
        namesrv_factory: Callable[[], NamesrvProcess], cluster_broker):
    ns1, ns2 = namesrv_factory(), namesrv_factory()
    a = cluster_broker("broker-a", ns1, ns2)
    b = cluster_broker("broker-b", ns1, ns2, compressedRegister="true")  # the zlib body form
    for ns in (ns1, ns2):  # the start-up registration is awaited before the broker says ready
        assert cluster_brokers(ns.addr) == {"broker-a": {"0": a.addr}, "broker-b": {"0": b.addr}}
        assert route_brokers(ns.addr, "TBW102") == {"broker-a", "broker-b"}
        tbw = topic_route(ns.addr, "TBW102")
        assert all(q["perm"] == 7 and q["writeQueueNums"] == 8 for q in tbw["queueDatas"]), tbw
    # a topic made on each broker reaches the name servers with the next (immediate) registration
    a.create_topic("Tshared", 4)
    b.create_topic("Tshared", 2)
    for ns in (ns1, ns2):
        def both_routed(addr: str = ns.addr) -> bool:
            return route_brokers(addr, "Tshared") == {"broker-a", "broker-b"}

        wait_until(both_routed, 30, "both brokers' queues of Tshared in the route", ns.diagnostics)
        assert sorted((q["brokerName"], q["writeQueueNums"]) for q in topic_route(ns.addr, "Tshared")["queueDatas"]) \
            == [("broker-a", 4), ("broker-b", 2)]
    b.kill()  # kill -9: its registration connection closes, the name servers drop it without waiting 120 s
    for ns in (ns1, ns2):
        def b_gone(addr: str = ns.addr) -> bool:
            return "broker-b" not in cluster_brokers(addr)

        wait_until(b_gone, 30, "broker-b gone", ns.diagnostics)
        assert route_brokers(ns.addr, "Tshared") == {"broker-a"}
    a.stop()  # SIGTERM: UNREGISTER_BROKER to every name server
    for ns in (ns1, ns2):
        assert cluster_brokers(ns.addr) == {} and route(ns.addr, "Tshared") is None
    assert '"broker.unregistered"' in a.stderr_path.read_text()


def test_periodic_rounds_query_the_data_version_and_reregister_with_a_restarted_namesrv(
        namesrv_factory, cluster_broker, tmp_path):
    ns = namesrv_factory()
    a = cluster_broker("broker-a", ns, registerNameServerPeriod=1000, registerNameServerInitialDelay=200)
    wait_until(lambda: int(runtime(a.addr).get("namesrvRegisterSkipped", 0)) >= 2, 15,
               "two periodic rounds that found the name server up to date", a.diagnostics)
    registrations = int(runtime(a.addr)["namesrvRegistrations"])
    assert registrations == 1, "an unchanged topic table was sent again"
    ns.kill()
    ns_again = NamesrvProcess(tmp_path / "namesrv-again", port=ns.port).start()
    try:
        wait_until(lambda: "broker-a" in cluster_brokers(ns_again.addr), 15,
                   "broker-a registered with the restarted name server", a.diagnostics)
        assert route_brokers(ns_again.addr, "TBW102") == {"broker-a"}
    finally:
        ns_again.stop()


def _register(session: Session, name: str, addr: str, dv: int, compressed: bool = False, crc: int | None = None):
    body = encode_register_body(RegisterBrokerBody(DataVersion(dv, 1), {"Tfake": TopicConfigData("Tfake", 2, 2, 6)}),
                                compressed)
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": "C", "haServerAddr": addr + "1",
           "brokerId": "0", "compressed": str(compressed).lower(),
           "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc)}
    return session.invoke(REGISTER_BROKER, ext, body)


def test_a_silent_broker_expires_and_its_connection_is_closed(namesrv_factory):
    ns = namesrv_factory({"brokerChannelExpiredTime": 800, "scanNotActiveBrokerInterval": 100})
    s = Session(ns.addr)
    try:
        assert _register(s, "fake", "127.0.0.9:1", 1, crc=12345).remark == "crc32 not match"
        assert _register(s, "fake", "127.0.0.9:1", 1, compressed=True).code == 0
        assert cluster_brokers(ns.addr) == {"fake": {"0": "127.0.0.9:1"}}
        assert topic_route(ns.addr, "Tfake")["queueDatas"][0]["writeQueueNums"] == 2
        # fastjson's dialect (cluster-ha.md §0.4): bare Long keys for a client older than 4.9.4 (version 401)
        # unless it sets acceptStandardJsonOnly, quoted otherwise
        old = s.invoke(105, {"topic": "Tfake"}, version=399).body
        assert b'"brokerAddrs":{0:"127.0.0.9:1"}' in old, old
        assert b'"brokerAddrs":{"0":"127.0.0.9:1"}' in s.invoke(105, {"topic": "Tfake", "acceptStandardJsonOnly": "true"},
                                                                version=399).body
        assert b'"brokerAddrs":{"0":"127.0.0.9:1"}' in s.invoke(105, {"topic": "Tfake"}, version=409).body
        assert s.closed_by_peer(10), "the name server kept an expired broker's connection open"
        assert cluster_brokers(ns.addr) == {} and route(ns.addr, "Tfake") is None
    finally:
        s.close()


def test_kv_config_is_served_persisted_and_order_topics_go_back_to_registering_brokers(namesrv_factory, tmp_path):
    kv_path = tmp_path / "kv" / "kvConfig.json"
    ns = namesrv_factory({"kvConfigPath": kv_path})
    assert wire.invoke(ns.addr, 101, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Tord"}).code == 22
    assert wire.invoke(ns.addr, 219, {"namespace": "ORDER_TOPIC_CONFIG"}).code == 22
    assert wire.invoke(ns.addr, 100, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Tord", "value": "broker-a:4"}).code == 0
    assert wire.invoke(ns.addr, 100, {"namespace": "ns2", "key": "k", "value": "v"}).code == 0
    assert wire.invoke(ns.addr, 101, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Tord"}).ext == {"value": "broker-a:4"}
    s = Session(ns.addr)
    try:  # REGISTER_BROKER answers the ORDER_TOPIC_CONFIG namespace as a KVTable body
        reply = _register(s, "fake", "127.0.0.9:1", 1)
        assert reply.code == 0 and json.loads(reply.body) == {"table": {"Tord": "broker-a:4"}}
    finally:
        s.close()
    ns.stop()
    again = NamesrvProcess(tmp_path / "ns-again", {"kvConfigPath": kv_path}, port=ns.port).start()
    try:
        assert json.loads(wire.invoke(again.addr, 219, {"namespace": "ns2"}).body) == {"table": {"k": "v"}}
        assert wire.invoke(again.addr, 102, {"namespace": "ns2", "key": "k"}).code == 0
        assert wire.invoke(again.addr, 101, {"namespace": "ns2", "key": "k"}).code == 22
    finally:
        again.stop()


def test_a_broker_whose_namesrv_connection_closes_registers_again_at_once(namesrv_factory, cluster_broker):
    # the name server expires a broker 1 s after its last registration and closes its connection; the
    # broker's next periodic round is a minute away, yet it is back in the routes within seconds
    ns = namesrv_factory({"brokerChannelExpiredTime": 1000, "scanNotActiveBrokerInterval": 100})
    a = cluster_broker("broker-a", ns, registerNameServerPeriod=60000, registerNameServerInitialDelay=60000)
    wait_until(lambda: '"namesrv.broker_expired"' in ns.stderr_path.read_text(), 30, "the expiry", ns.diagnostics)
    wait_until(lambda: "broker-a" in cluster_brokers(ns.addr), 30, "broker-a registered again", a.diagnostics)
    assert '"broker.namesrv_connection_lost"' in a.stderr_path.read_text()


def test_namesrv_config_is_read_and_updated_at_runtime(namesrv_factory):
    ns = namesrv_factory({"brokerChannelExpiredTime": 120000})
    text = wire.invoke(ns.addr, 319).body.decode()
    assert "brokerChannelExpiredTime=120000\n" in text and f"listenPort={ns.port}\n" in text
    assert wire.invoke(ns.addr, 318, body=b"kvConfigPath=/tmp/x\n").code == 16  # black-listed
    bad = wire.invoke(ns.addr, 318, body=b"scanNotActiveBrokerInterval=0\nbrokerChannelExpiredTime=500\n")
    assert bad.code == 1 and "scanNotActiveBrokerInterval" in (bad.remark or "")
    assert "brokerChannelExpiredTime=120000\n" in wire.invoke(ns.addr, 319).body.decode()  # nothing applied
    ok = wire.invoke(ns.addr, 318, body=b"scanNotActiveBrokerInterval=100\nbrokerChannelExpiredTime=500\n")
    assert ok.code == 0, ok
    s = Session(ns.addr)
    try:  # the new expiry is in force: a silent broker is gone within a second, its connection closed
        assert _register(s, "fake", "127.0.0.9:1", 1).code == 0
        assert s.closed_by_peer(5) and cluster_brokers(ns.addr) == {}
    finally:
        s.close()
