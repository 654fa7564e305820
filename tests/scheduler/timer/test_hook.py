"""The put hook: transform rules of scheduled-messages.md §4.2 and flow control (§4.8, rising formula)."""

from __future__ import annotations

import random

import pytest

from codec.record import MessageRecord
from scheduler.timer import TIMER_TOPIC, TimerConfig, TimerPutStatus, transform_timer
from scheduler.timer.hook import is_reject, slot_of

NOW = 1_700_000_000_123
CFG = TimerConfig(precision_ms=100)


def rec(props, topic="T", qid=3, sys_flag=0):
    return MessageRecord(topic=topic, body=b"b", queue_id=qid, sys_flag=sys_flag, properties=dict(props))


def test_precedence_sec_over_ms_over_deliver_ms():
    r = rec({"TIMER_DELAY_SEC": "2", "TIMER_DELAY_MS": "500", "TIMER_DELIVER_MS": str(NOW + 9000)})
    d = transform_timer(r, NOW, CFG)
    assert d.status is TimerPutStatus.TRANSFORMED and d.deliver_ms == NOW + 2000 + 1  # strictly after: never early
    r = rec({"TIMER_DELAY_MS": "500", "TIMER_DELIVER_MS": str(NOW + 9000)})
    assert transform_timer(r, NOW, CFG).deliver_ms == NOW + 500 + 1
    r = rec({"TIMER_DELIVER_MS": str(NOW + 9000)})
    assert transform_timer(r, NOW, CFG).deliver_ms == NOW + 9000


def test_rewrite_to_timer_topic_with_real_topic_and_qid():
    r = rec({"TIMER_DELAY_MS": "1234"})
    d = transform_timer(r, NOW, CFG)
    assert r.topic == TIMER_TOPIC and r.queue_id == 0
    assert r.properties["REAL_TOPIC"] == "T" and r.properties["REAL_QID"] == "3"
    assert int(r.properties["TIMER_OUT_MS"]) == d.slot_ms == slot_of(NOW + 1234 + 1, 100)


def test_a_relative_delay_ends_strictly_after_now_plus_delay():
    """`now` is a truncated ms: the send may have started up to 1 ms after it, so a relative timer is
    due in the first ms strictly after now + delay (on a slot boundary that is the next slot)."""
    for now, delay in ((1000, 100), (1099, 1), (1050, 50)):
        d = transform_timer(rec({"TIMER_DELAY_MS": str(delay)}), now, CFG)
        assert d.deliver_ms == now + delay + 1 and d.slot_ms < d.deliver_ms <= d.slot_ms + 100
    assert transform_timer(rec({"TIMER_DELAY_MS": "100"}), 1000, CFG).slot_ms == 1100
    # an absolute deliver time is a wall-clock ms: delivery at that ms is not early
    d = transform_timer(rec({"TIMER_DELIVER_MS": "1100"}), 1000, CFG)
    assert d.deliver_ms == 1100 and d.slot_ms == 1000
    # a zero delay is no timer at all
    assert transform_timer(rec({"TIMER_DELAY_MS": "0"}), 1000, CFG).status is TimerPutStatus.IMMEDIATE


@pytest.mark.parametrize("deliver,slot", [(1000, 900), (1001, 1000), (1099, 1000), (1100, 1000), (1101, 1100)])
def test_rounding_is_last_boundary_strictly_before(deliver, slot):
    assert slot_of(deliver, 100) == slot
    r = rec({"TIMER_DELIVER_MS": str(deliver)})
    assert transform_timer(r, 0, CFG).slot_ms == slot


def test_now_or_past_is_immediate_and_untouched():
    for t in (NOW, NOW - 5000):
        r = rec({"TIMER_DELIVER_MS": str(t)})
        d = transform_timer(r, NOW, CFG)
        assert d.status is TimerPutStatus.IMMEDIATE
        assert r.topic == "T" and "TIMER_OUT_MS" not in r.properties and r.properties["TIMER_DELIVER_MS"] == str(t)


def test_past_cancel_marker_is_illegal():
    r = rec({"TIMER_DELIVER_MS": str(NOW - 1), "TIMER_DEL_UNIQKEY": "T+ABC"})
    d = transform_timer(r, NOW, CFG)
    assert d.status is TimerPutStatus.ILLEGAL and d.response_code == 13 and d.remark


