"""codec.record_rewrite.build_deliveries: batch messageTimeup agrees with rewrite_for_delivery, field by field."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.errors import CodecError
from codec.record import MessageRecord, decode_record, encode_record
from codec.record_rewrite import build_deliveries, rewrite_for_delivery
from codec.tags import java_hash
from tests.codec.strategies import BOUNDED, bodies, hosts, properties

real_topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyz%_-|0123456789", min_size=1, max_size=60)
key_text = st.text(alphabet="abcxyz0123456789-", min_size=1, max_size=12)


@st.composite
def schedule_records(draw):
    props = dict(draw(properties))
    props.pop("REAL_TOPIC", None)  # the destination is drawn below, both keys or neither
    props.pop("REAL_QID", None)
    real = draw(st.none() | real_topics)
    if real is not None:
        props["REAL_TOPIC"] = real
        props["REAL_QID"] = str(draw(st.integers(0, 255)))
    for name, value in (("TAGS", key_text), ("KEYS", st.lists(key_text, max_size=3).map(" ".join)),
                        ("UNIQ_KEY", key_text)):
        v = draw(st.none() | value)
        if v is None:
            props.pop(name, None)
        else:
            props[name] = v
    return MessageRecord(topic="SCHEDULE_TOPIC_XXXX", body=draw(bodies), queue_id=draw(st.integers(0, 17)),
                         flag=7, born_host=draw(hosts), store_host=draw(hosts), reconsume_times=2,
                         born_timestamp=123, store_timestamp=456, properties=props)


@BOUNDED
@given(st.lists(schedule_records(), min_size=1, max_size=5))
def test_build_deliveries_matches_rewrite_for_delivery(recs):
    raws = [memoryview(encode_record(r)) for r in recs]
    out = build_deliveries([*raws, None])
    assert len(out) == len(recs) + 1 and out[-1] is None
    for rec, raw, b in zip(recs, raws, out[:-1], strict=True):
        p = rec.properties
        if not p.get("REAL_TOPIC"):
            assert b is None
            continue
        assert b is not None
        record, topic, qid, tags_code, keys, uniq = b
        assert uniq == (p["UNIQ_KEY"].encode() if p.get("UNIQ_KEY") else None)
        assert topic == p["REAL_TOPIC"] and qid == int(p["REAL_QID"])
        assert record == rewrite_for_delivery(raw, topic, qid)
        back, _ = decode_record(record)
        assert back.topic == topic and back.queue_id == qid and back.properties == decode_record(raw)[0].properties and back.body == rec.body
        assert tags_code == (java_hash(p["TAGS"]) if p.get("TAGS") else 0)
        want = [k for k in p.get("KEYS", "").split(" ") if k] + ([p["UNIQ_KEY"]] if p.get("UNIQ_KEY") else [])
        assert [k.decode() for k in keys] == want


def test_build_deliveries_key_inside_another_value_is_not_a_match():
    rec = MessageRecord(topic="SCHEDULE_TOPIC_XXXX", body=b"b",
                        properties={"X": "aREAL_TOPIC\x01", "REAL_TOPIC": "Real", "REAL_QID": "3"})
    (b,) = build_deliveries([encode_record(rec)])
    assert b is not None and b[1] == "Real" and b[2] == 3


def test_build_deliveries_refuses_garbage():
    raw = encode_record(MessageRecord(topic="T", body=b"x", properties={"REAL_TOPIC": "R"}))
    with pytest.raises(CodecError):
        build_deliveries([bytes(len(raw))])
    with pytest.raises(CodecError):
        build_deliveries([raw[:60]])


def test_offset_msg_id_cached_host_prefix_matches_the_packed_layout():
    import ipaddress
    import struct

    from codec.msgid import decode_offset_msg_id, offset_msg_id

    for ip in ("127.0.0.1", "10.1.2.3", "::1", "::ffff:1.2.3.4"):
        for port in (0, 10911, 65535):
            for phys in (0, 1, 12345678901, (1 << 63) - 1, -5):
                a = ipaddress.ip_address(ip)
                a = a.ipv4_mapped or a if a.version == 6 else a
                fmt = ">4siq" if a.version == 4 else ">16siq"
                mid = offset_msg_id(ip, port, phys)
                assert mid == struct.pack(fmt, a.packed, port, phys).hex().upper()
                assert decode_offset_msg_id(mid)[1:] == (port, phys)
