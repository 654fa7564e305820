"""Golden frames captured from the stock Apache RocketMQ 4.9.7 Java client, NameServer and broker.

tests/codec/golden/capture.py made them (see its docstring; manifest.json says what each is). Our codec
must read each exactly as Java meant it, and what we encode from what we read must read back the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codec.bodies import decode_topic_route, parse_heartbeat
from codec.command import RemotingCommand
from codec.fastjson import loads_lenient
from codec.frame import FrameDecoder, encode_frame_bytes
from codec.properties import parse_properties
from codec.record import iter_records, verify_record

GOLDEN = Path(__file__).with_name("golden")
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())


def frame(name: str) -> RemotingCommand:
    data = (GOLDEN / f"{name}.bin").read_bytes()
    dec = FrameDecoder()
    cmds = dec.feed(data[:7]) + dec.feed(data[7:])  # split inside the header-length word
    assert len(cmds) == 1, name
    return cmds[0]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_every_golden_frame_decodes_and_round_trips(name):
    cmd = frame(name)
    meta = MANIFEST[name]
    assert cmd.is_response == (meta["side"] == "response")
    if meta["side"] == "request":
        assert cmd.code == meta["code"]
    assert cmd.language == "JAVA" and cmd.version == 407  # V4_9_7's ordinal
    again = FrameDecoder().feed(encode_frame_bytes(cmd))
    assert len(again) == 1
    back = again[0]
    assert (back.code, back.opaque, back.flag, back.remark, back.ext_fields, back.body_bytes()) == (
        cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, cmd.body_bytes())


def test_java_send_v2_request_short_header_names():
    cmd = frame("send_request")
    ext = cmd.ext_fields
    # SendMessageRequestHeaderV2: a=producerGroup b=topic c=defaultTopic d=defaultTopicQueueNums e=queueId
    # f=sysFlag g=bornTimestamp h=flag i=properties j=reconsumeTimes k=unitMode m=batch n=brokerName
    assert (ext["b"], ext["c"], ext["d"], ext["k"], ext["m"], ext["n"]) == (
        "GoldenTopic", "TBW102", "4", "false", "false", "broker-a")
    props = parse_properties(ext["i"])
    assert props["KEYS"] == "order-0" and props["TAGS"] == "TagA" and props["WAIT"] == "true"
    assert len(props["UNIQ_KEY"]) in (32, 56)  # MessageClientIDSetter: IPv4 or (here) IPv6 host
    assert cmd.body_bytes().startswith(b"golden-body-")


def test_java_broker_send_response_fields():
    cmd = frame("send_response")
    assert cmd.code == 0 and cmd.is_response
    assert set(cmd.ext_fields) == {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
    assert len(cmd.ext_fields["msgId"]) == 32 and cmd.ext_fields["queueOffset"] == "0"


def test_java_pull_request_and_found_response_records():
    req = frame("pull_request").ext_fields
    assert req["consumerGroup"] == "GoldenGroup" and req["topic"] == "GoldenTopic"
    assert req["expressionType"] == "TAG" and req["queueOffset"] == "0" and req["sysFlag"] == "2"
    resp = frame("pull_response")
    assert resp.remark == "FOUND"
    assert (resp.ext_fields["minOffset"], resp.ext_fields["maxOffset"], resp.ext_fields["nextBeginOffset"]) == (
        "0", "1", "1")
    body = resp.body_bytes()
    assert verify_record(body, 0) == len(body)  # the Java broker's stored record passes our recovery check
    [rec] = list(iter_records(body))
    assert rec.topic == "GoldenTopic" and rec.body.startswith(b"golden-body-")
    assert rec.properties["KEYS"] == "order-0" and rec.properties["TAGS"] == "TagA"
    assert "WAIT" not in rec.properties and rec.properties["CLUSTER"] == "DefaultCluster"


def test_java_heartbeat_body():
    hb = parse_heartbeat(frame("heartbeat_request").body_bytes())
    [consumer] = hb.consumers
    assert consumer.group_name == "GoldenGroup"
    assert {s.topic for s in consumer.subscriptions} == {"GoldenTopic", "%RETRY%GoldenGroup"}
    assert all(s.sub_string == "*" for s in consumer.subscriptions)
    assert hb.client_id


def test_java_namesrv_route_response():
    route = decode_topic_route(frame("route_response").body_bytes())
    [bd] = route.broker_datas
    assert bd.broker_name == "broker-a" and bd.cluster == "DefaultCluster" and 0 in bd.broker_addrs
    [qd] = route.queue_datas
    assert (qd.read_queue_nums, qd.write_queue_nums, qd.perm) == (8, 8, 7)  # TBW102 as Apache creates it


def test_java_broker_register_request():
    cmd = frame("register_request")
    ext = cmd.ext_fields
    assert ext["brokerName"] == "broker-a" and ext["brokerId"] == "0" and ext["compressed"] == "false"
    assert ext["clusterName"] == "DefaultCluster" and ext["haServerAddr"]
    body = loads_lenient(cmd.body_bytes())
    table = body["topicConfigTable"] if "topicConfigTable" in body else body["topicConfigSerializeWrapper"]["topicConfigTable"]
    assert "SCHEDULE_TOPIC_XXXX" in table and "TBW102" in table
    assert table["SCHEDULE_TOPIC_XXXX"]["readQueueNums"] == 18
    assert frame("register_response").code == 0
