"""Delay level parsing and the put hook (scheduled-messages.md §1.1-1.3)."""

from __future__ import annotations

import time

import pytest

from codec.properties import parse_properties, properties_to_string
from codec.record import decode_record
from scheduler.delay_levels import ON_DICT, transform_delay, transform_delay_properties
from scheduler.levels import (
    DEFAULT_DELAY_LEVELS,
    SCHEDULE_TOPIC,
    correct_deliver_timestamp,
    parse_delay_levels,
)
from tests.helpers.checks import present
from tests.scheduler.helpers import FAST_LEVELS, make_record, open_store, put_delayed, read_queue


def test_default_levels_are_rocketmq_table():
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(levels) == 18
    assert levels[:5] == [1000, 5000, 10000, 30000, 60000]
    assert levels[13:] == [600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000]


def test_units_including_ms_and_days():
    assert parse_delay_levels("100ms 2s 3m 1h 1d") == [100, 2000, 180_000, 3_600_000, 86_400_000]
    assert parse_delay_levels(FAST_LEVELS) == [100, 200, 300, 1000]


@pytest.mark.parametrize("bad,token", [("1s 5x 10s", "5x"), ("1s s", "s"), ("1s -5s", "-5s"),
                                       ("1s 1.5s", "1.5s"), ("10", "10"), ("1s ms", "ms")])
def test_bad_token_is_named(bad, token):
    with pytest.raises(ValueError) as e:
        parse_delay_levels(bad)
    assert repr(token) in str(e.value)


def test_empty_level_string_is_rejected():
    with pytest.raises(ValueError):
        parse_delay_levels("  ")


def test_transform_moves_to_schedule_queue_with_real_topic_and_qid():
    rec = make_record("Orders", 2, queue_id=5)
    assert transform_delay(rec, [100, 200, 300]) == 200
    assert (rec.topic, rec.queue_id) == (SCHEDULE_TOPIC, 1)
    assert rec.properties["REAL_TOPIC"] == "Orders" and rec.properties["REAL_QID"] == "5"
    assert rec.properties["DELAY"] == "2"


def test_transform_clamps_to_highest_level_and_writes_delay_back():
    rec = make_record("T", 99, queue_id=1)
    assert transform_delay(rec, [100, 200, 300]) == 300
    assert rec.queue_id == 2 and rec.properties["DELAY"] == "3"


@pytest.mark.parametrize("delay", [None, "0", "-1", "abc"])
def test_not_a_delay_message(delay):
    rec = make_record("T", 0, extra={"DELAY": delay} if delay is not None else None)
    assert transform_delay(rec, [100]) is None
    assert rec.topic == "T" and "REAL_TOPIC" not in rec.properties


@pytest.mark.parametrize("tx,moved", [(0x0, True), (0x8, True), (0x4, False), (0xC, False)])
def test_only_transaction_not_and_commit(tx, moved):
    rec = make_record("T", 1, sys_flag=tx)
    assert (transform_delay(rec, [100]) is not None) is moved
    assert (rec.topic == SCHEDULE_TOPIC) is moved


def test_delay_level_wins_over_timer_properties():
    rec = make_record("T", 1, extra={"TIMER_DELAY_MS": "5000", "TIMER_DELIVER_MS": "1", "TIMER_DELAY_SEC": "3"})
    assert transform_delay(rec, [100]) == 100
    assert not {"TIMER_DELAY_MS", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC"} & set(rec.properties)


@pytest.mark.parametrize("delay", [None, "", "0", "-1", "abc", "1", "2", "3", "4", "99"])
@pytest.mark.parametrize("tx", [0x0, 0x4, 0x8, 0xC])
def test_the_string_rewrite_is_the_dict_rewrite(delay, tx):
    """transform_delay_properties (the send's plain path) stores what transform_delay does on the dict;
    a level to clamp goes back to the dict path."""
    rec = make_record("Orders", 0, queue_id=5, sys_flag=tx, extra={"DELAY": delay} if delay is not None else None)
    props = properties_to_string(rec.properties)
    got = transform_delay_properties(props, rec.properties.get("DELAY"), rec.topic, rec.queue_id, tx, [100, 200, 300])
    want = transform_delay(rec, [100, 200, 300])
    if got is ON_DICT:
        assert delay in ("4", "99") and tx in (0x0, 0x8)  # above the highest level: clamped on the dict
    elif got is None:
        assert want is None and rec.topic == "Orders"
    else:
        assert (got.topic, got.queue_id, got.delay_ms) == (rec.topic, rec.queue_id, want)
        assert got.properties == properties_to_string(rec.properties)
        assert parse_properties(got.properties) == rec.properties


def test_correct_deliver_timestamp_guards_clock_jumps():
    assert correct_deliver_timestamp(1000, 1100, 100) == 1100
    assert correct_deliver_timestamp(1000, 1101, 100) == 1000  # further away than the level: now
    assert correct_deliver_timestamp(1000, 900, 100) == 900


async def test_consume_queue_tags_code_is_deliver_timestamp(tmp_path):
    store = open_store(tmp_path)
    try:
        levels = parse_delay_levels(FAST_LEVELS)
        before = int(time.time() * 1000)
        put = put_delayed(store, levels, "Real", 3, n=2, queue_id=4)
        units = read_queue(store, SCHEDULE_TOPIC, 2)
        assert len(units) == 2
        for (tags, rec), (_, res) in zip(units, put, strict=True):
            assert tags == res.store_timestamp + 300 >= before + 300
            assert rec.topic == SCHEDULE_TOPIC and rec.queue_id == 2
            assert rec.properties["REAL_TOPIC"] == "Real" and rec.properties["REAL_QID"] == "4"
        raw = present(store.read_record(put[0][1].phys_offset))
        assert decode_record(raw, 0)[0].properties["DELAY"] == "3"
    finally:
        await store.shutdown()


def test_schedule_tags_code_is_the_deliver_time_for_schedule_records_and_the_tags_hash_otherwise():
    from codec.tags import java_hash
    from scheduler.levels import SCHEDULE_TOPIC, schedule_tags_code

    rule = schedule_tags_code([1000, 5000, 10_000])
    assert rule(SCHEDULE_TOPIC, {"DELAY": "3", "TAGS": "T"}, 100) == 100 + 10_000
    assert rule(SCHEDULE_TOPIC, {"DELAY": "99"}, 100) == 100 + 10_000  # past the table: the last level
    assert rule(SCHEDULE_TOPIC, {"DELAY": "x", "TAGS": "T"}, 100) == java_hash("T")
    assert rule("Orders", {"DELAY": "3", "TAGS": "T"}, 100) == java_hash("T")
    assert rule("Orders", {}, 100) == 0
