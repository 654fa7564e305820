"""The on-disk key index (storage/index.py, storage/index_file.py): restart, crash, collisions,
rotation, retention, migration of the old keys.idx."""

from __future__ import annotations

import os
import struct
import time

from structlog.testing import capture_logs

from codec.record import decode_record
from storage.index_file import ENTRY, HEADER, HEADER_SIZE
from storage.store_types import IndexKeys
from tests.helpers.checks import present
from tests.storage.conftest import open_store, request
from tests.storage.test_recovery import _crash


def _offsets(q) -> list[int]:
    return [decode_record(b, 0)[0].commitlog_offset for b in q.buffers]


def _index_files(root) -> list[str]:
    d = os.path.join(root, "index")
    return sorted(n for n in os.listdir(d) if n.isdigit())


def test_query_after_clean_restart(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(keys=f"k{i % 3} all", uniq=f"U{i}") for i in range(30)])
    assert s.index.entries == 90
    s.close()
    with capture_logs() as logs:
        s = open_store(tmp_path)
    assert not [e for e in logs if e["event"].startswith("index.")]
    assert s.index.entries == 90 and s.index.last_update_phys == res[-1].phys_offset
    assert _offsets(s.query_by_key("T", "k1", 100)) == [r.phys_offset for r in res[1::3]]
    assert _offsets(s.query_by_key("T", "U7", 100)) == [res[7].phys_offset]
    assert _offsets(s.query_by_key("T", "all", 4)) == [r.phys_offset for r in res[-4:]]  # newest, oldest first
    assert s.query_by_key("T", "nope", 10).buffers == [] and s.query_by_key("Other", "k1", 10).buffers == []
    # time window on the record's store time
    ts = res[0].store_timestamp
    assert len(s.query_by_key("T", "all", 100, ts, ts).buffers) == 30
    assert s.query_by_key("T", "all", 100, ts + 1).buffers == []
    s.close()


def test_crash_with_torn_tail_cuts_index_entries_and_rebuilds_slots(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(body=b"x" * 300, keys="same", uniq=f"U{i}") for i in range(20)])
    last = res[-1]
    mf = present(s.commitlog.queue.find(last.phys_offset))
    pos = last.phys_offset - mf.file_from_offset
    mf.mm[pos + 150:pos + last.size] = bytes(last.size - 150)  # torn: the page with its second half never written
    # a batch interrupted by the kill: its slot already points at an entry past indexCount
    f = s.index.files[-1]
    slot = f.slots[0]
    f.slots[0] = f.count + 5
    _crash(s)
    with capture_logs() as logs:
        s = open_store(tmp_path)
    cut = [e for e in logs if e["event"] == "index.entries_cut"]
    assert len(cut) == 1 and cut[0]["entries"] == 2 and cut[0]["from_phys"] == last.phys_offset
    assert s.index.entries == 38 and s.index.last_update_phys == res[-2].phys_offset
    f = s.index.files[-1]
    assert max(f.slots) <= f.count and (f.slots[0] == slot or slot > f.count)
    assert s.query_by_key("T", "U19", 10).buffers == []
    assert _offsets(s.query_by_key("T", "same", 100)) == [r.phys_offset for r in res[:-1]]
    # the cut record's offset is reused; its keys are the new record's, once
    r = s.put([request(keys="same", uniq="NEW")])[0]
    assert r.phys_offset == last.phys_offset
    assert _offsets(s.query_by_key("T", "NEW", 10)) == [r.phys_offset]
    assert _offsets(s.query_by_key("T", "same", 100))[-2:] == [res[-2].phys_offset, r.phys_offset]
    s.close()


