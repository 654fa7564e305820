"""codec.pop_receipt: Apache's extraInfo as its client and proxy write it (ExtraInfoUtil / ReceiptHandle)."""

from __future__ import annotations

import pytest

from codec.errors import CodecError
from codec.pop_receipt import (
    POP_ORDER_REVIVE_QUEUE,
    BatchAck,
    ExtraInfo,
    decode_batch_ack,
    encode_batch_ack,
    join_offset_info,
    offset_info_entry,
    offset_info_key,
    order_count_key,
    parse_extra_info,
    parse_offset_info,
    pop_retry_topic,
)


def test_eight_fields_round_trip() -> None:
    e = ExtraInfo(7, 1_700_000_000_000, 30_000, 0, "0", "broker-a", 3, 7)
    text = e.encode()
    assert text == "7 1700000000000 30000 0 0 broker-a 3 7"
    assert parse_extra_info(text) == e
    assert e.visible_ms == 1_700_000_030_000 and not e.order


def test_proxy_ninth_field_and_seven_field_form() -> None:
    # Apache's proxy appends the commit log offset; the client's 7-field form has no queue offset
    e = parse_extra_info(f"5 100 2000 {POP_ORDER_REVIVE_QUEUE} 0 b 1 9 123456")
    assert (e.queue_id, e.queue_offset, e.order) == (1, 9, True)
    assert parse_extra_info("5 100 2000 0 1 b 1").queue_offset is None


@pytest.mark.parametrize("bad", ["", "1 2 3", "x 100 2000 0 0 b 1 9", "1 2 3 4 0 b q"])
def test_malformed_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="extraInfo"):
        parse_extra_info(bad)


def test_offset_info_entries() -> None:
    s = join_offset_info([offset_info_entry(False, 0, "5"), offset_info_entry(True, 2, "7,8")])
    assert s == "0 0 5;1 2 7,8"


def test_offset_info_parsed_by_topic_mark_and_queue_as_apaches_client_keys_it() -> None:
    parsed = parse_offset_info("0 0 5;1 2 7,8;0 qo3%12 2")
    assert parsed == {"0@0": "5", "1@2": "7,8", "0@qo3%12": "2"}
    retry = pop_retry_topic("Orders", "g1")
    assert retry == "%RETRY%g1_Orders"
    assert offset_info_key("Orders", 0) == "0@0" and offset_info_key(retry, 2) == "1@2"
    assert order_count_key("Orders", 3, 12) == "0@qo3%12"
    assert parse_offset_info(None) == {} and parse_offset_info("") == {}
    with pytest.raises(CodecError, match="offset info"):
        parse_offset_info("0 0")


def test_batch_ack_body_round_trip_and_java_bitset_bytes() -> None:
    a = BatchAck("G", "T", "0", 10, 1, 0, 100, 2000, (10, 12, 19))
    broker, acks = decode_batch_ack(encode_batch_ack("broker-a", [a]))
    assert broker == "broker-a" and acks == [a] and acks[0].visible_ms == 2100
    # long field names and BitSet.toByteArray() of bits {0, 2, 9} = [0x05, 0x02] base64 "BQI="
    body = b'{"brokerName":"b","acks":[{"consumerGroup":"G","topic":"T","retry":"0","startOffset":10,' \
           b'"queueId":1,"reviveQueueId":0,"popTime":100,"invisibleTime":2000,"bitSet":"BQI="}]}'
    assert decode_batch_ack(body)[1] == [a]


def test_batch_ack_body_errors() -> None:
    with pytest.raises(CodecError):
        decode_batch_ack(b'{"acks":[{"c":"G","t":"T","so":0,"b":"%%"}]}')
    with pytest.raises(CodecError):
        decode_batch_ack(b"[1]")
