"""Sync delivery through a real MessageStore: due time, field restoration, order, idle wake-up, visibility."""

from __future__ import annotations

import time

from codec.tags import java_hash
from scheduler.delay_levels import DelayLevelService
from scheduler.levels import SCHEDULE_TOPIC
from tests.scheduler.helpers import (
    EventRecorder,
    QueueWatcher,
    delay_config,
    open_store,
    put_delayed,
    read_queue,
)


async def test_delivered_at_or_after_due_with_fields_restored(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    watch = QueueWatcher(store, "Real", 3)
    svc.start()
    try:
        put = put_delayed(store, svc.config.levels_ms, "Real", 2, n=3, queue_id=3, reconsume=2,
                          extra={"CUSTOM": "v"})
        await watch.wait_for(3, timeout=30)
        got = read_queue(store, "Real", 3)
        assert [r.properties["UNIQ_KEY"] for _, r in got] == [u for u, _ in put]
        for (tags, rec), (_, res) in zip(got, put, strict=True):
            due = res.store_timestamp + 200
            assert rec.store_timestamp >= due
            assert rec.topic == "Real" and rec.queue_id == 3
            assert tags == java_hash("TagA")
            assert rec.flag == 7 and rec.reconsume_times == 2 and rec.born_host == ("10.1.2.3", 5555)
            assert rec.store_host == ("127.0.0.1", 10911)
            # the stored properties string was built before DELAY was cleared (§1.5)
            assert rec.properties["DELAY"] == "2" and rec.properties["REAL_TOPIC"] == "Real"
            assert rec.properties["REAL_QID"] == "3" and rec.properties["CUSTOM"] == "v"
            assert rec.body.startswith(b"body-")
        # the index knows the delivered record under its keys
        found = store.query_by_key("Real", put[0][0], 10)
        assert len(found.buffers) == 1
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_order_within_a_level_and_levels_independent(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path, batch_size=16))
    w0, w1 = QueueWatcher(store, "A", 0), QueueWatcher(store, "B", 0)
    svc.start()
    try:
        sent_a, sent_b = [], []
        for _ in range(5):
            sent_a += [u for u, _ in put_delayed(store, svc.config.levels_ms, "A", 1, n=20)]
            sent_b += [u for u, _ in put_delayed(store, svc.config.levels_ms, "B", 3, n=7)]
        await w0.wait_for(100, timeout=30)
        await w1.wait_for(35, timeout=30)
        assert [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "A")] == sent_a
        assert [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "B")] == sent_b
        assert svc.levels[0].offset == 100 and svc.levels[2].offset == 35
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_idle_level_is_woken_by_dispatch(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    ev = EventRecorder()
    svc.add_listener(ev)
    svc.start()
    watch = QueueWatcher(store, "Idle", 0)
    try:
        await ev.wait(lambda r: any(f["level"] == 4 for f in r.named("idle")), timeout=30)
        lvl = svc.levels[3]
        assert lvl._idle and lvl.stats.next_due_ms == 0  # sleeping on the dispatch future, no timer
        [(uniq, res)] = put_delayed(store, svc.config.levels_ms, "Idle", 4)
        assert lvl._wake is not None and lvl._wake.done()  # the dispatch listener resolved its wait future in the same call
        await watch.wait_for(1, timeout=30)
        [(_, rec)] = read_queue(store, "Idle")
        assert rec.store_timestamp >= res.store_timestamp + 1000
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_visibility_runtime_info_stats_and_events(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    ev = EventRecorder()
    svc.add_listener(ev)
    watch = QueueWatcher(store, "V", 0)
    svc.start()
    try:
        put_delayed(store, svc.config.levels_ms, "V", 1, n=4)
        put_delayed(store, svc.config.levels_ms, "V", 4, n=2)
        t0 = time.time() * 1000
        await watch.wait_for(4, timeout=30)
        info = svc.runtime_info()
        assert info["scheduleMessageOffset_1"] == "4,4"
        assert info["scheduleMessageOffset_4"] == "0,2" and info["scheduleMessagePending_4"] == "2"
        assert int(info["scheduleMessageNextDue_4"]) >= t0 - 200
        st = svc.stats()
        assert st["levels"][1]["delivered_total"] == 4 and st["levels"][4]["pending"] == 2
        h = st["levels"][1]["lateness_ms"]
        assert h["count"] == 4 and h["buckets"][-1][1] == 4
        await watch.wait_for(6, timeout=30)
        delivered = ev.named("delivered")
        due = ev.named("due")
        assert len(due) == 6 and len(delivered) == 6
        for f in delivered:
            assert f["topic"] == "V" and f["uniqKey"].startswith("U") and len(f["msgId"]) == 32
            assert f["deliveredTs"] >= f["dueTs"] >= f["storeTs"] >= f["bornTs"] > 0
            assert f["level"] in (1, 4)
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_schedule_queue_untouched_by_delivery(tmp_path):
    """The schedule queue keeps its records; delivery only advances the level's offset."""
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    watch = QueueWatcher(store, "K", 0)
    svc.start()
    try:
        put_delayed(store, svc.config.levels_ms, "K", 1, n=3)
        await watch.wait_for(3, timeout=30)
        assert store.max_offset(SCHEDULE_TOPIC, 0) == 3 and svc.levels[0].offset == 3
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_a_busy_level_coalesces_its_passes_and_never_delivers_early(tmp_path):
    """Messages due 1 ms apart: with scheduleDeliverCoalesceMs a level that just delivered a batch
    sleeps until the head is due AND coalesce_ms have passed, so 60 messages over 60 ms go out in a
    few passes (store puts) instead of one per millisecond; none is delivered before it is due."""
    from codec.record import encode_record
    from scheduler.delay_levels import transform_delay
    from storage.message_store import PutRequest
    from tests.scheduler.helpers import make_record

    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path, coalesce_ms=40, coalesce_min_batch=1))
    puts = []
    store.add_dispatch_listener(lambda t, q, m: puts.append(m) if t == "Busy" else None)
    watch = QueueWatcher(store, "Busy", 0)
    svc.start()
    try:
        reqs = []
        for i in range(60):
            rec = make_record("Busy", 4)
            transform_delay(rec, svc.config.levels_ms)
            reqs.append(PutRequest(encode_record(rec), rec.topic, rec.queue_id, 0, (), 300 + i))
        [first, *_] = store.put(reqs)
        await watch.wait_for(60, timeout=30)
        got = read_queue(store, "Busy")
        assert len(got) == 60
        for i, (_, rec) in enumerate(got):
            assert rec.store_timestamp >= first.store_timestamp + 300 + i
        assert len(puts) <= 5, puts  # one pass per due millisecond would be up to 60
    finally:
        await svc.shutdown()
        await store.shutdown()


def test_a_failing_listener_is_logged_and_the_others_still_hear_the_batch():
    """A listener that raises must not stop delivery nor the listeners after it (its log line included)."""
    from scheduler.events import EVENT_FIELDS, EventColumns, fire_columns, fire_rows, on_event

    heard = []

    def broken(event, **fields):
        raise RuntimeError("listener bug")

    row = ("level", 1, "T", "ID1", "U1", 1, 2, 3, 4)
    fire_rows([on_event(broken), on_event(lambda e, **f: heard.append((e, f["msgId"])))], "due", [row])
    cols = EventColumns("level", 1, "AB", ["T"], [16], [b"U1"], [1], [2], [3], 4)
    fire_columns([on_event(broken), on_event(lambda e, **f: heard.append((e, f["msgId"])))], "delivered", cols)
    assert heard == [("due", "ID1"), ("delivered", "AB" + "0" * 14 + "10")]
    assert len(EVENT_FIELDS) == len(row)