def test_crash_redispatch_adds_missing_keys_once(tmp_path):
    s = open_store(tmp_path)
    a = s.put([request(keys="k", uniq=f"A{i}") for i in range(5)])
    s.close()
    s = open_store(tmp_path)
    b = s.put([request(keys="k", uniq=f"B{i}") for i in range(5)])
    # the kill came after the CommitLog write but before these index entries reached the file
    f = s.index.files[-1]
    HEADER.pack_into(f.mm, 0, f.begin_ts, f.end_ts, f.begin_phys, a[-1].phys_offset, f.slot_num, 10)
    _crash(s)
    with capture_logs() as logs:
        s = open_store(tmp_path)
    assert any(e["event"] == "recovery.redispatched" and e["index_keys"] == 10 for e in logs)
    assert s.index.entries == 20
    assert _offsets(s.query_by_key("T", "k", 100)) == [r.phys_offset for r in a + b]
    assert _offsets(s.query_by_key("T", "B3", 100)) == [b[3].phys_offset]
    s.close()


def test_keys_sharing_slots_and_hashes_never_return_another_key(tmp_path):
    s = open_store(tmp_path, max_hash_slot_num=1)  # every key in one chain
    res = s.put([request(keys=f"key{i % 4}", uniq=f"U{i}") for i in range(40)])
    for k in range(4):
        assert _offsets(s.query_by_key("T", f"key{k}", 100)) == [r.phys_offset for r in res[k::4]]
    # an entry whose hash is the key's but whose record carries another key (a CRC collision)
    s.index.add("T", ("key1",), res[0].phys_offset, res[0].size, res[0].store_timestamp)
    assert res[0].phys_offset not in _offsets(s.query_by_key("T", "key1", 100))
    # a key listed twice in KEYS is one hit
    d = s.put([request(keys="dup dup")])[0]
    assert _offsets(s.query_by_key("T", "dup", 10)) == [d.phys_offset]
    s.close()


def test_rotation_across_files_and_restart(tmp_path):
    s = open_store(tmp_path, max_hash_slot_num=7, max_index_num=10)
    res = []
    for i in range(12):  # 3 records x 2 keys per put: rotations happen inside a batch
        res += s.put([request(keys="k", uniq=f"U{i}-{j}") for j in range(3)])
    names = _index_files(tmp_path)
    assert len(names) == 8 and names == sorted(names)
    assert [f.count for f in s.index.files] == [10] * 7 + [2]
    want = [r.phys_offset for r in res]
    assert _offsets(s.query_by_key("T", "k", 100)) == want
    assert _offsets(s.query_by_key("T", "k", 5)) == want[-5:]
    assert _offsets(s.query_by_key("T", "U4-1", 5)) == [res[13].phys_offset]
    s.close()
    s = open_store(tmp_path, max_hash_slot_num=7, max_index_num=10)
    assert _offsets(s.query_by_key("T", "k", 100)) == want and s.index.entries == 72
    s.put([request(keys="k")])
    assert [f.count for f in s.index.files][-1] == 3
    s.close()


def test_flush_makes_entries_durable_and_keeps_checkpoint_true(tmp_path):
    s = open_store(tmp_path, max_index_num=3)
    s.put([request(keys="a b", uniq="U")])
    s.put([request(keys="c")])
    plan = s.index.take_pending()
    assert [(count, done) for _f, count, done in plan] == [(3, True), (1, False)]
    s.index.write(plan)
    assert all(f.flushed_count == f.count for f in s.index.files) and s.index.take_pending() == []
    s.close()


def test_retention_deletes_index_files_below_commitlog_min(tmp_path):
    s = open_store(tmp_path, file_reserved_time_hours=1, max_index_num=20)
    res = s.put([request(body=b"r" * 3000, keys="k") for _ in range(70)])  # ~4 segments, 4 index files
    files = list(s.commitlog.queue.files)
    names = _index_files(tmp_path)
    assert len(files) >= 4 and len(names) == 4
    old = time.time() - 2 * 3600
    for mf in files[:2]:
        os.utime(mf.path, (old, old))
    with capture_logs() as logs:
        s.clean_expired()
    new_min = s.commitlog.min_offset
    gone = [f for e in logs if e["event"] == "retention.index_deleted" for f in e["files"]]
    below = [names[i] for i in range(3) if res[20 * i + 19].phys_offset < new_min]  # file i: records 20i..20i+19
    assert len(below) >= 1 and [os.path.basename(p) for p in gone] == below
    assert all(f.end_phys >= new_min for f in s.index.files) and s.index.entries == 70 - 20 * len(below)
    kept = [r.phys_offset for r in res if r.phys_offset >= new_min]
    assert _offsets(s.query_by_key("T", "k", 1000)) == kept
    s.close()


