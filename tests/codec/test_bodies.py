import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.bodies import (
    BrokerData,
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueue,
    ProducerData,
    QueueData,
    TopicRouteData,
    build_subscription,
    decode_consumer_list,
    decode_kv_table,
    decode_lock_batch_request,
    decode_lock_batch_response,
    decode_topic_list,
    decode_topic_route,
    encode_consumer_list,
    encode_heartbeat,
    encode_kv_table,
    encode_lock_batch_request,
    encode_lock_batch_response,
    encode_topic_list,
    encode_topic_route,
    parse_heartbeat,
)
from codec.errors import CodecError
from codec.fastjson import loads_lenient
from tests.codec.strategies import BOUNDED, text

names = st.text(alphabet="abcXYZ%_-0123456789", min_size=1, max_size=10)
route_strategy = st.builds(
    TopicRouteData,
    queue_datas=st.lists(st.builds(QueueData, names, st.integers(0, 64), st.integers(0, 64),
                                   st.integers(0, 15), st.integers(0, 3)), max_size=3),
    broker_datas=st.lists(st.builds(BrokerData, names, names,
                                    st.dictionaries(st.integers(0, 20), text, max_size=3)), max_size=3),
    order_topic_conf=st.none() | names)


@BOUNDED
@given(route_strategy, st.booleans())
def test_route_round_trip_quoted_and_bare(route, quoted):
    raw = encode_topic_route(route, quoted_keys=quoted)
    assert decode_topic_route(raw) == route


