"""A promoted slave's delay levels and timer wheel resume past the deliveries its replica holds (issue 25
item 3).

The slave's last adopted progress record says "level 1: next offset 3, CommitLog end E"; the old
master went on delivering, and its deliveries after E reached the replica. The new master counts them
(scheduler.delay_recovery.deliveries_after) and resumes just past the last one (skip_delivered), so
none is delivered twice. One real store plays the replica: a first DelayLevelService delivers (the old
master), a second one takes over from the lagging record (the new master)."""

from __future__ import annotations

from codec.consume_queue_unit import UNIT_SIZE
from codec.record import encode_record
from scheduler.delay_recovery import deliveries_after, skip_delivered
from scheduler.delay_service import DelayLevelService
from scheduler.timer.follow import TimerTail, timer_deliveries_after
from storage.store_types import PutRequest
from tests.helpers.checks import present
from tests.scheduler.helpers import (
    QueueWatcher,
    delay_config,
    make_record,
    open_store,
    put_delayed,
    read_queue,
)

TOPIC = "PromoT"


def _phys_of(store, topic: str, offset: int) -> int:
    units = present(store.read_units(topic, 0, offset, 1))
    assert len(units) == UNIT_SIZE
    return int.from_bytes(units[:8], "big")


async def test_new_master_skips_the_deliveries_after_the_adopted_record(tmp_path):
    store = open_store(tmp_path / "store")
    old = DelayLevelService(store, delay_config(tmp_path / "old"))
    watch = QueueWatcher(store, TOPIC, 0)
    sent = [u for u, _ in put_delayed(store, old.config.levels_ms, TOPIC, 1, n=10)]
    old.start()
    try:
        await watch.wait_for(10)
    finally:
        await old.shutdown()
    # the record the slave adopted last: level 1 at offset 3, taken when the CommitLog ended just
    # before the 4th delivery; deliveries 4..10 came after it
    since = _phys_of(store, TOPIC, 3)
    assert deliveries_after(store, since) == {1: 7}
    assert deliveries_after(store, -1) == {}
    for batch_size in (2, 3, 32):  # the walk crosses batches the same way
        assert skip_delivered(store, 1, 3, 7, batch_size) == 10
        assert skip_delivered(store, 1, 3, 2, batch_size) == 5
    assert skip_delivered(store, 1, 0, 0, 8) == 0

    new = DelayLevelService(store, delay_config(tmp_path / "new", batch_size=3))
    assert new.resume_from({1: 3}, since) == {1: 7}
    assert new.levels[0].offset == 10
    more = [u for u, _ in put_delayed(store, new.config.levels_ms, TOPIC, 1, n=2)]
    new.start()
    try:
        await watch.wait_for(12)
    finally:
        await new.shutdown()
    keys = [rec.properties["UNIQ_KEY"] for _tags, rec in read_queue(store, TOPIC)]
    assert keys == sent + more  # each once: nothing of 4..10 again
    await store.shutdown()


async def test_without_the_commitlog_end_the_record_alone_decides(tmp_path):
    """No end known (an Apache master's delayOffset only): the level resumes at the record's offset."""
    store = open_store(tmp_path / "store")
    put_delayed(store, [100], TOPIC, 1, n=4)
    svc = DelayLevelService(store, delay_config(tmp_path / "cfg"))
    assert svc.resume_from({1: 2}) == {}
    assert svc.levels[0].offset == 2
    await store.shutdown()


def _put_plain(store, topic: str, props: dict[str, str]) -> int:
    """One record put as it is (no put hook): its CommitLog offset."""
    rec = make_record(topic, 0, extra=props)
    (res,) = store.put([PutRequest(encode_record(rec), rec.topic, rec.queue_id)])
    assert res.ok, res.status
    return res.phys_offset


async def test_the_timer_tail_names_the_last_delivered_slot_and_unit(tmp_path):
    """scheduler.timer.follow.timer_deliveries_after: final timer deliveries only (a real topic,
    TIMER_OUT_MS and TIMER_DEQUEUE_MS, no DELAY level), the last one's slot and UNIQ_KEY."""
    store = open_store(tmp_path / "store")
    before = _put_plain(store, TOPIC, {"TIMER_OUT_MS": "1000", "TIMER_DEQUEUE_MS": "1", "UNIQ_KEY": "old"})
    since = store.commitlog_max_offset()
    _put_plain(store, TOPIC, {"TIMER_OUT_MS": "2000", "TIMER_DEQUEUE_MS": "2", "UNIQ_KEY": "a"})
    _put_plain(store, TOPIC, {"UNIQ_KEY": "plain"})
    _put_plain(store, "rmq_sys_wheel_timer", {"TIMER_OUT_MS": "9000", "TIMER_DEQUEUE_MS": "2", "UNIQ_KEY": "roll"})
    _put_plain(store, TOPIC, {"TIMER_OUT_MS": "9000", "TIMER_DEQUEUE_MS": "2", "DELAY": "1", "UNIQ_KEY": "retry"})
    _put_plain(store, TOPIC, {"TIMER_OUT_MS": "3000", "TIMER_DEQUEUE_MS": "3", "UNIQ_KEY": "b"})
    _put_plain(store, TOPIC, {"TIMER_OUT_MS": "3000", "TIMER_ENQUEUE_MS": "3", "UNIQ_KEY": "not-dequeued"})
    assert timer_deliveries_after(store, since) == TimerTail(2, 3000, "b")
    assert timer_deliveries_after(store, before) == TimerTail(3, 3000, "b")
    assert timer_deliveries_after(store, store.commitlog_max_offset()) == TimerTail(0, -1, None)
    assert timer_deliveries_after(store, -1) == TimerTail(0, -1, None)
    await store.shutdown()