def _old_entry(key: str, phys: int, size: int, ts: int) -> bytes:
    kb = key.encode()
    return struct.pack(">qiqh", phys, size, ts, len(kb)) + kb


def test_old_keys_idx_is_migrated_then_removed(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(keys=f"k{i % 2}", uniq=f"U{i}") for i in range(10)])
    s.close()
    for name in _index_files(tmp_path):
        os.unlink(tmp_path / "index" / name)
    old = b"".join(_old_entry(f"T#{k}", r.phys_offset, r.size, r.store_timestamp)
                   for i, r in enumerate(res) for k in (f"k{i % 2}", f"U{i}"))
    old += _old_entry("SCHEDULE_TOPIC_XXXX#k0", res[0].phys_offset, res[0].size, 1)  # written by an older version
    end = res[-1].phys_offset + res[-1].size
    old += _old_entry("T#k0", end, 200, 1) + b"\x00\x01"  # past the CommitLog end, then a torn tail
    (tmp_path / "index" / "keys.idx").write_bytes(old)
    with capture_logs() as logs:
        s = open_store(tmp_path)
    mig = [e for e in logs if e["event"] == "index.migrated"]
    # the SCHEDULE_TOPIC_XXXX key is kept too (scheduled records are indexed); a query checks the record's topic
    assert len(mig) == 1 and mig[0]["keys"] == 21 and mig[0]["entries"] == 21
    assert not os.path.exists(tmp_path / "index" / "keys.idx") and len(_index_files(tmp_path)) == 1
    assert _offsets(s.query_by_key("T", "k0", 100)) == [r.phys_offset for r in res[0::2]]
    assert _offsets(s.query_by_key("T", "U3", 100)) == [res[3].phys_offset]
    r = s.put([request(keys="k0")])[0]
    s.close()
    s = open_store(tmp_path)  # a normal load now
    assert _offsets(s.query_by_key("T", "k0", 100)) == [x.phys_offset for x in res[0::2]] + [r.phys_offset]
    s.close()


def test_unfinished_migration_starts_over(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(keys="k") for _ in range(3)])
    s.close()
    (tmp_path / "index" / "keys.idx").write_bytes(
        b"".join(_old_entry("T#k", r.phys_offset, r.size, r.store_timestamp) for r in res))
    # the IndexFile written before (and one a half-done migration would leave) is replaced
    s = open_store(tmp_path)
    assert s.index.entries == 3 and len(_offsets(s.query_by_key("T", "k", 10))) == 3
    s.close()


def test_invalid_index_file_is_deleted_at_load(tmp_path):
    s = open_store(tmp_path)
    s.put([request(keys="k")])
    s.close()
    path = tmp_path / "index" / "20000101000000000"
    path.write_bytes(bytes(HEADER_SIZE + ENTRY.size))  # created, header never written
    with capture_logs() as logs:
        s = open_store(tmp_path)
    assert any(e["event"] == "index.invalid_file_deleted" for e in logs) and not path.exists()
    assert len(s.query_by_key("T", "k", 10).buffers) == 1
    s.close()


