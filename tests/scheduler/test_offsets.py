"""delayOffset.json: RocketMQ's shape, quoted keys accepted, correction on load, clean restart."""

from __future__ import annotations

import os

from scheduler.delay_levels import DelayLevelService
from scheduler.delay_offsets import DelayOffsetTable
from scheduler.levels import SCHEDULE_TOPIC
from storage.meta_store import DelayOffsetFile, format_delay_offsets, parse_delay_offsets
from tests.scheduler.helpers import QueueWatcher, delay_config, open_store, put_delayed, read_queue


def test_shape_is_fastjson_unquoted_int_keys(tmp_path):
    text = format_delay_offsets({2: 0, 1: 12, 3: 57}).decode()
    compact = "".join(text.split())
    assert compact == '{"offsetTable":{1:12,2:0,3:57}}'
    assert parse_delay_offsets(text) == {1: 12, 2: 0, 3: 57}


def test_reader_accepts_quoted_keys_and_rocketmq_sample():
    assert parse_delay_offsets('{"offsetTable":{"1":12,"18":3}}') == {1: 12, 18: 3}
    assert parse_delay_offsets('{"offsetTable":{1:12,2:0,3:57}}') == {1: 12, 2: 0, 3: 57}
    assert parse_delay_offsets('{\n\t"offsetTable":{}\n}') == {}


def test_persist_is_atomic_with_bak_fallback(tmp_path):
    path = tmp_path / "delayOffset.json"
    t = DelayOffsetTable(DelayOffsetFile(str(path)))
    t.set(1, 5)
    assert t.persist()
    assert not t.persist()  # unchanged: nothing written
    t.set(1, 9)
    assert t.persist()
    assert os.path.exists(str(path) + ".bak") and not os.path.exists(str(path) + ".tmp")
    path.write_text("{garbage")  # a torn primary falls back to .bak
    t2 = DelayOffsetTable(DelayOffsetFile(str(path)))
    t2.load()
    assert t2.get(1) == 5


async def test_offsets_corrected_into_queue_range_on_load(tmp_path):
    store = open_store(tmp_path)
    try:
        put_delayed(store, [100, 200, 300, 1000], "C", 4, n=3)  # level 4 queue: [0, 3]
        cfg_dir = tmp_path / "config"
        cfg_dir.mkdir()
        (cfg_dir / "delayOffset.json").write_text('{"offsetTable":{1:7,4:99,"2":-4}}')
        svc = DelayLevelService(store, delay_config(tmp_path))
        svc.load()
        assert [d.offset for d in svc.levels] == [0, 0, 0, 3]
    finally:
        await store.shutdown()


async def test_clean_restart_no_duplicates_no_loss(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    w_fast = QueueWatcher(store, "R", 0)
    svc.start()
    fast = [u for u, _ in put_delayed(store, svc.config.levels_ms, "R", 1, n=30)]
    slow = [u for u, _ in put_delayed(store, svc.config.levels_ms, "R", 4, n=30)]  # 1 s: pending at stop
    await w_fast.wait_for(30, timeout=30)
    await svc.shutdown()
    assert svc.levels[3].offset == 0
    saved = parse_delay_offsets((tmp_path / "config" / "delayOffset.json").read_text())
    assert saved == {1: 30, 2: 0, 3: 0, 4: 0}
    await store.shutdown()

    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    watch = QueueWatcher(store, "R", 0)
    svc.start()
    try:
        await watch.wait_for(60, timeout=30)
        assert svc.levels[0].offset == 30 and svc.levels[3].offset == 30
        got = [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "R")]
        assert got == fast + slow  # each exactly once, in order
        assert store.max_offset(SCHEDULE_TOPIC, 0) == 30
    finally:
        await svc.shutdown()
        await store.shutdown()
