import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.codes import SysFlag
from codec.errors import CodecError
from codec.properties import properties_to_string
from codec.record import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    MessageRecord,
    body_crc,
    decode_record,
    decompress_body,
    encode_record,
    iter_records,
    read_body,
    read_magic,
    read_properties,
    read_properties_bytes,
    read_queue_id,
    read_store_timestamp,
    read_sys_flag,
    read_topic,
    read_total_size,
    record_length,
    store_host_pos,
    store_timestamp_pos,
    verify_record,
)
from codec.record_rewrite import patch_append_fields, rewrite_for_delivery
from tests.codec.strategies import BOUNDED, FEW, bodies, hosts, ipv4, ports, properties

topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC%_-|0123456789", min_size=1, max_size=127)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def records(draw, host=hosts):
    return MessageRecord(
        topic=draw(topics), body=draw(bodies), queue_id=draw(i32), flag=draw(i32),
        queue_offset=draw(i64), commitlog_offset=draw(i64),
        sys_flag=draw(st.integers(0, 0x7FF)) & ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6),
        born_timestamp=draw(i64), born_host=draw(host), store_timestamp=draw(i64), store_host=draw(host),
        reconsume_times=draw(i32), prepared_transaction_offset=draw(i64), properties=draw(properties))


def expected_flag(rec: MessageRecord) -> int:
    f = rec.sys_flag
    if ":" in rec.born_host[0]:
        f |= SysFlag.BORNHOST_V6
    if ":" in rec.store_host[0]:
        f |= SysFlag.STOREHOST_V6
    return f


@BOUNDED
@given(records())
def test_round_trip_with_v4_and_v6_hosts(rec):
    raw = encode_record(rec)
    back, end = decode_record(raw)
    assert end == len(raw) == back.store_size == read_total_size(raw)
    assert back.sys_flag == expected_flag(rec)
    assert back.body_crc == zlib.crc32(rec.body) & 0x7FFFFFFF
    for f in ("topic", "body", "queue_id", "flag", "queue_offset", "commitlog_offset", "born_timestamp",
              "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
              "properties"):
        assert getattr(back, f) == getattr(rec, f), f
    v6 = bool(back.sys_flag & SysFlag.BORNHOST_V6) + bool(back.sys_flag & SysFlag.STOREHOST_V6)
    props = properties_to_string(rec.properties).encode()
    assert len(raw) == 91 + len(rec.body) + len(rec.topic) + len(props) + 12 * v6
    assert verify_record(raw, 0) == len(raw)
    assert encode_record(back) == raw  # decode -> encode is the identity


@BOUNDED
@given(records())
def test_no_decode_accessors_agree_with_decode(rec):
    raw = bytes(16) + encode_record(rec)  # at a non-zero position
    back, _ = decode_record(raw, 16)
    assert read_magic(raw, 16) == MAGIC_CODE
    assert read_topic(raw, 16) == back.topic
    assert read_queue_id(raw, 16) == back.queue_id
    assert read_sys_flag(raw, 16) == back.sys_flag
    assert read_store_timestamp(raw, 16) == back.store_timestamp
    assert read_body(raw, 16) == back.body
    assert read_properties(raw, 16) == back.properties
    assert read_properties_bytes(raw, 16) == properties_to_string(back.properties).encode()
    # accessors also work on a memoryview slice (what storage hands out)
    mv = memoryview(raw)[16:]
    assert read_topic(mv) == back.topic and read_body(mv) == back.body


def test_ipv4_layout_offsets_match_the_reference():
    rec = MessageRecord(topic="T1", body=b"abc", born_host=("10.0.0.5", 5000), store_host=("10.0.0.1", 10911),
                        store_timestamp=1234, reconsume_times=2, properties={"TAGS": "TagA"})
    raw = encode_record(rec)
    assert store_timestamp_pos(0) == 56 and store_host_pos(0) == 64
    assert struct.unpack_from(">q", raw, 56)[0] == 1234
    assert raw[64:68] == bytes([10, 0, 0, 1]) and struct.unpack_from(">i", raw, 68)[0] == 10911
    assert struct.unpack_from(">i", raw, 72)[0] == 2
    assert struct.unpack_from(">i", raw, 84)[0] == 3 and raw[88:91] == b"abc"
    assert raw[91] == 2 and raw[92:94] == b"T1"
    assert len(raw) == record_length(0, 3, 2, len(b"TAGS\x01TagA"))
    assert struct.unpack_from(">i", raw, 4)[0] == -626843481


def test_v4_mapped_v6_peer_is_stored_as_ipv4():
    raw = encode_record(MessageRecord(topic="T", born_host=("::ffff:10.1.2.3", 9), store_host=("10.0.0.1", 1)))
    back, _ = decode_record(raw)
    assert back.sys_flag & (SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6) == 0
    assert back.born_host == ("10.1.2.3", 9)


@FEW
@given(records(), i64, i64, i64)
def test_patch_append_fields_in_place(rec, qoff, phys, ts):
    raw = bytearray(8) + encode_record(rec)
    patch_append_fields(raw, 8, qoff, phys, ts)
    back, _ = decode_record(raw, 8)
    assert (back.queue_offset, back.commitlog_offset, back.store_timestamp) == (qoff, phys, ts)
    assert back.body == rec.body and back.store_host == rec.store_host
    assert verify_record(raw, 8) == len(raw) - 8