def test_a_batch_chained_with_numpy_writes_the_bytes_one_by_one_adds_write(tmp_path):
    """IndexService.add_batch chains and packs a large batch with numpy; the index file it leaves
    (slot table and entries) is byte for byte what adding the same keys one at a time leaves, with
    keys sharing slots inside a batch and with the heads of earlier batches, a chunk boundary (the
    one-by-one path takes over) and a rotation included."""
    from storage.index import VECTOR_MIN, IndexService

    def fill(root, batched):
        idx = IndexService(str(root), None, max_hash_slot_num=7, max_index_num=20_000)
        idx.load(0)
        ts, phys, n = 1_700_000_000_000, 0, 0
        for b in range(60):
            entries = []
            for i in range(VECTOR_MIN + b * 7):
                # str keys and UTF-8 bytes keys (IndexKeys: one kind per record) hash alike
                keys: IndexKeys = (f"k{i % 5}".encode(), f"U{b}-{i}".encode()) if i % 3 else (f"U{b}-{i}",)
                entries.append(("T" if i % 4 else "T2", keys, phys, 100 + i))
                phys += 100 + i
                n += len(keys)
            if batched:
                idx.add_batch(entries, ts)
            else:
                for e in entries:
                    idx.add(*e, ts)
            ts += 1500
        assert idx.entries == n
        files = [open(f.path, "rb").read() for f in idx.files]
        idx.close()
        return files

    one_by_one, batched = fill(tmp_path / "a", False), fill(tmp_path / "b", True)
    assert len(batched) == 2 and [len(x) for x in batched] == [len(x) for x in one_by_one]
    assert batched == one_by_one


# ---- the next IndexFile made ahead of need (RocketMQ's AllocateMappedFileService) ----------------------

def _ahead_index(root, pool, index_num: int = 10):
    from storage.index import IndexService

    idx = IndexService(str(root), None, max_hash_slot_num=7, max_index_num=index_num, allocator=pool)
    idx.load(0)
    idx.allocate_ahead()  # as MessageStore.load does after recovery
    return idx


def _add(idx, n: int, phys0: int, ts: int) -> None:
    for i in range(n):
        idx.add("T", (f"k{phys0 + i * 100}",), phys0 + i * 100, 100, ts)


def _barrier(pool) -> None:
    pool.submit(lambda: None).result()  # one thread, FIFO: everything asked before has run


