"""Async deliver (enableScheduleAsyncDeliver) under the storage put-failure injector (§2)."""

from __future__ import annotations

from scheduler.async_deliver import EXCEPTION, RUNNING, SKIP, SUCCESS, EntryStatus
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


def _only(topic):
    return lambda req: req.topic == topic


async def test_running_then_success_in_order(tmp_path, monkeypatch):
    store = open_store(tmp_path, sync_flush=True)  # RUNNING until the group commit resolves the future
    svc = DelayLevelService(store, delay_config(tmp_path, async_deliver=True, batch_size=8))
    ev = EventRecorder()
    svc.add_listener(ev)
    watch = QueueWatcher(store, "A", 0)
    seen_running: list[EntryStatus] = []
    handler = present(svc.levels[0].handler, "the async handler")
    orig_extend = handler.extend

    def spy(entries):  # observe the states the level task hands over (real entries, real futures)
        entries = list(entries)
        seen_running.extend(e.status for e in entries)
        orig_extend(entries)

    monkeypatch.setattr(handler, "extend", spy)
    svc.start()
    try:
        sent = [u for u, _ in put_delayed(store, svc.config.levels_ms, "A", 1, n=40)]
        await watch.wait_for(40, timeout=30)
        await ev.wait(lambda r: len(r.named("delivered")) == 40, timeout=30)
        assert set(seen_running) == {RUNNING}
        assert [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "A")] == sent
        assert svc.levels[0].offset == 40 and not handler.pending
        assert [f["uniqKey"] for f in ev.named("delivered")] == sent  # offset advanced strictly in order
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_exception_resend_then_success_no_loss_no_dup(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path, async_deliver=True))
    ev = EventRecorder()
    svc.add_listener(ev)
    watch = QueueWatcher(store, "E", 0)
    store.faults.fail_next(2, PutStatus.OS_PAGE_CACHE_BUSY)
    store.faults.predicate = _only("E")
    svc.start()
    try:
        sent = [u for u, _ in put_delayed(store, svc.config.levels_ms, "E", 1, n=5)]
        await watch.wait_for(5, timeout=30)
        await ev.wait(lambda r: svc.levels[0].offset == 5 and len(r.named("delivered")) == 5, timeout=30)
        resends = ev.named("resend")
        # the event carries the state's name
        assert resends and resends[0]["status"] in (SUCCESS.value, EXCEPTION.value) and resends[0]["offset"] == 0
        assert resends[-1]["status"] == SUCCESS.value
        got = [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "E")]
        assert sorted(got) == sorted(sent) and len(got) == 5  # no loss, no duplicate
        assert svc.levels[0].stats.failed_puts == 2
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_blocks_after_three_resends_and_resumes_when_fault_clears(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path, async_deliver=True, batch_size=4))
    ev = EventRecorder()
    svc.add_listener(ev)
    watch = QueueWatcher(store, "B", 0)
    lvl = svc.levels[0]
    handler = present(lvl.handler, "the async handler")
    store.faults.fail_while_enabled(PutStatus.SERVICE_NOT_AVAILABLE, _only("B"))
    svc.start()
    try:
        first = [u for u, _ in put_delayed(store, svc.config.levels_ms, "B", 1, n=4)]
        await ev.wait(lambda r: any(f["blocked"] for f in r.named("resend")), timeout=30)
        assert handler.pending[0].resend_count >= 4 and handler.blocked()
        assert [e.status for e in handler.pending] == [EXCEPTION] * 4
        # while blocked, newly due messages are not delivered (not even attempted)
        later = [u for u, _ in put_delayed(store, svc.config.levels_ms, "B", 1, n=6)]
        injected = store.faults.injected
        await ev.wait(lambda r: len(r.named("resend")) >= 5, timeout=30)
        assert lvl.scan_offset == 4 and store.faults.injected == injected + 1  # only the head's resend
        assert store.max_offset("B", 0) == 0 and lvl.offset == 0
        # scheduleProgress stays at the first failed put (a kill now resumes there: nothing lost)
        progress = present(svc.progress_file, "scheduleProgress (open after start)")
        assert progress.level(1).offset == 0 and progress.level(1).phys == -1
        store.faults.disable()
        await watch.wait_for(10, timeout=30)
        await ev.wait(lambda r: lvl.offset == 10, timeout=30)
        assert progress.level(1).offset == 10 and handler.failed == 0
        got = [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "B")]
        assert got[0] == first[0] and sorted(got) == sorted(first + later) and len(got) == 10
        assert not handler.blocked()
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_unreadable_record_is_skipped_after_six_resends(tmp_path):
    store = open_store(tmp_path, commitlog_size=64 * 1024)
    svc = DelayLevelService(store, delay_config(tmp_path, async_deliver=True))
    ev = EventRecorder()
    svc.add_listener(ev)
    lvl = svc.levels[0]
    store.faults.fail_while_enabled(PutStatus.SERVICE_NOT_AVAILABLE, _only("S"))
    svc.start()
    try:
        [(lost, _)] = put_delayed(store, svc.config.levels_ms, "S", 1)
        await ev.wait(lambda r: len(r.named("resend")) >= 1, timeout=30)
        # roll the CommitLog past its first segment, then let retention delete it: the schedule
        # record of the failed head can no longer be read
        from codec.record import encode_record
        from storage.message_store import PutRequest
        from tests.scheduler.helpers import make_record
        filler = [PutRequest(encode_record(make_record("Fill", 0, body=b"f" * 4000)), "Fill", 0)
                  for _ in range(20)]
        assert all(r.ok for r in store.put(filler))
        assert store.clean_expired(now=2**40)
        assert store.read_record(store.commitlog_min_offset() - 1) is None
        await ev.wait(lambda r: any(f["status"] == SKIP.value for f in r.named("resend")), timeout=30)
        statuses = [f["status"] for f in ev.named("resend")]
        assert statuses[-1] == SKIP.value and statuses.count(EXCEPTION.value) == 6  # SKIP on the 7th try
        store.faults.disable()
        watch = QueueWatcher(store, "S", 0)
        [(ok, _)] = put_delayed(store, svc.config.levels_ms, "S", 1)
        await watch.wait_for(1, timeout=30)
        await ev.wait(lambda r: lvl.offset == 2, timeout=30)
        assert [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "S")] == [ok]
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_pending_deque_is_bounded(tmp_path, monkeypatch):
    store = open_store(tmp_path, sync_flush=True)
    svc = DelayLevelService(store, delay_config(tmp_path, async_deliver=True, max_pending=5, batch_size=64))
    watch = QueueWatcher(store, "P", 0)
    handler = present(svc.levels[0].handler, "the async handler")
    sizes = []
    orig_extend = handler.extend

    def spy(entries):
        entries = list(entries)
        orig_extend(entries)
        sizes.append(len(handler.pending))

    monkeypatch.setattr(handler, "extend", spy)
    svc.start()
    try:
        put_delayed(store, svc.config.levels_ms, "P", 1, n=50)
        await watch.wait_for(50, timeout=30)
        assert max(sizes) <= 6  # Java admits while size <= limit
        assert len(sizes) >= 9
    finally:
        await svc.shutdown()
        await store.shutdown()
