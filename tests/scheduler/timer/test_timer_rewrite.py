"""codec.timer_rewrite against its maintained reference, the dict-based conversion it replaced
(codec.timer_rewrite.timer_delivery_reference: parse → edit → serialise → rewrite_for_delivery), on
canonical and on odd property strings (duplicates, empty segments, a trailing separator, invalid UTF-8, non-ASCII, an existing TIMER_ENQUEUE_MS, rolled records)."""

from __future__ import annotations

import random

import pytest

from codec.errors import CodecError
from codec.properties import parse_properties, properties_to_string
from codec.record import MessageRecord, encode_record
from codec.timer_rewrite import (
    MISSING,
    TimerDelivery,
    build_timer_deliveries,
    canonical_map,
    edit_properties,
    timer_delivery_reference,
)

TIMER_TOPIC = "rmq_sys_wheel_timer"


def _record(pb: bytes) -> bytearray:
    rec = MessageRecord(topic=TIMER_TOPIC, body=b"body-\x00\x01\x02", queue_id=0, born_timestamp=123,
                        store_timestamp=456, born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 10911))
    return encode_record(rec, properties_bytes=pb)


def _normalise(got):
    if isinstance(got, TimerDelivery):
        rec, topic, qid, tcode, keys = got.record, got.topic, got.queue_id, got.tags_code, got.keys
        keys = tuple(k.decode() if isinstance(k, bytes) else k for k in keys)
        return bytes(rec), topic, qid, tcode, keys
    return got


BASE = {"TIMER_DELIVER_MS": "1795474679500", "UNIQ_KEY": "AC11000100002A9F0000000000000001", "KEYS": "k1 k2",
        "TAGS": "TagA", "WAIT": "true", "TIMER_OUT_MS": "1795474679000", "REAL_TOPIC": "Burst", "REAL_QID": "3"}


def _odd_strings() -> list[bytes]:
    canon = properties_to_string(BASE).encode()
    return [
        canon,
        canon + b"\x02",  # trailing separator
        b"\x02" + canon,  # leading separator
        canon + b"\x02REAL_QID\x017",  # duplicate key: the last one wins in the dict
        canon + b"\x02TAGS\x01",  # empty value: dropped
        canon + b"\x02\x01x",  # empty name: dropped
        canon + b"\x02ab",  # segment without \x01
        canon + b"\x02\x02\x02",  # empty segments
        canon + b"\x02X\x01a\x01b",  # a value holding \x01
        canon + b"\x02TIMER_ENQUEUE_MS\x0111\x02TIMER_DEQUEUE_MS\x0122",  # already converted once
        b"TIMER_DEQUEUE_MS\x0122\x02" + canon,  # at the very start
        canon.replace(b"TagA", "标签".encode()),  # non-ASCII, valid UTF-8
        canon.replace(b"TagA", b"Tag\xff\xfe"),  # invalid UTF-8
        canon.replace(b"REAL_QID\x013", "REAL_QID\x01٣".encode()),  # a non-ASCII digit
        canon.replace(b"REAL_QID\x013", b"REAL_QID\x01x"),  # not a number
        canon.replace(b"REAL_QID\x013", b"REAL_QID\x01-2"),  # negative: queue 0 (found by the timer fuzz target)
        canon.replace(b"REAL_QID\x013", b"REAL_QID\x012147483648"),  # past int32: queue 0
        canon.replace(b"\x02REAL_TOPIC\x01Burst", b""),  # no REAL_TOPIC
        canon + b"\x02TIMER_DEL_UNIQKEY\x01Burst+AC11000100002A9F0000000000000001",  # a marker
        canon + b"\x02XREAL_TOPIC\x01y\x02TIMER_ROLL_TIMES\x012",  # a key ending like another; rolled
        b"",
        b"A\x01b",
    ]


@pytest.mark.parametrize("pb", _odd_strings())
@pytest.mark.parametrize("roll", [False, True])
@pytest.mark.parametrize("cancel", [set(), {"Burst+AC11000100002A9F0000000000000001"}, {"None+x"}])
def test_build_matches_the_dict_conversion(pb, roll, cancel):
    raw = memoryview(bytes(_record(pb)))
    [got] = build_timer_deliveries([raw], [roll], [1795474679500], [1795474670000], 1795474679512, cancel)
    assert _normalise(got) == _normalise(timer_delivery_reference(raw, roll, 1795474679500, 1795474670000, 1795474679512, cancel))


def test_missing_batch_order_and_uniq_keys():
    raws = [None] + [memoryview(bytes(_record(s))) for s in _odd_strings()[:3]]
    uniqs: list = []
    got = build_timer_deliveries(raws, [False] * 4, [1] * 4, [2, 2, 3, 3], 3, set(), uniqs=uniqs)
    assert got[0] == MISSING
    want = [_normalise(timer_delivery_reference(r, False, 1, e, 3, set())) for r, e in zip(raws[1:], (2, 3, 3), strict=True)]
    assert [_normalise(g) for g in got[1:]] == want
    assert uniqs == [None] + [BASE["UNIQ_KEY"].encode()] * 3


def test_random_property_strings_match():
    rng = random.Random(7)
    names = ["REAL_TOPIC", "REAL_QID", "UNIQ_KEY", "KEYS", "TAGS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
             "TIMER_ROLL_TIMES", "TIMER_DELIVER_MS", "A", "é", ""]
    values = ["T", "0", "12", "k a  b", "", "x\x01y", "ü", "7"]
    for _ in range(3000):
        segs = [f"{rng.choice(names)}\x01{rng.choice(values)}" if rng.random() < 0.9 else rng.choice(["", "ab", "\x01"])
                for _ in range(rng.randint(0, 7))]
        pb = "\x02".join(segs).encode()
        if rng.random() < 0.1:
            pb += b"\x02"
        edits = ((b"TIMER_ENQUEUE_MS", b"5"), (b"TIMER_DEQUEUE_MS", b"6"))
        props = parse_properties(pb)
        props["TIMER_ENQUEUE_MS"], props["TIMER_DEQUEUE_MS"] = "5", "6"
        assert edit_properties(pb, edits) == properties_to_string(props).encode(), pb
        raw = memoryview(bytes(_record(pb)))
        roll = rng.random() < 0.3
        try:
            want = _normalise(timer_delivery_reference(raw, roll, 9, 8, 7, {"T+12"}))
        except ValueError as e:  # a non-numeric TIMER_ROLL_TIMES fails the same way
            with pytest.raises(type(e)):
                build_timer_deliveries([raw], [roll], [9], [8], 7, {"T+12"})
            continue
        assert _normalise(build_timer_deliveries([raw], [roll], [9], [8], 7, {"T+12"})[0]) == want, pb


def test_canonical_map():
    assert canonical_map(b"A\x01b\x02C\x01d") == {b"A": b"b", b"C": b"d"}
    for bad in (b"", b"A\x01b\x02", b"A\x01b\x02A\x01c", b"A\x01\x02C\x01d", b"Ab", b"A\x01b\x01c", b"\xff\x01b"):
        assert canonical_map(bad) is None, bad


def test_bad_record_raises():
    with pytest.raises(CodecError):
        build_timer_deliveries([memoryview(b"\x00" * 40)], [False], [0], [0], 0, set())
