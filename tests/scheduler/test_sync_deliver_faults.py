"""Sync deliver (the default) under the storage put-failure injector: failed records of a batch are
resent until stored, nothing is lost or duplicated, and the offset moves past the batch only then."""

from __future__ import annotations

from scheduler.delay_levels import DelayLevelService
from storage.message_store import PutStatus
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
        await watch.wait_for(5, timeout=5)
        await ev.wait(lambda r: len(r.named("delivered")) == 5, timeout=5)
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
        await watch.wait_for(40, timeout=5)
        assert [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "G")] == sent
    finally:
        await svc.shutdown()  # lets the level finish its pass (the group-commit wait, then the stats)
        await store.shutdown()
    st = svc.levels[0].stats
    assert st.delivered == 40 and st.lateness.count == 40 and svc.levels[0].offset == 40
