"""The name server's tables and bodies without processes: RocketMQ 4.9.8's registration rules
(cluster-ha.md §1.5, §1.9, §1.11) and the REGISTER_BROKER body in both forms (§1.3, §1.4)."""

from __future__ import annotations

import struct
import zlib

import pytest

from codec.bodies import TopicRouteData, decode_topic_route, encode_topic_route
from codec.errors import CodecError
from codec.namesrv_bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfigData,
    body_crc32,
    decode_cluster_info,
    decode_register_body,
    encode_cluster_info,
    encode_register_body,
)
from server.cluster.namesrv.route_info import RouteInfoManager
from tests.helpers.checks import present


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class Channel:
    """A broker's registration connection (route_info.BrokerChannel): the name server closes an expired one."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def routed(m: RouteInfoManager, topic: str) -> TopicRouteData:
    return present(m.pickup_topic_route(topic), f"route of {topic}")


def body(counter: int, *topics: TopicConfigData) -> RegisterBrokerBody:
    return RegisterBrokerBody(DataVersion(counter, 1700000000000 + counter), {t.topic_name: t for t in topics})


T4 = TopicConfigData("T", 4, 4, 6)
TBW = TopicConfigData("TBW102", 8, 8, 7)


def test_route_merges_every_masters_queues_and_lists_slaves_with_their_ids():
    m = RouteInfoManager(clock_ms=Clock())
    m.register_broker("C", "10.0.0.1:10911", "a", 0, "10.0.0.1:10912", body(1, T4, TBW))
    m.register_broker("C", "10.0.0.3:10911", "b", 0, "10.0.0.3:10912", body(1, TopicConfigData("T", 2, 2, 6)))
    res = m.register_broker("C", "10.0.0.2:10911", "a", 1, "10.0.0.2:10912", body(5, TopicConfigData("T", 99, 99, 6)))
    assert (res.master_addr, res.ha_server_addr) == ("10.0.0.1:10911", "10.0.0.1:10912")
    route = routed(m, "T")
    assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("a", 4), ("b", 2)]  # slave ignored
    assert {b.broker_name: b.broker_addrs for b in route.broker_datas} == {
        "a": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}, "b": {0: "10.0.0.3:10911"}}
    assert [b.broker_name for b in routed(m, "TBW102").broker_datas] == ["a"]
    assert m.pickup_topic_route("nope") is None
    brokers, clusters = m.cluster_info()
    assert clusters == {"C": ["a", "b"]} and len(brokers) == 2
    # fastjson dialect: bare ids for old clients, quoted for >= 4.9.4; both parse back to the same route
    bare, quoted = encode_topic_route(route, quoted_keys=False), encode_topic_route(route, quoted_keys=True)
    assert b'{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in bare and b'"0":"10.0.0.1:10911"' in quoted
    assert decode_topic_route(bare) == decode_topic_route(quoted) == route
    assert decode_cluster_info(encode_cluster_info(brokers, clusters))[1] == clusters


def test_slave_registered_before_its_master_gets_no_master_until_the_master_registers():
    m = RouteInfoManager(clock_ms=Clock())
    res = m.register_broker("C", "s:1", "a", 1, "s:2", body(1, T4))
    assert (res.master_addr, res.ha_server_addr) == (None, None)
    assert m.pickup_topic_route("T") is None  # a slave never writes QueueData
    m.register_broker("C", "m:1", "a", 0, "m:2", body(1, T4))
    assert m.register_broker("C", "s:1", "a", 1, "s:2", body(1, T4)).ha_server_addr == "m:2"


def test_a_promoted_slave_replaces_its_entry_and_topics_change_only_with_the_data_version():
    m = RouteInfoManager(clock_ms=Clock())
    ch_m, ch_s = Channel(), Channel()
    m.register_broker("C", "m:1", "a", 0, "m:2", body(1, T4), ch_m)
    m.register_broker("C", "s:1", "a", 1, "s:2", body(1, T4), ch_s)
    assert m.on_channel_destroy(ch_m) == ["m:1"]
    route = routed(m, "T")  # the master's queues stay while a slave of the name is alive
    assert route.broker_datas[0].broker_addrs == {1: "s:1"}
    m.register_broker("C", "s:1", "a", 0, "s:2", body(2, TopicConfigData("T", 8, 8, 6)), ch_s)  # promote
    route = routed(m, "T")
    assert route.broker_datas[0].broker_addrs == {0: "s:1"} and route.queue_datas[0].write_queue_nums == 8
    assert m.wipe_write_perm_of_broker("a") == 1 and routed(m, "T").queue_datas[0].perm == 4
    # same DataVersion again: the wiped perm survives a periodic re-registration (§1.11)
    m.register_broker("C", "s:1", "a", 0, "s:2", body(2, TopicConfigData("T", 8, 8, 6)), ch_s)
    assert routed(m, "T").queue_datas[0].perm == 4
    m.register_broker("C", "s:1", "a", 0, "s:2", body(3, TopicConfigData("T", 8, 8, 6)), ch_s)
    assert routed(m, "T").queue_datas[0].perm == 6
    assert m.add_write_perm_of_broker("a") == 1


def test_a_replaced_master_with_an_older_state_version_does_not_take_brokerid_0_back():
    """RocketMQ 5 (controller mode): DataVersion.stateVersion is the masterEpoch; a registration for an
    id whose live holder has a newer one is ignored (and the late broker is not kept as live)."""
    m = RouteInfoManager(clock_ms=Clock())

    def sv(counter: int, state_version: int) -> RegisterBrokerBody:
        return RegisterBrokerBody(DataVersion(counter, 1700000000000 + counter, state_version), {"T": T4})
    m.register_broker("C", "new:1", "a", 0, "new:2", sv(5, 3))
    res = m.register_broker("C", "old:1", "a", 0, "old:2", sv(9, 2))  # the old master, epoch 2, late
    assert (res.master_addr, res.ha_server_addr) == (None, None)
    assert routed(m, "T").broker_datas[0].broker_addrs == {0: "new:1"}
    assert m.query_broker_topic_config("old:1") is None
    # the same epoch or a newer one does take the id (an election moved it there)
    m.register_broker("C", "old:1", "a", 0, "old:2", sv(10, 4))
    assert routed(m, "T").broker_datas[0].broker_addrs == {0: "old:1"}
    # without stateVersion (4.x brokers: 0 both sides) nothing changes: the last registration wins
    m2 = RouteInfoManager(clock_ms=Clock())
    m2.register_broker("C", "x:1", "a", 0, "x:2", body(1, T4))
    m2.register_broker("C", "y:1", "a", 0, "y:2", body(1, T4))
    assert routed(m2, "T").broker_datas[0].broker_addrs == {0: "y:1"}


def test_expiry_after_the_last_registration_and_unregister_drop_the_broker_and_its_topics():
    clock = Clock()
    m = RouteInfoManager(clock_ms=clock, broker_channel_expired_ms=120_000)
    m.register_broker("C", "a:1", "a", 0, "a:2", body(1, T4))
    m.register_broker("C", "b:1", "b", 0, "b:2", body(1, T4, TBW))
    clock.ms += 100_000
    m.register_broker("C", "b:1", "b", 0, "b:2", body(1, T4, TBW))
    clock.ms += 20_001
    assert [i.broker_name for i in m.scan_not_active_broker()] == ["a"]
    assert [q.broker_name for q in routed(m, "T").queue_datas] == ["b"]
    assert m.is_broker_topic_config_changed("b:1", DataVersion(1, 1700000000001)) is False
    assert m.is_broker_topic_config_changed("b:1", DataVersion(2, 1700000000001)) is True
    clock.ms += 119_000
    m.update_broker_info_update_timestamp("b:1")  # an unchanged QUERY_DATA_VERSION keeps it alive
    clock.ms += 2_000
    assert m.scan_not_active_broker() == []
    m.unregister_broker("C", "b:1", "b", 0)
    assert m.pickup_topic_route("T") is None and m.cluster_info() == ([], {}) and m.all_topics() == []


@pytest.mark.parametrize("compressed", [False, True])
def test_register_body_round_trips_in_both_forms(compressed):
    b = body(7, T4, TBW, TopicConfigData("%RETRY%g", 1, 1, 6, "MULTI_TAG"))
    raw = encode_register_body(b, compressed)
    back = decode_register_body(raw, compressed)
    assert back.data_version == b.data_version and back.topic_configs == b.topic_configs
    assert body_crc32(raw) == zlib.crc32(raw) & 0x7FFFFFFF


def test_compressed_body_layout_is_rocketmqs_and_bad_bodies_raise_codec_error():
    dv = b'{"counter":3,"timestamp":5}'
    line = b"T 4 4 6 SINGLE_TAG {}"  # a 5.x line with the attributes token
    fs = b"[]"
    raw = zlib.compress(struct.pack(">i", len(dv)) + dv + struct.pack(">i", 1) + struct.pack(">i", len(line)) + line
                        + struct.pack(">i", len(fs)) + fs, 9)
    got = decode_register_body(raw, True)
    assert got.data_version == DataVersion(3, 5) and got.topic_configs == {"T": TopicConfigData("T", 4, 4, 6)}
    for bad in (b"not zlib", zlib.compress(b"\x00\x00\x00\x50{}"), zlib.compress(struct.pack(">i", 2) + b"{}"
                                                                             + struct.pack(">i", 1)
                                                                             + struct.pack(">i", 3) + b"T 4")):
        with pytest.raises(CodecError):
            decode_register_body(bad, True)
    with pytest.raises(CodecError):
        decode_register_body(b"{not json", False)
    assert decode_register_body(b"", False).data_version == DataVersion(0, 0)