def test_route_shape_for_cpp_and_old_java():
    route = TopicRouteData([QueueData("broker-a", 4, 4, 6)], [BrokerData("DefaultCluster", "broker-a",
                                                                         {0: "10.0.0.1:10911"})])
    quoted = encode_topic_route(route)
    d = json.loads(quoted)
    assert d["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}
    q = d["queueDatas"][0]
    assert all(isinstance(q[k], int) for k in ("perm", "readQueueNums", "writeQueueNums"))
    assert list(d) == sorted(d) and list(q) == sorted(q)
    bare = encode_topic_route(route, quoted_keys=False)
    assert b'"brokerAddrs":{0:"10.0.0.1:10911"}' in bare
    with pytest.raises(ValueError):
        json.loads(bare)  # really fastjson's non-standard form


JAVA_HEARTBEAT = (
    '{"clientID":"10.0.0.5@12345","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    '"consumeType":"CONSUME_PASSIVELY","groupName":"G1","messageModel":"CLUSTERING","unitMode":false,'
    '"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG",'
    '"subString":"TagA","subVersion":1700000000000,"tagsSet":["TagA"],"topic":"T1"},'
    '{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000001,'
    '"tagsSet":[],"topic":"%RETRY%G1"}]}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}')


def test_java_heartbeat_from_the_reference():
    hb = parse_heartbeat(JAVA_HEARTBEAT.encode())
    assert hb.client_id == "10.0.0.5@12345"
    (c,) = hb.consumers
    assert (c.group_name, c.consume_type, c.message_model) == ("G1", "CONSUME_PASSIVELY", "CLUSTERING")
    assert [s.topic for s in c.subscriptions] == ["T1", "%RETRY%G1"]
    assert c.subscriptions[0].code_set == [2598919] and c.subscriptions[0].sub_version == 1700000000000
    assert c.subscriptions[1].is_all and not c.subscriptions[0].is_all
    assert [p.group_name for p in hb.producers] == ["CLIENT_INNER_PRODUCER"]


def test_cpp_heartbeat_ordinals_string_subversion_and_missing_arrays():
    raw = json.dumps({"clientID": "c@1", "consumerDataSet": [
        {"groupName": "G", "consumeType": 1, "messageModel": 0, "consumeFromWhere": 4,
         "subscriptionDataSet": [{"topic": "T", "subString": "TagA || TagB", "subVersion": "1700000000000",
                                  "tagsSet": ["TagA", "TagB"]}]},
        {"groupName": "G2", "consumeType": 0, "messageModel": 1, "consumeFromWhere": 0}]}).encode()
    hb = parse_heartbeat(raw)
    assert hb.producers == []
    g, g2 = hb.consumers
    assert (g.consume_type, g.message_model, g.consume_from_where) == (
        "CONSUME_PASSIVELY", "BROADCASTING", "CONSUME_FROM_FIRST_OFFSET")
    s = g.subscriptions[0]
    assert s.sub_version == 1700000000000 and s.code_set == [2598919, 2598920]  # computed from tagsSet
    assert g2.subscriptions == [] and g2.consume_type == "CONSUME_ACTIVELY"


def test_empty_heartbeat_and_enum_errors():
    assert parse_heartbeat(b'{"clientID":"x"}') == HeartbeatData("x")
    with pytest.raises(CodecError):
        parse_heartbeat(b'{"consumerDataSet":[{"groupName":"G","messageModel":7}]}')
    with pytest.raises(CodecError):
        parse_heartbeat(b'{"consumerDataSet":{"a":1}}')
    with pytest.raises(CodecError):
        parse_heartbeat(b'{"consumerDataSet":[5]}')


@BOUNDED
@given(st.builds(HeartbeatData, text, st.lists(st.builds(
    ConsumerData, names, st.sampled_from(["CONSUME_ACTIVELY", "CONSUME_PASSIVELY"]),
    st.sampled_from(["BROADCASTING", "CLUSTERING"]), st.just("CONSUME_FROM_TIMESTAMP"),
    st.lists(st.builds(build_subscription, names, st.none() | st.just("*") | st.just("a || b") | names,
                       st.integers(0, 1 << 50)), max_size=3), st.booleans()), max_size=2),
    st.lists(st.builds(ProducerData, names), max_size=2)))
def test_heartbeat_round_trip(hb):
    assert parse_heartbeat(encode_heartbeat(hb)) == hb


def test_build_subscription():
    s = build_subscription("T", " TagA ||TagB|| ", 5)
    assert (s.tags_set, s.code_set, s.sub_version) == (["TagA", "TagB"], [2598919, 2598920], 5)
    assert build_subscription("T", None).is_all and build_subscription("T", "*").sub_string == "*"


def test_lock_bodies_round_trip():
    mqs = [MessageQueue("T1", "broker-a", 0), MessageQueue("T1", "broker-a", 3)]
    req = LockBatchRequest("G", "c@1", mqs)
    assert decode_lock_batch_request(encode_lock_batch_request(req)) == req
    assert decode_lock_batch_response(encode_lock_batch_response(mqs)) == mqs
    assert json.loads(encode_lock_batch_response(mqs[:1])) == {
        "lockOKMQSet": [{"brokerName": "broker-a", "queueId": 0, "topic": "T1"}]}
    # C++ sends queueId as a number; a string works too
    got = decode_lock_batch_request(b'{"consumerGroup":"G","clientId":"c","mqSet":[{"topic":"T",'
                                    b'"brokerName":"b","queueId":"2"}]}')
    assert got.mq_set == [MessageQueue("T", "b", 2)]


def test_small_bodies():
    assert decode_consumer_list(encode_consumer_list(["a@1", "b@2"])) == ["a@1", "b@2"]
    kv = encode_kv_table({"brokerVersion": 409, "x": "y"})
    assert json.loads(kv) == {"table": {"brokerVersion": "409", "x": "y"}}
    assert decode_kv_table(kv) == {"brokerVersion": "409", "x": "y"}
    assert decode_topic_list(encode_topic_list({"b", "a"})) == ["a", "b"]


def test_lenient_loader_quotes_only_bare_keys():
    assert loads_lenient(b'{"offsetTable":{"T1@G1":{0:5,1:7}}}') == {"offsetTable": {"T1@G1": {"0": 5, "1": 7}}}
    assert loads_lenient('{"s":"{0:1, 2:3}", 4 : [ {5:"\\"x,6:"} ]}') == {"s": "{0:1, 2:3}", "4": [{"5": '"x,6:'}]}
    with pytest.raises(CodecError):
        loads_lenient(b"{0:}")


PARSERS = (parse_heartbeat, decode_topic_route, decode_lock_batch_request, decode_lock_batch_response,
           decode_consumer_list, decode_kv_table, decode_topic_list, loads_lenient)


@BOUNDED
@given(st.binary(max_size=200) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
        ["clientID", "consumerDataSet", "producerDataSet", "groupName", "subscriptionDataSet", "subVersion",
         "consumeType", "tagsSet", "codeSet", "queueDatas", "brokerDatas", "brokerAddrs", "perm", "mqSet",
         "queueId", "table", "topicList", "consumerIdList", "lockOKMQSet", "0"]), c, max_size=4),
    max_leaves=12).map(lambda v: json.dumps(v).encode()))
def test_parsers_raise_only_codec_error(raw):
    for parse in PARSERS:
        try:
            parse(raw)
        except CodecError:
            pass