def test_the_next_index_file_is_made_ahead_and_renamed_at_the_rotation(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from storage.index import AHEAD_NAME
    pool = ThreadPoolExecutor(1)
    idx = _ahead_index(tmp_path, pool)
    _barrier(pool)
    assert os.listdir(tmp_path / "index") == [AHEAD_NAME]  # no file yet: the first one is made ahead
    _add(idx, 1, 0, 1_700_000_000_000)
    assert (idx.ahead.used, idx.ahead.missed) == (1, 0) and len(_index_files(tmp_path)) == 1
    _add(idx, 4, 100, 1_700_000_001_000)  # 5 of 10 entries: half full, the next one is asked for
    _barrier(pool)
    assert sorted(os.listdir(tmp_path / "index")) == sorted(_index_files(tmp_path) + [AHEAD_NAME])
    _add(idx, 6, 500, 1_700_000_005_000)  # the 11th entry rotates: renamed, its header written now
    assert (idx.ahead.used, idx.ahead.missed) == (2, 0)
    names = _index_files(tmp_path)
    assert len(names) == 2 and sorted(os.listdir(tmp_path / "index")) == names
    f = idx.files[1]
    assert f.path == os.path.join(tmp_path, "index", names[1]) and f.count == 1
    assert f.begin_phys == 1000 and f.begin_ts == 1_700_000_005_000
    assert [phys for phys, _size, _tdiff in f.chain(zlib_key("T", "k1000"))] == [1000]  # the entry sits in the renamed file
    idx.close()
    with open(tmp_path / "index" / names[1], "rb") as fh:  # the header is on disk under the new name
        begin_ts, end_ts, begin_phys, end_phys, slots, count = HEADER.unpack(fh.read(HEADER_SIZE))
    assert (begin_ts, begin_phys, end_phys, slots, count) == (1_700_000_005_000, 1000, 1000, 7, 1)
    pool.shutdown()


def zlib_key(topic: str, key: str) -> int:
    from zlib import crc32

    return crc32(f"{topic}#{key}".encode())


def test_an_index_file_not_ready_in_time_is_made_inline_and_the_late_one_removed(tmp_path):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    gate = threading.Event()
    pool.submit(gate.wait)  # the pool is busy: what is asked next cannot be ready
    try:
        idx = _ahead_index(tmp_path, pool)
        _add(idx, 5, 0, 1_700_000_000_000)  # the first file: made inline; half full: the next asked for
        _add(idx, 6, 500, 1_700_000_000_000)  # rotates: made inline too
        assert (idx.ahead.used, idx.ahead.missed) == (0, 2) and [f.count for f in idx.files] == [10, 1]
    finally:
        gate.set()  # (a failed assertion must not leave the pool's thread waiting at exit)
    pool.shutdown(wait=True)
    assert sorted(os.listdir(tmp_path / "index")) == _index_files(tmp_path) and len(_index_files(tmp_path)) == 2
    idx.close()


def test_an_index_file_made_ahead_is_removed_by_close_and_a_crash_leftover_by_load(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from storage.index import AHEAD_NAME, IndexService, _make_ahead
    pool = ThreadPoolExecutor(1)
    idx = _ahead_index(tmp_path, pool)
    idx.close()  # waits for the pool's file, removes it
    assert os.listdir(tmp_path / "index") == []
    _make_ahead(str(tmp_path / "index" / AHEAD_NAME), 7, 10).close()  # made, then kill -9: left behind
    idx = IndexService(str(tmp_path), None, max_hash_slot_num=7, max_index_num=10)
    idx.load(0)
    assert os.listdir(tmp_path / "index") == [] and idx.files == []
    idx.close()
    pool.shutdown()


def test_a_store_rotates_onto_index_files_made_ahead_and_queries_across_them(tmp_path):
    """Through the store (its allocate pool): every IndexFile after the first was asked for ahead
    (taken ready, or made inline when the pool was late); queries span the files, across a restart."""
    s = open_store(tmp_path, max_hash_slot_num=7, max_index_num=40)
    res = []
    for i in range(30):  # one record, 2 keys a put: the rotation is never in the batch that passes half
        res += s.put([request(keys="k", uniq=f"U{i}")])
    names = _index_files(tmp_path)
    assert len(names) == 2 and [f.count for f in s.index.files] == [40, 20]
    assert s.index.ahead.used + s.index.ahead.missed == 2  # the first (asked for at load) and the second
    want = [r.phys_offset for r in res]
    assert _offsets(s.query_by_key("T", "k", 100)) == want
    assert _offsets(s.query_by_key("T", "U25", 5)) == [res[25].phys_offset]
    s.close()
    assert sorted(os.listdir(tmp_path / "index")) == names  # the third, made ahead at half, removed
    s = open_store(tmp_path, max_hash_slot_num=7, max_index_num=40)
    assert _offsets(s.query_by_key("T", "k", 100)) == want
    s.close()


def test_a_failure_on_the_pool_is_left_to_the_inline_index_file_creation(tmp_path):
    """The pool cannot make the file (its spare name is taken by a directory here; ENOSPC on a full
    disk): logged, counted, and the file is made inline, which reports its own error (`index.no_room`)."""
    from concurrent.futures import ThreadPoolExecutor

    from storage.index import AHEAD_NAME, IndexService
    pool = ThreadPoolExecutor(1)
    idx = IndexService(str(tmp_path), None, max_hash_slot_num=7, max_index_num=10, allocator=pool)
    idx.load(0)
    (tmp_path / "index" / AHEAD_NAME).mkdir()
    idx.allocate_ahead()
    _barrier(pool)
    with capture_logs() as logs:
        _add(idx, 1, 0, 1_700_000_000_000)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["mapped_file.allocate_ahead_failed"]
    assert (idx.ahead.used, idx.ahead.missed) == (0, 1) and [f.count for f in idx.files] == [1]
    idx.close()
    pool.shutdown()
