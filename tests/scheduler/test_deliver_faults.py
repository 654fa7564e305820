"""Failures on the batched delivery path: sync deliver under the put-failure injector (failed records
of a batch are resent until stored, nothing lost or duplicated), and an async PendingBatch whose
flush does not confirm it (split into per-message entries and resent in order)."""

from __future__ import annotations

from scheduler.delay_levels import DelayLevelService
from storage.message_store import PutStatus
from tests.helpers.checks import present
from tests.scheduler.helpers import (
    EventRecorder,
    QueueWatcher,
    delay_config,
    open_store,
    put_delayed,
    read_queue,
)


async def test_failed_records_are_resent_no_loss_no_dup(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    ev = EventRecorder()
    svc.add_listener(ev)
    watch = QueueWatcher(store, "F", 0)
    store.faults.fail_next(2, PutStatus.OS_PAGE_CACHE_BUSY)
    store.faults.predicate = lambda req: req.topic == "F"
    svc.start()
    try:
        sent = [u for u, _ in put_delayed(store, svc.config.levels_ms, "F", 1, n=5)]
        await watch.wait_for(5, timeout=30)
        await ev.wait(lambda r: len(r.named("delivered")) == 5, timeout=30)
        got = [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "F")]
        assert sorted(got) == sorted(sent) and len(got) == 5
        assert got == sent[2:] + sent[:2]  # the resent ones land after the rest of their batch
        assert sorted(f["uniqKey"] for f in ev.named("delivered")) == sorted(sent)
        lvl = svc.levels[0]
        assert lvl.stats.failed_puts == 2 and lvl.offset == 5 and lvl.stats.delivered == 5
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_delivered_records_without_listener_count_lateness(tmp_path):
    store = open_store(tmp_path, sync_flush=True)
    svc = DelayLevelService(store, delay_config(tmp_path, batch_size=16))
    watch = QueueWatcher(store, "G", 0)
    svc.start()
    try:
        sent = [u for u, _ in put_delayed(store, svc.config.levels_ms, "G", 1, n=40)]
        await watch.wait_for(40, timeout=30)
        assert [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "G")] == sent
    finally:
        await svc.shutdown()  # lets the level finish its pass (the group-commit wait, then the stats)
        await store.shutdown()
    st = svc.levels[0].stats
    assert st.delivered == 40 and st.lateness.count == 40 and svc.levels[0].offset == 40


async def test_async_batch_not_confirmed_by_flush_is_resent_message_by_message(tmp_path):
    """A PendingBatch whose flush future reports failure is split into per-message entries and
    each is resent (read again from the schedule queue, put synchronously), in offset order."""
    import asyncio
    import struct

    from scheduler.async_deliver import PendingBatch
    from scheduler.levels import SCHEDULE_TOPIC

    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path, async_deliver=True))
    ev = EventRecorder()
    svc.add_listener(ev)
    lvl = svc.levels[3]  # 1 s: the level task itself does not reach these within the test
    handler = present(lvl.handler, "the async handler")
    watch = QueueWatcher(store, "H", 0)
    sent = [u for u, _ in put_delayed(store, svc.config.levels_ms, "H", 4, n=3)]
    units = bytes(present(store.read_units(SCHEDULE_TOPIC, 3, 0, 3)))
    phys, sizes = zip(*(struct.unpack_from(">qi", units, i * 20) for i in range(3)), strict=True)
    svc.load()
    lvl.offset = lvl.scan_offset = 3  # the handler alone delivers them
    svc.start()
    try:
        flushed = asyncio.get_running_loop().create_future()
        handler.extend((PendingBatch(0, list(phys), list(sizes), [0, 0, 0], flushed, 0, [-1, -1, -1], None),))
        lvl.offset = 0
        flushed.set_result(False)
        await watch.wait_for(3, timeout=30)
        await ev.wait(lambda r: len(r.named("resend")) == 3 and lvl.offset == 3, timeout=30)
        assert [f["offset"] for f in ev.named("resend")] == [0, 1, 2]
        assert [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "H")] == sent
        assert handler.count == 0 and not handler.pending
    finally:
        await svc.shutdown()
        await store.shutdown()
