"""Operator bodies: fastjson's MessageQueue-keyed maps written and read back; bad input -> CodecError."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec import admin_bodies as AB
from codec.bodies import MessageQueue
from codec.errors import CodecError
from codec.fastjson import loads_lenient

names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20)
longs = st.integers(0, (1 << 63) - 1)
mqs = st.builds(MessageQueue, names, names, st.integers(0, 1023))


@given(st.lists(st.builds(AB.TopicOffset, mqs, longs, longs, longs), max_size=8, unique_by=lambda o: o.mq),
       st.floats(0, 1e9, allow_nan=False))
def test_topic_stats_round_trip(rows, tps):
    got, got_tps = AB.decode_topic_stats(AB.encode_topic_stats(rows, tps))
    assert got == sorted(rows, key=lambda o: (o.mq.topic, o.mq.broker_name, o.mq.queue_id))
    assert got_tps == tps


@given(st.lists(st.builds(AB.OffsetWrapper, mqs, longs, longs, longs, longs), max_size=8, unique_by=lambda o: o.mq))
def test_consume_stats_round_trip(rows):
    got, _ = AB.decode_consume_stats(AB.encode_consume_stats(rows, 1.5))
    assert got == sorted(rows, key=lambda o: (o.mq.topic, o.mq.broker_name, o.mq.queue_id))


def test_reads_what_fastjson_writes_for_a_java_broker():
    # TopicStatsTable.encode() of a RocketMQ 4.9 broker: object keys, fields in name order
    java = (b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"lastUpdateTimestamp":1700000000000,'
            b'"maxOffset":7,"minOffset":2},{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
            b'{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0}},"topicPutTps":0.0}')
    rows, tps = AB.decode_topic_stats(java)
    assert [(r.mq.queue_id, r.min_offset, r.max_offset, r.last_update_timestamp) for r in rows] == [
        (0, 0, 0, 0), (1, 2, 7, 1700000000000)]
    ours = AB.encode_topic_stats(rows, tps)
    assert loads_lenient(ours) == loads_lenient(java)


def test_consumer_connection_and_lists_round_trip():
    cc = AB.ConsumerConnection([AB.Connection("c@1", "127.0.0.1:5", "CPP", 333)], {"T": {"subString": "*"}},
                               "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    assert AB.decode_consumer_connection(AB.encode_consumer_connection(cc)) == cc
    assert AB.decode_group_list(AB.encode_group_list(["b", "a", "a"])) == ["a", "b"]
    v = AB.data_version(3, 1700000000000)
    assert AB.decode_table(AB.encode_topic_config_wrapper({"T": {"perm": 6}}, v), "topicConfigTable") == {
        "T": {"perm": 6}}


@pytest.mark.parametrize("bad", [b"", b"{", b'{"offsetTable":{{"a":1}:}}', b'{"offsetTable":{true:1}}',
                                 b'{"offsetTable":{"notAnMq":{}}}', b'{"offsetTable":[1]}', b"\xff", b"[" * 5000])
def test_malformed_bodies_raise_codec_error(bad):
    with pytest.raises(CodecError):
        AB.decode_topic_stats(bad)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_codec_error(data):
    for decode in (AB.decode_topic_stats, AB.decode_consume_stats, AB.decode_consumer_connection,
                   AB.decode_group_list):
        try:
            decode(data)
        except CodecError:
            pass


def test_operator_bodies_round_trip():
    offsets = {MessageQueue("T", "b", 1): 5, MessageQueue("T", "b", 0): 0}
    assert AB.decode_reset_offset(AB.encode_reset_offset(offsets)) == offsets
    assert AB.decode_reset_offset(AB.encode_reset_offset_for_c(offsets)) == offsets
    row = AB.OffsetWrapper(MessageQueue("T", "b", 0), 10, 3, 3, 1234)
    body = AB.encode_consume_stats_list("1.2.3.4:9876", [("G", [AB.encode_consume_stats([row], 1.5)]), ("H", [])], 7)
    assert AB.decode_consume_stats_list(body) == {"G": [([row], 1.5)], "H": []}
    conns = [AB.Connection("c1", "1.2.3.4:5", "JAVA", 409)]
    assert AB.decode_producer_connection(AB.encode_producer_connection(conns)) == conns
