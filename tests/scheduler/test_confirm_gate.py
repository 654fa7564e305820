"""The delay levels and the timer wheel behind the store's dispatch limit (RocketMQ 5's confirmOffset, issue
25): a scheduled message whose stored copy is past the limit is not delivered, however long due, even when
its level makes a pass; the limit passing it wakes the level (the dispatch listener, no timer) and it is
delivered then -- and that delivery is itself held from consumers until the limit passes it too. A timer
message past the limit does not enter the wheel."""

from __future__ import annotations

import time

from scheduler.delay_levels import DelayLevelService
from scheduler.levels import SCHEDULE_TOPIC
from tests.scheduler.helpers import EventRecorder, QueueWatcher, delay_config, open_store, put_delayed
from tests.scheduler.timer.conftest import Harness, now_ms


async def test_a_scheduled_message_past_the_confirm_point_is_not_delivered(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    ev = EventRecorder()
    svc.add_listener(ev)
    watch = QueueWatcher(store, "Real", 0)
    svc.start()
    try:
        await ev.wait(lambda r: any(f["level"] == 1 for f in r.named("idle")), timeout=30)
        store.set_dispatch_limit(store.commitlog_max_offset())  # a master whose slave has not acked yet
        real_now = store.now_ms
        store.now_ms = lambda: real_now() - 60_000  # stored a minute ago: long due (level 1 is 100 ms)
        [(uniq, res)] = put_delayed(store, svc.config.levels_ms, "Real", 1)
        store.now_ms = real_now
        assert res.store_timestamp + 100 < int(time.time() * 1000)
        idle = len(ev.named("idle"))
        svc.levels[0].on_dispatch()  # a pass now: it must find nothing it may read
        await ev.wait(lambda r: len(r.named("idle")) > idle, timeout=30)
        assert store.max_offset(SCHEDULE_TOPIC, 0) == 0 and ev.named("delivered") == []
        assert store.queues.offsets.get(("Real", 0), 0) == 0  # nothing put to the real topic either

        end = res.phys_offset + res.size
        store.set_dispatch_limit(end)  # the slave acked it: the level is woken by that, and delivers
        await ev.wait(lambda r: bool(r.named("delivered")), timeout=30)
        assert [f["uniqKey"] for f in ev.named("delivered")] == [uniq]
        assert store.queues.offsets[("Real", 0)] == 1 and store.max_offset("Real", 0) == 0  # held: past the limit
        store.set_dispatch_limit(store.commitlog_max_offset())
        assert await watch.wait_for(1, timeout=30) == 1
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_a_timer_message_past_the_confirm_point_does_not_enter_the_wheel(tmp_path):
    """The wheel's enqueue reads rmq_sys_wheel_timer through the same limit: a timer message only the master
    holds is not enqueued, so it cannot be delivered; the limit passing it does both."""
    harness = Harness(str(tmp_path / "store"))
    harness.open()
    store, timer = harness.store, harness.timer
    assert store is not None and timer is not None
    try:
        store.set_dispatch_limit(store.commitlog_max_offset())
        due = now_ms() + 300
        d, _ = harness.send("T", {"TIMER_DELIVER_MS": str(due), "UNIQ_KEY": "W1"})
        assert d.status.name == "TRANSFORMED"
        timer.parts().enqueuer.drain()  # enqueue everything it may read, now: nothing
        assert timer.stats()["enqueued"] == 0 and timer.stats()["pending"] == 0
        store.set_dispatch_limit(None)  # the slave acked (lifted, so that the delivery is seen too)
        await harness.wait_until(lambda: harness.count("T") == 1, 30)
        [m] = harness.messages("T")
        assert m.properties["UNIQ_KEY"] == "W1" and m.store_timestamp >= due
        assert timer.stats()["enqueued"] == 1
    finally:
        await harness.close()
