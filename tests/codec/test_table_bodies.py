"""Whole-table bodies from cached fragments agree with the generic encoders, and RocketMQ's compressed
RegisterBrokerBody round-trips."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from codec import admin_bodies as AB
from codec import table_bodies as TB
from codec.errors import CodecError
from codec.fastjson import dumps, loads_lenient

TOPICS = [("Orders", 8, 8, 6, "SINGLE_TAG", 0, False), ("%RETRY%cg-1", 1, 1, 6, "SINGLE_TAG", 0, False),
          ("TBW102", 8, 8, 7, "MULTI_TAG", 3, True), ('we"ird\\name é', 2, 3, 4, "SINGLE_TAG", 1, False)]


def _json(name, rq, wq, perm, ft, sf, order):
    return {"topicName": name, "readQueueNums": rq, "writeQueueNums": wq, "perm": perm, "topicFilterType": ft,
            "topicSysFlag": sf, "order": order}


@pytest.mark.parametrize("row", TOPICS)
def test_topic_member_equals_the_generic_encoder(row):
    assert TB.topic_member(*row) == TB.topic_member_reference(_json(*row))


def test_topic_wrapper_equals_admin_bodies_wrapper():
    table = {r[0]: _json(*r) for r in TOPICS}
    version = {"counter": 7, "timestamp": 1700000000123}
    fast = TB.topic_wrapper(TB.version_json(7, 1700000000123), [TB.topic_member(*r) for r in TOPICS])
    assert json.loads(fast) == json.loads(AB.encode_topic_config_wrapper(table, version))
    assert AB.decode_table(fast, "topicConfigTable") == table
    reg = json.loads(TB.register_body(fast, ["10.0.0.1:1"]))
    assert reg["filterServerList"] == ["10.0.0.1:1"] and reg["topicConfigSerializeWrapper"] == json.loads(fast)


def test_group_wrapper_and_offset_wrapper_and_topic_list():
    cfg = {"groupName": "cg", "consumeEnable": True, "retryMaxTimes": 16}
    body = TB.group_wrapper(TB.version_json(1, 2), [TB.group_member("cg", cfg)])
    assert json.loads(body) == json.loads(AB.encode_subscription_group_wrapper({"cg": cfg}, {"counter": 1, "timestamp": 2}))
    raw = TB.offset_wrapper(TB.version_json(3, 4), [TB.offset_member("T@G", {0: 5, 3: 9})])
    assert b'"T@G":{0:5,3:9}' in raw  # fastjson's bare Integer keys
    off = loads_lenient(raw)
    assert off["offsetTable"] == {"T@G": {"0": 5, "3": 9}} and off["dataVersion"]["counter"] == 3
    assert raw.endswith(dumps({"offsetTable": {"T@G": {0: 5, 3: 9}}}, bare_int_keys=True)[1:])
    names = ["a", "%RETRY%b", 'c"d']
    assert json.loads(TB.topic_list(names)) == {"topicList": names}
    assert TB.topic_list(names[:2], all_plain=True) == TB.topic_list(names[:2]) == dumps({"topicList": names[:2]})
    assert json.loads(TB.topic_list([], all_plain=True)) == {"topicList": []}


def test_compressed_register_body_round_trips_in_rocketmq_layout():
    rows = TOPICS[:3]
    data = TB.register_body_compressed(TB.version_json(5, 6), [TB.topic_compact(*r[:5]) for r in rows], ["f:1"])
    raw = zlib.decompress(data)  # a zlib (Deflater) stream, as Java's InflaterInputStream reads it
    (vlen,) = struct.unpack_from(">i", raw, 0)
    assert json.loads(raw[4:4 + vlen]) == {"counter": 5, "timestamp": 6}
    assert struct.unpack_from(">i", raw, 4 + vlen)[0] == 3
    assert raw[8 + vlen + 4:].startswith(b"Orders 8 8 6 SINGLE_TAG")
    version, topics, filters = TB.decode_register_body_compressed(data)
    assert version["counter"] == 5 and filters == ["f:1"]
    assert topics["TBW102"] == {"topicName": "TBW102", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7,
                                "topicFilterType": "MULTI_TAG"}
    with pytest.raises(CodecError):
        TB.decode_register_body_compressed(data[:-5])


@pytest.mark.parametrize("compressed", [False, True])
def test_cached_register_body_equals_the_name_server_codec(compressed):
    """The table's remembered RegisterBrokerBody decodes (codec.namesrv_bodies, what our name server reads)
    to what encode_register_body of the same table gives; the JSON form is byte-equal for rows in name order
    (the table keeps insertion order: the same map to a reader)."""
    from codec.namesrv_bodies import (
        DataVersion,
        RegisterBrokerBody,
        TopicConfigData,
        decode_register_body,
        encode_register_body,
    )

    rows = sorted(TOPICS[:3])
    dv = DataVersion(9, 1700000000999)
    reference = encode_register_body(RegisterBrokerBody(dv, {r[0]: TopicConfigData(*r) for r in rows}), compressed)
    version = TB.version_json(9, 1700000000999)
    if compressed:
        ours = TB.register_body_compressed(version, [TB.topic_compact(*r[:5]) for r in rows])
    else:
        ours = TB.register_body(TB.topic_wrapper(version, [TB.topic_member(*r) for r in rows]))
        assert ours == reference
    assert decode_register_body(ours, compressed) == decode_register_body(reference, compressed)
