"""properties, tags, batch and msgid codecs."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.batch import BatchItem, decode_batch, encode_batch
from codec.errors import CodecError
from codec.msgid import UniqIdGenerator, decode_offset_msg_id, new_uniq_id, offset_msg_id
from codec.properties import MessageConst, parse_properties, properties_to_string
from codec.tags import java_hash, tags_code
from tests.codec.strategies import BOUNDED, bodies, ipv4, ipv6, prop_key, properties


def java_string_hash(s: str) -> int:
    """Independent reference: Java's definition s[0]*31^(n-1) + ... over UTF-16 code units, as int32."""
    units = [int.from_bytes(s.encode("utf-16-be", "surrogatepass")[i:i + 2], "big")
             for i in range(0, len(s.encode("utf-16-be", "surrogatepass")), 2)]
    n = len(units)
    h = sum(u * pow(31, n - 1 - i) for i, u in enumerate(units)) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


# ------------------------------------------------------------------ properties

@BOUNDED
@given(properties)
def test_properties_round_trip(props):
    s = properties_to_string(props)
    assert not s.endswith("\x02")
    assert parse_properties(s) == props
    assert parse_properties(s.encode()) == props


@BOUNDED
@given(properties)
def test_cpp_trailing_separator_is_harmless(props):
    s = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
    assert parse_properties(s) == props


def test_java_parsing_rules():
    # empty key, empty value and too-short segments are dropped; only the first \x01 splits
    assert parse_properties("\x01v\x02k\x01\x02ab\x02a\x01b\x02x\x01y\x01z") == {"a": "b", "x": "y\x01z"}
    assert parse_properties("") == {} and parse_properties(None) == {}
    assert properties_to_string({"a": "1", "b": None}) == "a\x011"


def test_message_const_names():
    assert (MessageConst.DELAY, MessageConst.REAL_TOPIC, MessageConst.REAL_QID) == ("DELAY", "REAL_TOPIC",
                                                                                      "REAL_QID")
    assert MessageConst.UNIQ_KEY == "UNIQ_KEY" and MessageConst.TIMER_DELIVER_MS == "TIMER_DELIVER_MS"
    assert MessageConst.RECONSUME_TIME == "RECONSUME_TIME" and MessageConst.TRANSACTION_ID == "__transactionId__"


# ------------------------------------------------------------------ tags

@pytest.mark.parametrize("tag,code", [("TagA", 2598919), ("*", 42), ("hello world", 1794106052), ("", 0)])
def test_java_hash_vectors(tag, code):
    assert java_hash(tag) == code


@BOUNDED
@given(st.text(max_size=30))
def test_java_hash_matches_the_definition(s):
    assert java_hash(s) == java_string_hash(s)
    assert -(1 << 31) <= java_hash(s) < (1 << 31)


def test_tags_code():
    assert tags_code(None) == 0 and tags_code("") == 0 and tags_code("TagA") == 2598919
    assert java_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # two surrogate code units


# ------------------------------------------------------------------ batch

batch_items = st.lists(st.builds(BatchItem, st.integers(-(1 << 31), (1 << 31) - 1), bodies,
                                 properties.map(properties_to_string)), max_size=6)


@BOUNDED
@given(batch_items)
def test_batch_round_trip(items):
    raw = encode_batch(items)
    assert decode_batch(raw) == items
    assert decode_batch(memoryview(raw)) == items


def test_batch_item_layout():
    raw = encode_batch([(7, b"abc", "k\x01v")])
    assert raw == (bytes.fromhex("0000001C 00000000 00000000 00000007 00000003".replace(" ", ""))
                   + b"abc" + b"\x00\x03k\x01v")


@BOUNDED
@given(st.binary(max_size=300))
def test_arbitrary_bytes_into_decode_batch_raise_only_codec_error(data):
    try:
        decode_batch(data)
    except CodecError:
        pass


@BOUNDED
@given(batch_items.filter(bool), st.data())
def test_truncated_or_corrupted_batch(items, data):
    raw = bytearray(encode_batch(items))
    bounds, pos = set(), 0
    for it in items:
        pos += len(encode_batch([it]))
        bounds.add(pos)
    cut = data.draw(st.integers(1, len(raw) - 1))
    if cut in bounds:
        assert decode_batch(raw[:cut]) == items[:sorted(bounds).index(cut) + 1]
    else:
        with pytest.raises(CodecError):  # a cut inside an item breaks a declared length
            decode_batch(raw[:cut])
    raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_batch(raw)
    except CodecError:
        pass


# ------------------------------------------------------------------ msgid

def test_offset_msg_id_reference_example():
    # message-format.md §5.1: store 10.0.0.1:10911, offset 3902
    assert offset_msg_id("10.0.0.1", 10911, 3902) == "0A00000100002A9F0000000000000F3E"
    assert decode_offset_msg_id("0A00000100002A9F0000000000000F3E") == ("10.0.0.1", 10911, 3902)
    assert decode_offset_msg_id("0a00000100002a9f0000000000000f3e") == ("10.0.0.1", 10911, 3902)


@BOUNDED
@given(ipv4 | ipv6, st.integers(0, 65535), st.integers(0, (1 << 63) - 1))
def test_offset_msg_id_round_trip(ip, port, off):
    mid = offset_msg_id(ip, port, off)
    assert len(mid) == (56 if ":" in ip else 32)
    assert re.fullmatch("[0-9A-F]+", mid)
    assert decode_offset_msg_id(mid) == (ip, port, off)


@pytest.mark.parametrize("bad", ["", "XYZ", "0A" * 15, "0A" * 17, "0A 00000100002A9F0000000000000F3", "G" * 32])
def test_bad_offset_msg_id(bad):
    with pytest.raises(CodecError):
        decode_offset_msg_id(bad)


def test_new_uniq_id_layout_and_uniqueness():
    ids = [new_uniq_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for i in ids[:5]:
        assert re.fullmatch("[0-9A-F]{32}", i)
    # ip(4) pid(2) hash(4) are fixed per process; ms-since-month-start and counter move
    assert len({i[:20] for i in ids}) == 1
    a, b = int(ids[0][-4:], 16), int(ids[1][-4:], 16)
    assert b == (a + 1) & 0xFFFF


def test_uniq_id_generator_carries_its_host():
    # the broker's generator names brokerIP1 (MessageClientIDSetter puts the host's IPv4 first)
    assert UniqIdGenerator("10.1.2.3").new()[:8] == "0A010203"
    assert UniqIdGenerator("::ffff:192.168.0.9").new()[:8] == "C0A80009"
    assert new_uniq_id()[:8] == "7F000001"


@given(prop_key)
@BOUNDED
def test_properties_single_pair(k):
    assert parse_properties(f"{k}\x01v") == {k: "v"}