@BOUNDED
@given(records(), topics, i32, st.none() | st.tuples(ipv4, ports), st.none() | i32,
       st.none() | properties)
def test_rewrite_for_delivery(rec, topic, qid, store_host, reconsume, new_props):
    raw = encode_record(rec)
    pb = None if new_props is None else properties_to_string(new_props).encode()
    out = rewrite_for_delivery(memoryview(raw), topic, qid, store_host=store_host, reconsume_times=reconsume,
                               properties_bytes=pb)
    back, end = decode_record(out)
    assert end == len(out) and verify_record(out, 0) == len(out)
    assert back.topic == topic and back.queue_id == qid
    assert back.body == rec.body and back.body_crc == body_crc(rec.body)
    assert back.properties == (rec.properties if new_props is None else new_props)
    assert back.store_host == (rec.store_host if store_host is None else store_host)
    assert back.reconsume_times == (rec.reconsume_times if reconsume is None else reconsume)
    assert (back.born_host, back.born_timestamp, back.flag) == (rec.born_host, rec.born_timestamp, rec.flag)


def test_rewrite_refuses_garbage_and_long_topics():
    raw = encode_record(MessageRecord(topic="T", body=b"x"))
    with pytest.raises(CodecError):
        rewrite_for_delivery(raw, "x" * 128, 0)
    with pytest.raises(CodecError):
        rewrite_for_delivery(bytes(len(raw)), "T", 0)
    with pytest.raises(CodecError):
        rewrite_for_delivery(raw[:60], "T", 0)


def test_encode_limits():
    with pytest.raises(CodecError):
        encode_record(MessageRecord(topic="t" * 128))
    with pytest.raises(CodecError):
        encode_record(MessageRecord(topic="t", properties={"k": "v" * 32766}))
    with pytest.raises(CodecError):
        encode_record(MessageRecord(topic="t", queue_id=1 << 40))
    with pytest.raises(CodecError):
        encode_record(MessageRecord(topic="t", born_host=("not-an-ip", 1)))


@FEW
@given(st.lists(records(), min_size=1, max_size=4))
def test_iter_records_over_concatenation(recs):
    raw = b"".join(encode_record(r) for r in recs)
    assert [r.topic for r in iter_records(raw)] == [r.topic for r in recs]


def test_verify_record_blank_and_crc():
    raw = bytearray(encode_record(MessageRecord(topic="T", body=b"hello")))
    blank = struct.pack(">ii", 100, BLANK_MAGIC_CODE)
    assert verify_record(blank + bytes(92), 0) == 0
    body_at = len(raw) - (1 + 1 + 2) - 5
    assert raw[body_at:body_at + 5] == b"hello"
    raw[body_at] ^= 0xFF
    with pytest.raises(CodecError, match="BODYCRC"):
        verify_record(raw, 0)
    with pytest.raises(CodecError):
        verify_record(raw[:-1], 0)
    with pytest.raises(CodecError):
        verify_record(bytes(200), 0)


def test_total_size_mismatch_is_corruption():
    raw = bytearray(encode_record(MessageRecord(topic="T", body=b"hello")))
    struct.pack_into(">i", raw, 0, len(raw) - 1)
    with pytest.raises(CodecError):
        decode_record(raw)
    with pytest.raises(CodecError):
        verify_record(raw, 0)


def test_compressed_body_helper():
    data = b"x" * 10_000
    rec = MessageRecord(topic="T", body=zlib.compress(data, 5), sys_flag=SysFlag.COMPRESSED)
    assert decode_record(encode_record(rec), decompress=True)[0].body == data
    with pytest.raises(CodecError):
        decompress_body(zlib.compress(data)[:-4])
    with pytest.raises(CodecError):
        decompress_body(b"not zlib")
    with pytest.raises(CodecError):
        decompress_body(zlib.compress(bytes(1 << 20)), max_size=1000)


@BOUNDED
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_codec_error(data):
    for fn in (lambda: decode_record(data), lambda: list(iter_records(data)), lambda: verify_record(data, 0)):
        try:
            fn()
        except CodecError:
            pass


@BOUNDED
@given(records(), st.data())
def test_corrupted_records_raise_only_codec_error(rec, data):
    raw = bytearray(encode_record(rec))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for buf in (raw, raw[:cut]):
        for fn in (lambda b=buf: decode_record(b), lambda b=buf: verify_record(b, 0),
                   lambda b=buf: rewrite_for_delivery(b, "T", 0)):
            try:
                fn()
            except CodecError:
                pass


def test_no_decode_accessors_refuse_a_truncated_record():
    """Found by the 'timer' fuzz target: a length field pointing past the buffer raised IndexError
    from the no-decode accessors; it is a CodecError like every other malformed record."""
    from codec.record import read_body, read_properties_bytes, read_topic

    raw = bytes(encode_record(MessageRecord(topic="T", body=b"hello", properties={"TAGS": "a"})))
    props_at = len(raw) - 8  # 2 length bytes + "TAGS\x01a"
    for cut in (30, props_at - 4):  # inside the head; inside the body
        for read in (read_properties_bytes, read_topic, read_body):
            with pytest.raises(CodecError):
                read(raw[:cut])
    with pytest.raises(CodecError):  # inside the properties
        read_properties_bytes(raw[:len(raw) - 3])
    assert read_properties_bytes(raw) == b"TAGS\x01a"