def test_beyond_max_delay_is_illegal_with_remark_and_max_may_be_years():
    r = rec({"TIMER_DELAY_SEC": str(259200 + 1)})
    d = transform_timer(r, NOW, CFG)
    assert d.status is TimerPutStatus.ILLEGAL and "timerMaxDelaySec" in (d.remark or "") and d.response_code == 13
    assert transform_timer(rec({"TIMER_DELAY_SEC": "259200"}), NOW, CFG).status is TimerPutStatus.TRANSFORMED
    years = TimerConfig(precision_ms=100, max_delay_sec=5 * 365 * 86400)
    r = rec({"TIMER_DELAY_SEC": str(4 * 365 * 86400)})
    assert transform_timer(r, NOW, years).status is TimerPutStatus.TRANSFORMED


def test_not_a_number_is_illegal():
    d = transform_timer(rec({"TIMER_DELAY_SEC": "soon"}), NOW, CFG)
    assert d.status is TimerPutStatus.ILLEGAL and "TIMER_DELAY_SEC" in (d.remark or "")


def test_delay_level_wins_and_drops_timer_keys():
    r = rec({"DELAY": "3", "TIMER_DELAY_SEC": "10", "TIMER_DELIVER_MS": str(NOW + 1)})
    assert transform_timer(r, NOW, CFG).status is TimerPutStatus.NOT_TIMER
    assert r.topic == "T" and not any(k.startswith("TIMER_") for k in r.properties)
    r = rec({"DELAY": "0", "TIMER_DELAY_SEC": "10"})  # level 0 is no level
    assert transform_timer(r, NOW, CFG).status is TimerPutStatus.TRANSFORMED


def test_not_timer_cases():
    assert transform_timer(rec({}), NOW, CFG).status is TimerPutStatus.NOT_TIMER
    r = rec({"TIMER_DELAY_SEC": "5", "TIMER_OUT_MS": "1"})
    assert transform_timer(r, NOW, CFG).status is TimerPutStatus.NOT_TIMER and r.topic == "T"
    r = rec({"TIMER_DELAY_SEC": "5"}, topic=TIMER_TOPIC)
    assert transform_timer(r, NOW, CFG).status is TimerPutStatus.NOT_TIMER
    r = rec({"TIMER_DELAY_SEC": "5"}, sys_flag=0x4)  # prepared transaction message
    assert transform_timer(r, NOW, CFG).status is TimerPutStatus.NOT_TIMER


def test_disabled_wheel_and_the_broker_config_keys():
    from server.config import BrokerConfig
    from server.wiring import timer_config

    off = timer_config(BrokerConfig(timer_wheel_enable=False, timer_precision_ms=250, timer_max_delay_sec=10))
    d = transform_timer(rec({"TIMER_DELAY_SEC": "5"}), NOW, off)
    assert d.status is TimerPutStatus.NOT_ENABLED and d.response_code == 1
    on = timer_config(BrokerConfig(timer_wheel_enable=True, timer_precision_ms=250, timer_max_delay_sec=10))
    assert on.precision_ms == 200  # snapped down to {100,200,500,1000}
    assert transform_timer(rec({"TIMER_DELAY_SEC": "11"}), NOW, on).status is TimerPutStatus.ILLEGAL


def test_reject_probability_rises_with_load():
    rng = random.Random(7)
    c = 100
    assert not any(is_reject(n, c, rng) for n in range(0, c + 1))
    assert all(is_reject(n, c, rng) for n in range(2 * c, 3 * c))
    low = sum(is_reject(c + 10, c, rng) for _ in range(4000)) / 4000
    high = sum(is_reject(c + 90, c, rng) for _ in range(4000)) / 4000
    assert 0.05 < low < 0.15 and 0.85 < high < 0.95


async def test_flow_control_uses_the_slots_count(make_harness):
    h = make_harness(congest_num_each_slot=5)
    target = h.timer.curr_write_ms + 60_000 + 50
    slot = slot_of(target, 100)
    seen = []
    for _ in range(40):
        num = h.timer.wheel.get_num(slot)
        d, _ = h.send("T", {"TIMER_DELIVER_MS": str(target)})
        seen.append((num, d.status))
        if d.status is TimerPutStatus.FLOW_CONTROL:
            assert d.response_code == 1 and "congested" in d.remark
        await h.wait_until(lambda: h.timer.commit_queue_offset == h.count(TIMER_TOPIC), 30)
    assert all(st is TimerPutStatus.TRANSFORMED for n, st in seen if n <= 5)
    assert all(st is TimerPutStatus.FLOW_CONTROL for n, st in seen if n >= 10)
    assert h.timer.wheel.get_num(slot) == 10  # saturates at 2C
    rejected = sum(st is TimerPutStatus.FLOW_CONTROL for _, st in seen)
    assert h.timer.stats()["rejected"] == rejected >= 30
    other = h.send("T", {"TIMER_DELIVER_MS": str(target + 1000)})[0]  # another slot is free
    assert other.status is TimerPutStatus.TRANSFORMED
