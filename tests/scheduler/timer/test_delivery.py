"""Delivery through a real MessageStore: never early, exact-ms order in a slot, roll-over, cancel.
How late deliveries are is a benchmark's figure (bench/timer.py), not a pass/fail threshold here."""

from __future__ import annotations

from scheduler.events import on_event
from scheduler.timer import TIMER_TOPIC, TimerPutStatus
from tests.scheduler.timer.conftest import now_ms


async def test_never_early_and_exact_ms_order_within_a_slot(harness):
    base = now_ms() + 600
    base -= base % 100
    # eight deliver times inside one 100 ms slot, sent in reverse order, plus two in the next slot
    times = [base + 5 + 11 * i for i in range(8)][::-1] + [base + 150, base + 120]
    for i, t in enumerate(times):
        d, _ = harness.send("T", {"TIMER_DELIVER_MS": str(t), "UNIQ_KEY": f"K{i}"}, body=str(t).encode())
        assert d.status is TimerPutStatus.TRANSFORMED
    await harness.wait_until(lambda: harness.count("T") == len(times), 30)
    got = harness.messages("T")
    bodies = [int(m.body) for m in got]
    assert bodies == sorted(times)  # delivered each at its own millisecond, in order
    for m in got:
        assert m.store_timestamp >= int(m.body)  # never early
        assert m.properties["REAL_TOPIC"] == "T" and "TIMER_ENQUEUE_MS" in m.properties
        assert int(m.properties["TIMER_DEQUEUE_MS"]) >= int(m.body)
    s = harness.timer.stats()
    assert s["delivered"] == len(times) and s["pending"] == 0


async def test_timers_of_the_same_millisecond_arrive_in_send_order(harness):
    """RocketMQ 5 walks a slot newest -> oldest and puts each unit at the front of its list, so
    equal deliver times go out oldest first: the order they were sent in."""
    due = now_ms() + 500
    for i in range(12):
        harness.send("Same", {"TIMER_DELIVER_MS": str(due), "UNIQ_KEY": f"S{i}"}, body=f"{i}".encode())
    await harness.wait_until(lambda: harness.count("Same") == 12, 30)
    assert [int(m.body) for m in harness.messages("Same")] == list(range(12))


async def test_relative_delays_are_not_early_and_keep_queue(harness):
    sent = now_ms()
    for i, (k, v) in enumerate([("TIMER_DELAY_MS", "250"), ("TIMER_DELAY_SEC", "1")]):
        harness.send("Q", {k: v, "UNIQ_KEY": f"R{i}"}, queue_id=2)
    await harness.wait_until(lambda: harness.count("Q", 2) == 2, 30)
    m0, m1 = harness.messages("Q", 2)
    assert m0.store_timestamp >= sent + 250 and m1.store_timestamp >= sent + 1000
    assert m0.queue_id == 2 and m0.properties["UNIQ_KEY"] == "R0"


async def test_past_time_is_delivered_at_once_in_its_own_topic(harness):
    d, res = harness.send("P", {"TIMER_DELIVER_MS": str(now_ms() - 1000)})
    assert d.status is TimerPutStatus.IMMEDIATE and harness.count("P") == 1
    assert harness.count(TIMER_TOPIC) == 0


async def test_roll_over_with_tiny_window(make_harness):
    h = make_harness(roll_window_slots=4)  # 400 ms window: a 1.3 s delay re-enters the wheel
    target = now_ms() + 1300
    h.send("L", {"TIMER_DELIVER_MS": str(target), "UNIQ_KEY": "LONG"})
    before = now_ms()
    h.send("L", {"TIMER_DELAY_MS": "1100", "UNIQ_KEY": "LONG2"})
    await h.wait_until(lambda: h.count("L") == 2, 30)
    by_key = {m.properties["UNIQ_KEY"]: m for m in h.messages("L")}
    a, b = by_key["LONG"], by_key["LONG2"]
    assert a.store_timestamp >= target  # never early, across a roll
    assert int(a.properties["TIMER_ROLL_TIMES"]) >= 1
    assert b.store_timestamp >= before + 1100 and int(b.properties["TIMER_ROLL_TIMES"]) >= 1
    assert h.timer.stats()["rolled"] >= 2
    assert h.count(TIMER_TOPIC) > 2  # rolled records re-entered rmq_sys_wheel_timer


async def test_cancel_marker_drops_target_and_is_never_delivered(harness):
    t = now_ms() + 700
    harness.send("C", {"TIMER_DELIVER_MS": str(t), "UNIQ_KEY": "VICTIM"})
    harness.send("C", {"TIMER_DELIVER_MS": str(t), "UNIQ_KEY": "SURVIVOR"})
    d, _ = harness.send("C", {"TIMER_DELIVER_MS": str(t), "UNIQ_KEY": "VICTIM", "TIMER_DEL_UNIQKEY": "C+VICTIM"},
                        body=b"0")
    assert d.status is TimerPutStatus.TRANSFORMED
    await harness.wait_until(lambda: harness.timer.stats()["cancelled"] == 1 and harness.count("C") >= 1, 30)
    await harness.wait_until(lambda: harness.timer.commit_read_ms > t, 30)  # a bound, as above
    got = harness.messages("C")
    assert [m.properties["UNIQ_KEY"] for m in got] == ["SURVIVOR"]
    assert harness.timer.stats()["markers"] == 1


async def test_events_and_runtime_info(harness):
    events = []
    harness.timer.add_listener(on_event(lambda ev, **f: events.append((ev, f))))
    harness.send("E", {"TIMER_DELAY_MS": "200", "UNIQ_KEY": "EV"})
    await harness.wait_until(lambda: any(e == "delivered" for e, _ in events), 30)
    kinds = [e for e, _ in events]
    assert kinds == ["accepted", "due", "delivered"]
    f = events[-1][1]
    assert f["topic"] == "E" and f["uniqKey"] == "EV" and f["deliveredTs"] >= f["dueTs"] and len(f["msgId"]) == 32
    info = harness.timer.runtime_info()
    assert info["rocketmq_timer_dequeue_total"] == "1" and info["rocketmq_timing_messages"] == "0"
    assert all(isinstance(v, str) for v in info.values())
